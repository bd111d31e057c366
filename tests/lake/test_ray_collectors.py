"""Collectors placed one per node by Ray (a local cluster here) write one lake."""

from __future__ import annotations

import os

import pytest

from rolloutscope.store import RunStore
from rolloutscope.store.lake import writer_rows
from tests.collectors.conftest import run_sender

ray = pytest.importorskip("ray", reason="the ray extra is not installed")


def test_one_collector_actor_per_node_writes_the_lake(tmp_path):
    from rolloutscope.collectors.ray import place_collectors, stop_collectors

    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        placed = place_collectors(lake)
        assert [p.node_id for p in placed] == [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        try:
            result = run_sender("batches", "http-protobuf", placed[0].http, "on-ray", "4", "25",
                                str(tmp_path / "acks"))
            assert result["acked"] == 4
        finally:
            stop_collectors(placed)
        with pytest.raises(ValueError, match="no alive Ray node"):
            place_collectors(lake, nodes=["f" * 56])
    finally:
        ray.shutdown()
    with RunStore(lake, read_only=True) as store:
        assert store.query("SELECT count(*) FROM spans WHERE run_id = 'on-ray'")[0][0] == 100
        authors = dict(writer_rows(store.raw_connection()))
    assert list(authors) == [placed[0].writer_id]
    assert int(placed[0].writer_id.split(":")[1]) != os.getpid()  # the actor's own process
