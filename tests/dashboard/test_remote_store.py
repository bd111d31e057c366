"""A run read through a running collector (``RemoteRunStore``, what the live dashboard of
``rolloutscope serve`` reads from its own process) is the run read from the file: the same
runs, the same view rows with the same types, the same dashboard frames and figures."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pandas as pd
import pytest

from rolloutscope.collectors.exporter import instrument
from rolloutscope.dashboard.datastore import VIEWS as FRAMES
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.shared import ReadTimeout, timed_frame
from rolloutscope.store import RunStore
from rolloutscope.store.remote import RemoteRunStore
from tests.collectors.conftest import start_collector
from tests.dashboard.conftest import RUN, build_p1_run
from tests.store.conftest import SpanKit

VIEWS = ("rollout_attempts", "deadlines", "parked_intervals", "checkpoint_windows",
         "shard_states", "completions", "incidents")


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> Iterator[tuple[RunStore, RemoteRunStore]]:
    """The P1 run in a file read directly, and a copy of it behind a collector."""
    root = tmp_path_factory.mktemp("remote")
    inst = instrument(root / "p1.duckdb", service_name="tests", run_id=RUN)
    try:
        build_p1_run(SpanKit(inst))
        assert inst.flush()
    finally:
        inst.shutdown()
    shutil.copy(root / "p1.duckdb", root / "served.duckdb")
    collector = start_collector(root / "served.duckdb")
    try:
        with RunStore(root / "p1.duckdb", read_only=True) as local, \
                RemoteRunStore(collector.http) as remote:
            yield local, remote
    finally:
        assert collector.stop() == 0


def test_runs_config_and_relations_are_the_files(both):
    local, remote = both
    assert remote.run_ids() == local.run_ids() == [RUN]
    assert remote.run_config(RUN) == local.run_config(RUN)
    assert remote.maintained and local.maintained
    assert [remote.relation(v) for v in VIEWS] == [local.relation(v) for v in VIEWS]


@pytest.mark.parametrize("view", VIEWS)
def test_view_rows_and_types_are_the_files(both, view):
    local, remote = both
    order = "ORDER BY ALL"
    sql = f"SELECT * FROM {local.relation(view)} WHERE run_id = ? {order}"
    pd.testing.assert_frame_equal(remote.query_df(sql, [RUN]), local.query_df(sql, [RUN]))
    pd.testing.assert_frame_equal(remote.query_frame(sql, [RUN]), local.query_frame(sql, [RUN]))
    assert remote.query(sql, [RUN]) == local.query(sql, [RUN])


def test_the_dashboards_frames_are_the_files(both):
    local, remote = both
    a, b = DataStore(local, run_id=RUN), DataStore(remote, run_id=RUN)
    assert b.problems == a.problems == []
    assert b.indicators() == a.indicators()
    for name, frame in a.frames.items():  # a view's rows come in no set order
        key = list(FRAMES[name].key)
        pd.testing.assert_frame_equal(b.frames[name].sort_values(key, ignore_index=True),
                                      frame.sort_values(key, ignore_index=True), obj=name)
    pd.testing.assert_frame_equal(b.incidents(), a.incidents())
    pd.testing.assert_frame_equal(b.attempts_table(), a.attempts_table())


def test_what_the_run_waits_on_is_the_files(both):
    from rolloutscope.store.waiting import waiting_on

    local, remote = both
    assert waiting_on(remote, RUN) == waiting_on(local, RUN)
    assert remote.query_records("SELECT $run AS run, $n + 1 AS n", {"run": RUN, "n": 1}) \
        == local.query_records("SELECT $run AS run, $n + 1 AS n", {"run": RUN, "n": 1}) \
        == [{"run": RUN, "n": 2}]


def test_a_read_past_its_time_is_a_read_timeout_naming_the_limit(both):
    _, remote = both
    with pytest.raises(ReadTimeout, match="0.5"):
        timed_frame(remote, "SELECT count(*) FROM range(100000000000) a", None, 0.5)
