"""A lake's data files follow time: a read of one window opens only the files holding that
window's rows, as the collectors wrote them and still after upkeep (merged files, retention,
expired snapshots). Counted from DuckLake's own metadata: the files a query opened (EXPLAIN
ANALYZE) and each file's min/max statistics in the catalog."""

from __future__ import annotations

import time

from rolloutscope.store import RunStore
from rolloutscope.store.lake import ALIAS, files_read, window_files
from rolloutscope.store.lake_ops import MIN_KEEP_SNAPSHOTS_S, data_bytes, maintain
from rolloutscope.store.rows import RowBatch

S = 10**9
H = 3600 * S
HOURS = 5
COMMITS_PER_HOUR = 3
SPANS_PER_COMMIT = 40  # past the lake's inlining limit: each commit is a Parquet file
# hours on the wall clock (whole hours, long enough ago), so that retention and snapshot
# expiry can be run at a chosen "now"
T0 = (time.time_ns() // H - 24) * H
WINDOW = "SELECT count(*) FROM spans WHERE start_ns >= ? AND start_ns < ?"


def _commit(run_id: str, hour: int, c: int) -> RowBatch:
    """One commit's spans: a stretch of ``hour``, ended as a collector receives them."""
    batch = RowBatch()
    base = T0 + hour * H + c * (H // COMMITS_PER_HOUR)
    step = (H // COMMITS_PER_HOUR) // (SPANS_PER_COMMIT + 1)
    for i in range(SPANS_PER_COMMIT):
        n = (hour * COMMITS_PER_HOUR + c) * SPANS_PER_COMMIT + i
        batch.add_span(run_id=run_id, trace_id=f"{n:032x}", span_id=f"{n:016x}",
                       parent_span_id=None, name="rl.rollout.attempt", kind="INTERNAL",
                       service="svc", start_ns=base + i * step, end_ns=base + i * step + S,
                       status_code="UNSET", status_message=None, attributes={"n": n},
                       resource_json=None, scope=None)
    return batch


def _files_holding(store: RunStore, lo: int, hi: int) -> tuple[int, int]:
    """(current data files of spans with a row starting in [lo, hi), all of them), each file
    read on its own, apart from DuckLake."""
    paths = [r[0] for r in store.query(f"SELECT data_file FROM ducklake_list_files('{ALIAS}', "
                                       f"'spans')")]
    holding = sum(1 for p in paths if store.query(
        "SELECT count(*) FROM read_parquet(?) WHERE start_ns >= ? AND start_ns < ?",
        [p, lo, hi])[0][0] > 0)
    return holding, len(paths)


def _check_windows(store: RunStore, hours: range) -> dict[int, int]:
    """For each hour: DuckLake opens exactly the files whose statistics overlap it, those are
    the files holding its rows (none for an hour without rows), and they are not all files.
    Returns the rows per hour."""
    con = store.raw_connection()
    rows = {}
    for h in hours:
        lo, hi = T0 + h * H, T0 + (h + 1) * H
        rows[h] = store.query(WINDOW, [lo, hi])[0][0]
        holding, total = _files_holding(store, lo, hi)
        overlapping, listed = window_files(con, lo, hi)
        assert listed == total
        assert overlapping == holding, (h, overlapping, holding)
        assert files_read(con, WINDOW, [lo, hi]) == holding, h
        assert holding < total and (holding > 0) == (rows[h] > 0), (h, holding, total)
    return rows


def _time_ordered(store: RunStore) -> list[tuple[int, int]]:
    """Each current data file's start_ns range, in order of its smallest."""
    paths = [r[0] for r in store.query(f"SELECT data_file FROM ducklake_list_files('{ALIAS}', "
                                       f"'spans')")]
    ranges = [tuple(store.query("SELECT min(start_ns), max(start_ns) FROM read_parquet(?)",
                                [p])[0]) for p in paths]
    return sorted(r for r in ranges if r[0] is not None)


def test_a_window_read_opens_only_that_windows_files_before_and_after_upkeep(tmp_path):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    per_hour = COMMITS_PER_HOUR * SPANS_PER_COMMIT
    # two collectors taking turns, as two writers of one lake commit
    with RunStore(lake) as a, RunStore(lake) as b:
        writers = [a.writer(max_delay_ms=1), b.writer(max_delay_ms=1)]
        for h in range(HOURS):
            for c in range(COMMITS_PER_HOUR):
                writers[(h + c) % 2].write(_commit("r", h, c), timeout=60)
        for w in writers:
            w.close()
    with RunStore(lake, read_only=True) as store:
        assert _check_windows(store, range(HOURS)) == {h: per_hour for h in range(HOURS)}
        assert _files_holding(store, T0, T0 + HOURS * H)[1] == HOURS * COMMITS_PER_HOUR

    with RunStore(lake) as store:
        # merged files of about two commits' size: several per run, so a window has others
        # to skip (DuckLake's default target merges this small run into one file)
        store.query(f"CALL {ALIAS}.set_option('target_file_size', '6KB')")
        now = T0 + (HOURS + 24) * H
        report = maintain(store, retain_s=(now - (T0 + H)) / S,
                          keep_snapshots_s=MIN_KEEP_SNAPSHOTS_S, now_ns=max(now, time.time_ns()))
        assert report.deleted_rows["spans"] == per_hour  # the first hour went
        assert report.files_after < report.files_before  # files were merged
        assert store.query("SELECT count(*) FROM ducklake_snapshots('lake')")[0][0] == 1
    with RunStore(lake, read_only=True) as store:
        assert _files_holding(store, T0, T0 + HOURS * H)[1] < (HOURS - 1) * COMMITS_PER_HOUR
        assert _check_windows(store, range(HOURS)) == {0: 0, **{h: per_hour
                                                                for h in range(1, HOURS)}}
        # merging kept the files in time order: no two files' ranges overlap
        ranges = _time_ordered(store)
        assert all(prev[1] < nxt[0] for prev, nxt in zip(ranges, ranges[1:])), ranges

    # size retention: the oldest rows go and their files are rewritten without them
    with RunStore(lake) as store:
        size = data_bytes(store.raw_connection())
        report = maintain(store, retain_bytes=int(size * 0.8),
                          keep_snapshots_s=MIN_KEEP_SNAPSHOTS_S, now_ns=max(now, time.time_ns()))
        assert report.deleted_rows["spans"] > 0
    with RunStore(lake, read_only=True) as store:
        rows = _check_windows(store, range(HOURS))
        assert rows[HOURS - 1] == per_hour and sum(rows.values()) < (HOURS - 1) * per_hour
        ranges = _time_ordered(store)
        assert all(prev[1] < nxt[0] for prev, nxt in zip(ranges, ranges[1:])), ranges


def test_window_files_counts_the_files_a_window_of_another_column_overlaps(tmp_path):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    with RunStore(lake) as store:
        w = store.writer(max_delay_ms=1)
        for h in range(2):
            w.write(_commit("r", h, 0), timeout=60)
        w.close()
        con = store.raw_connection()
        assert window_files(con, T0 + H, T0 + 2 * H, column="end_ns") == (1, 2)
        assert window_files(con, T0 + 5 * H, T0 + 6 * H, column="end_ns") == (0, 2)
