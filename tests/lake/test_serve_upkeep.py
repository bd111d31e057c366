"""``rolloutscope serve --maintain-every-s``: upkeep in the collector process, beside its
writer, compacting the lake it writes while senders send, and losing nothing acknowledged."""

from __future__ import annotations

import time

import pytest

from rolloutscope.cli import main
from rolloutscope.store import RunStore
from tests.collectors.conftest import run_sender, start_collector


def _files(lake: str) -> int:
    with RunStore(lake, read_only=True) as store:
        files = store.query("SELECT sum(file_count) FROM ducklake_table_info('lake') "
                            "WHERE table_name = 'spans'")[0][0]
    return int(files or 0)


def test_serve_maintains_the_lake_it_writes_every_few_seconds(tmp_path):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    batches, size = 8, 60  # each acknowledged batch its own commit, past the inlining limit
    collector = start_collector(lake, "--maintain-every-s", "0.3")
    try:
        result = run_sender("batches", "http-protobuf", collector.http, "upkept",
                            str(batches), str(size), str(tmp_path / "acks"))
        assert result["acked"] == batches
        # compaction merged the commits' files (their snapshots are kept for the hour the
        # default window holds them: tests/lake/test_moving_and_upkeep.py expires them);
        # wait for a pass that ran after the last commit (bounded)
        deadline = time.monotonic() + 60
        while (files := _files(lake)) >= batches:
            assert time.monotonic() < deadline, files
            time.sleep(0.3)
    finally:
        assert collector.stop() == 0
    with RunStore(lake, read_only=True) as store:
        assert store.query("SELECT count(*), count(DISTINCT span_id) FROM spans "
                           "WHERE run_id = 'upkept'")[0] == (batches * size, batches * size)


@pytest.mark.parametrize(("args", "says"), [
    (["--retain-hours", "1"], "--retain-hours needs --maintain-every-s"),
    (["--retain-gib", "1"], "--retain-gib needs --maintain-every-s"),
    (["--maintain-every-s", "0"], "--maintain-every-s must be positive"),
    (["--maintain-every-s", "1", "--keep-snapshots-hours", "0.01"],
     "--keep-snapshots-hours 0.01: snapshots must be kept at least 60 s"),
])
def test_serve_refuses_upkeep_options_that_cannot_apply(tmp_path, capsys, args, says):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    assert main(["serve", "--db", lake, "--otlp-http-port", "0", "--otlp-grpc-port", "0",
                 "--no-dashboard", *args]) == 2
    assert says in capsys.readouterr().err
