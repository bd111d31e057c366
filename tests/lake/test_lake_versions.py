"""A lake written before spans had the copied attributes' columns (schema version 1): opened
read-only it reads through columns computed as it is read, opened for writing it is migrated,
and either way every view reads the rows it read in the run's file. ``lake_as_version_1``
also serves the PostgreSQL-catalog lake's test (test_postgres_lake.py)."""

from __future__ import annotations

import pandas as pd

from rolloutscope.store import RunStore
from rolloutscope.store import lake as _lake
from rolloutscope.store.fit import COPIED
from rolloutscope.store.lake_ops import copy_runs
from rolloutscope.store.schema import COLUMNS, SCHEMA_VERSION
from tests.synthetic_run import synthetic_run

VIEWS = ("incidents", "rollout_attempts", "deadlines", "http_requests", "gym_attempts")


def lake_as_version_1(spec: str) -> None:
    """Make the lake ``spec`` what the previous version wrote: spans without the copied
    columns, and version 1 in store_meta."""
    con = _lake.connect(_lake.parse(spec), read_only=False)
    try:
        for table in ("spans", "open_spans"):
            for copy in COPIED:
                con.execute(f"ALTER TABLE {table} DROP COLUMN {copy.column}")
        con.execute("DELETE FROM store_meta WHERE key = 'schema_version'")
        con.execute("INSERT INTO store_meta VALUES ('schema_version', '1')")
    finally:
        con.close()


def view_frames(store: RunStore | str) -> dict[str, pd.DataFrame]:
    def read(s: RunStore) -> dict[str, pd.DataFrame]:
        return {view: s.query_df(f"SELECT * FROM {view} ORDER BY ALL") for view in VIEWS}

    if isinstance(store, RunStore):
        return read(store)
    with RunStore(store, read_only=True) as s:
        return read(s)


def check_version_1_lake(lake: str, expected: dict[str, pd.DataFrame]) -> None:
    """``lake`` (made version 1) reads ``expected`` read-only, then migrates when opened for
    writing and reads the same."""
    with RunStore(lake, read_only=True) as store:
        assert store.query("SELECT max(value) FROM store_meta "
                           "WHERE key = 'schema_version'") == [("1",)]
        for view, frame in view_frames(store).items():
            pd.testing.assert_frame_equal(frame, expected[view], obj=f"{view}, read-only")
    with RunStore(lake) as store:
        assert store.query("SELECT max(CAST(value AS INTEGER)) FROM store_meta "
                           "WHERE key = 'schema_version'") == [(SCHEMA_VERSION,)]
        columns = tuple(r[0] for r in store.query("DESCRIBE spans"))
        assert columns == COLUMNS["spans"]
        for view, frame in view_frames(store).items():
            pd.testing.assert_frame_equal(frame, expected[view], obj=f"{view}, migrated")


def test_a_version_1_lake_reads_as_its_file_and_is_migrated_when_written(tmp_path) -> None:
    run = synthetic_run(tmp_path / "run.duckdb", spans=20_000)
    expected = view_frames(str(run))
    assert len(expected["incidents"]) > 0
    lake = f"ducklake:sqlite:{tmp_path / 'lake.sqlite'}"
    copy_runs(run, lake)
    lake_as_version_1(lake)
    check_version_1_lake(lake, expected)
