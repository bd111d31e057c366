"""The same contract on a lake whose catalog is a real PostgreSQL server (started and stopped
here, loopback only): a run imported into it reads through every view as it did in its file,
and a collector writes into it."""

from __future__ import annotations

import pandas as pd
import pytest

from rolloutscope.cli import main
from rolloutscope.store import RunStore, StoreError
from rolloutscope.store.lake_ops import copy_runs
from tests.collectors.conftest import run_sender, start_collector
from tests.lake.postgres import create_database, postgres_server, unavailable_reason
from tests.lake.test_lake_versions import check_version_1_lake, lake_as_version_1, view_frames
from tests.lake.test_moving_and_upkeep import _view_frames
from tests.synthetic_run import synthetic_run

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=unavailable_reason() or "")


@pytest.fixture(scope="module")
def conninfo():
    with postgres_server() as info:
        yield info


def test_a_new_postgres_lake_needs_a_data_path(conninfo):
    with pytest.raises(StoreError, match="--data-path"):
        RunStore(f"ducklake:postgres:{conninfo}")


def test_views_on_a_postgres_lake_match_the_file_and_a_collector_writes_it(
        conninfo, tmp_path, capsys):
    original = tmp_path / "capture.duckdb"
    assert main(["scenario", "run", "lost-reply", "--db", str(original)]) == 0
    lake = f"ducklake:postgres:{conninfo}"
    assert main(["lake", "import", str(original), lake,
                 "--data-path", str(tmp_path / "lake-data")]) == 0
    before, in_lake = _view_frames(original), _view_frames(lake)
    assert len(before["incidents"]) > 0
    for name, frame in before.items():
        pd.testing.assert_frame_equal(in_lake[name], frame, obj=f"{name} in the postgres lake")
    capsys.readouterr()
    c = start_collector(lake)
    try:
        result = run_sender("batches", "http-protobuf", c.http, "live", "3", "10",
                            str(tmp_path / "acks"))
        assert result["acked"] == 3
    finally:
        assert c.stop() == 0
    assert main(["info", lake]) == 0
    out = capsys.readouterr().out
    assert "run live" in out and "spans 30" in out


def test_a_version_1_postgres_lake_reads_as_its_file_and_is_migrated_when_written(
        conninfo, tmp_path):
    run = synthetic_run(tmp_path / "run.duckdb", spans=20_000)
    expected = view_frames(str(run))
    lake = f"ducklake:postgres:{create_database(conninfo, 'lake_v1')}"
    copy_runs(run, lake, data_path=tmp_path / "lake-data")
    lake_as_version_1(lake)
    check_version_1_lake(lake, expected)
