"""A run moves from a file to a lake and back with every view unchanged; upkeep (retention,
compaction) runs beside a writer without failing it, and keeps what a reader may still be on;
bad lake names are refused with what was wrong."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from rolloutscope.cli import main
from rolloutscope.store import RunStore, views
from rolloutscope.store.errors import StoreError
from rolloutscope.store.lake_ops import MIN_KEEP_SNAPSHOTS_S, Maintenance, maintain
from rolloutscope.store.rows import RowBatch

S = 10**9


def _view_frames(target) -> dict[str, pd.DataFrame]:
    out = {}
    with RunStore(target, read_only=True) as store:
        for name in sorted(views.names()):
            df = store.view(name)
            df = df.astype(str)  # lists and NaNs compare as text
            out[name] = df.sort_values(list(df.columns), ignore_index=True)
        runs = store.query_df("SELECT * FROM runs").astype(str)
        out["runs"] = runs.sort_values(list(runs.columns), ignore_index=True)
    return out


def test_a_run_file_goes_into_a_lake_and_back_with_identical_views(tmp_path, capsys):
    original = tmp_path / "capture.duckdb"
    assert main(["scenario", "run", "snapshot-outlasts-deadline", "--db", str(original)]) == 0
    lake = f"ducklake:sqlite:{tmp_path / 'lake' / 'catalog.sqlite'}"
    back = tmp_path / "back.duckdb"
    assert main(["lake", "import", str(original), lake]) == 0
    assert main(["lake", "export", lake, str(back)]) == 0
    assert "copied 1 run(s)" in capsys.readouterr().out
    before, in_lake, after = _view_frames(original), _view_frames(lake), _view_frames(back)
    assert len(before["incidents"]) > 0  # the comparison compares something
    for name, frame in before.items():
        pd.testing.assert_frame_equal(in_lake[name], frame, obj=f"{name} in the lake")
        pd.testing.assert_frame_equal(after[name], frame, obj=f"{name} back in a file")
    # a run the lake already holds is refused whole
    assert main(["lake", "import", str(original), lake]) == 2
    assert "already holds run" in capsys.readouterr().err
    assert main(["lake", "export", lake, str(back)]) == 2  # never overwrites a file


def _batch(run_id: str, start: int, n: int, *, t0_ns: int = 0) -> RowBatch:
    batch = RowBatch()
    for i in range(start, start + n):
        batch.add_span(run_id=run_id, trace_id=f"{i:032x}", span_id=f"{i:016x}",
                       parent_span_id=None, name="rl.train_step", kind="INTERNAL",
                       service="svc", start_ns=t0_ns + i * S, end_ns=t0_ns + i * S + 1,
                       status_code="UNSET", status_message=None, attributes={"i": i},
                       resource_json=None, scope=None)
    return batch


def test_compaction_runs_beside_a_writer_and_merges_small_files(tmp_path):
    # no reader beside it: on a sqlite catalog a query during a merge can read a table as
    # empty (a DuckLake limitation, docs/lakes.md)
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    commits, size = 30, 40  # past the lake's inlining limit: each commit is a Parquet file
    with RunStore(lake) as store:
        writer = store.writer(max_delay_ms=1)
        upkeep = Maintenance(store, every_s=0.2, keep_snapshots_s=MIN_KEEP_SNAPSHOTS_S)
        try:
            for c in range(commits):
                writer.write(_batch("r", c * size, size), timeout=60)
            # a pass that began after the last commit (bounded)
            passes, deadline = upkeep.passes, time.monotonic() + 60
            while upkeep.passes < passes + 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            upkeep.stop()
        assert upkeep.passes >= 2, "no upkeep pass finished beside the writer"
        assert upkeep.failures == 0  # no pass lost its race with the writer for good
        assert writer.stats.failed_rows == 0
        files = store.query(
            "SELECT sum(file_count) FROM ducklake_table_info('lake') WHERE table_name='spans'"
        )[0][0]
        assert files < commits  # merged: fewer files than commits
        # the snapshots and the merged-away files are younger than the window: kept (a
        # reader could still be on them), until the clock passes it
        snapshots = store.query("SELECT count(*) FROM ducklake_snapshots('lake')")[0][0]
        span_files = tmp_path / "catalog_data" / "main" / "spans"

        def data_files_on_disk() -> int:
            return sum(not f.name.endswith("-delete.parquet") for f in span_files.iterdir())

        on_disk = data_files_on_disk()
        assert snapshots > commits and on_disk > files
        two_days_on = time.time_ns() + 2 * 86_400 * S  # a sqlite catalog's files: a day late
        report = maintain(store, keep_snapshots_s=MIN_KEEP_SNAPSHOTS_S, now_ns=two_days_on)
        assert store.query("SELECT count(*), count(DISTINCT span_id) FROM spans")[0] == (
            commits * size, commits * size)
        left = store.query("SELECT count(*) FROM ducklake_snapshots('lake')")[0][0]
        files_now = store.query(
            "SELECT sum(file_count) FROM ducklake_table_info('lake') WHERE table_name='spans'"
        )[0][0]
    assert left == 1  # only the latest snapshot is never expired
    assert data_files_on_disk() == files_now <= files < on_disk
    assert report.files_after <= report.files_before


def test_a_file_no_snapshot_tracks_goes_only_once_it_is_older_than_the_window(tmp_path):
    # a writer's Parquet file is tracked by nothing until its commit: upkeep beside it must
    # not take it for one a lost race left behind
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    with RunStore(lake) as store:
        store.writer().write(_batch("r", 0, 40), timeout=60)
        untracked = tmp_path / "catalog_data" / "main" / "spans" / "ducklake-untracked.parquet"
        store.query(f"COPY (SELECT 1 AS i) TO '{untracked}' (FORMAT parquet)")
        maintain(store, keep_snapshots_s=MIN_KEEP_SNAPSHOTS_S)
        assert untracked.exists()
        maintain(store, keep_snapshots_s=MIN_KEEP_SNAPSHOTS_S,
                 now_ns=time.time_ns() + 2 * 86_400 * S)
        assert not untracked.exists()
        assert store.query("SELECT count(*) FROM spans")[0][0] == 40


@pytest.mark.parametrize("keep_s", [0, 59.9, float("nan")])
def test_a_snapshot_window_a_query_could_outlive_is_refused(tmp_path, keep_s):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    with RunStore(lake) as store:
        with pytest.raises(StoreError, match="at least 60 s.*sees its rows as gone"):
            maintain(store, keep_snapshots_s=keep_s)
        with pytest.raises(StoreError, match="at least 60 s"):
            Maintenance(store, every_s=1, keep_snapshots_s=keep_s)


def test_the_cli_refuses_a_snapshot_window_under_a_minute(tmp_path, capsys):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    assert main(["lake", "maintain", lake, "--keep-snapshots-hours", "0"]) == 2
    assert "--keep-snapshots-hours 0: snapshots must be kept at least 60 s" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("kind", ["file", "lake"])
def test_retention_drops_rows_older_than_the_window_and_keeps_the_rest(tmp_path, kind):
    target = (tmp_path / "run.duckdb" if kind == "file"
              else f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}")
    now = 1_800_000_000 * S
    with RunStore(target) as store:
        # 100 spans one second apart, the last ending at ``now``
        store.writer().write(_batch("r", 0, 100, t0_ns=now - 99 * S - 1), timeout=60)
        report = maintain(store, retain_s=30, now_ns=now)
        kept = store.query("SELECT min(end_ns), count(*) FROM spans")[0]
    # span i ends at now - (99 - i) s: those ending before now - 30 s (i < 69) go
    assert report.deleted_rows["spans"] == 69
    assert kept == (now - 30 * S, 31)
    with pytest.raises(Exception, match="positive"):
        with RunStore(target) as store:
            maintain(store, retain_s=0)


@pytest.mark.parametrize(("spec", "says"), [
    ("ducklake:mysql:x", "must be one of sqlite, postgres"),
    ("ducklake:sqlite:", "names no sqlite catalog"),
    ("ducklake:postgres:lake", "libpq connection string"),
    ("ducklake", "not a lake"),
])
def test_a_bad_lake_name_is_a_usage_error_that_says_what_was_wrong(spec, says, capsys):
    if spec == "ducklake":  # a bare word is a path for the CLI; the library names it
        from rolloutscope.store.lake import LakeSpecError, parse

        with pytest.raises(LakeSpecError, match=says):
            parse(spec)
        return
    with pytest.raises(SystemExit) as exit_:
        main(["info", spec])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_a_lake_catalog_that_is_a_directory_or_another_file_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["incidents", f"ducklake:sqlite:{tmp_path}"])
    assert "is a directory" in capsys.readouterr().err
    other = tmp_path / "notes.txt"
    other.write_text("not a catalog")
    with pytest.raises(SystemExit):
        main(["info", f"ducklake:sqlite:{other}"])
    assert "not an SQLite database" in capsys.readouterr().err
    assert main(["info", f"ducklake:sqlite:{tmp_path / 'missing.sqlite'}"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_replay_reads_its_capture_from_a_lake_and_writes_its_replay_into_one(tmp_path, capsys):
    lake = f"ducklake:sqlite:{tmp_path / 'capture.sqlite'}"
    assert main(["scenario", "run", "lost-reply", "--db", lake]) == 0
    out_lake = f"ducklake:sqlite:{tmp_path / 'replays.sqlite'}"
    report = tmp_path / "report.md"
    assert main(["replay", lake, "--out", out_lake, "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "reproduced" in printed
    assert "reproduced in the replay" in report.read_text()
    with RunStore(out_lake, read_only=True) as store:
        assert len(store.view("incidents")) > 0


def test_size_retention_drops_the_oldest_rows_until_the_lake_is_under_the_size(tmp_path, capsys):
    from rolloutscope.store.lake_ops import data_bytes

    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    commits, size = 12, 200  # one Parquet file per commit, oldest spans first
    with RunStore(lake) as store:
        writer = store.writer(max_delay_ms=1)
        for c in range(commits):
            writer.write(_batch("r", c * size, size), timeout=60)
        cur = store.new_cursor()
        full = data_bytes(cur)
        report = maintain(store, retain_bytes=full // 2)
        after = data_bytes(cur)
        cur.close()
        kept = store.query("SELECT min(start_ns), max(start_ns), count(*) FROM spans")[0]
    assert 0 < after <= full // 2
    assert report.data_bytes == after
    dropped = report.deleted_rows["spans"]
    assert 0 < dropped < commits * size
    # exactly the oldest went: what is left is the newest spans, every one of them
    assert kept == (dropped * S, (commits * size - 1) * S, commits * size - dropped)
    # the command: a size in GiB, for a lake only
    assert main(["lake", "maintain", lake, "--retain-gib", str(after / 2**30 / 2)]) == 0
    assert "retention dropped" in capsys.readouterr().out
    with RunStore(lake, read_only=True) as store:
        assert data_bytes(store.raw_connection()) <= after / 2
    assert main(["lake", "maintain", str(tmp_path / "run.duckdb"), "--retain-gib", "1"]) == 2
    assert "--retain-gib is for a lake" in capsys.readouterr().err
    assert main(["lake", "maintain", lake, "--retain-gib", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err
