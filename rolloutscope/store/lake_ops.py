"""Moving runs between a DuckDB file and a lake, and keeping a lake small and young.

``copy_runs`` copies a store's runs into another store of either kind: a laptop capture into
the cluster lake, or one run of the lake home as a file. The views read the same rows on both.

``maintain`` is one pass of upkeep: retention first (drop what is older than ``retain_s``,
and on a lake the oldest rows until its data files hold under ``retain_bytes``), then
DuckLake's own compaction: merge the small Parquet files that group commits leave,
expire snapshots older than ``keep_snapshots_s`` and delete the files nothing refers to any
more. Each step is its own short transaction, retried when it loses a race with a writer, so
writers and readers go on meanwhile: a reader keeps reading the snapshot its query began on,
as long as that snapshot is kept. DuckLake does not know which snapshots readers are on, and a
query whose snapshot expires under it reads the rows as gone (an empty table, not an error),
so ``keep_snapshots_s`` is at least ``MIN_KEEP_SNAPSHOTS_S`` and should outlast the longest
query.
Expiring a snapshot forgets its author: rows stay, their writer id goes with the snapshot
(``keep_snapshots_s`` bounds how long attribution lasts). ``Maintenance`` runs it on a timer
in a background thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from rolloutscope.store import lake as _lake
from rolloutscope.store.errors import StoreError
from rolloutscope.store.schema import BATCH_TABLES, COLUMNS, RUN_COLUMNS, select_list
from rolloutscope.store.store import RunStore

log = logging.getLogger(__name__)

SRC = "rs_src"
MIN_KEEP_SNAPSHOTS_S = 60.0


class RunCollisionError(StoreError):
    """The destination already holds a run being copied in."""


def _attach_source(con: duckdb.DuckDBPyConnection, source: str | Path | _lake.LakeSpec) -> None:
    if _lake.is_lake(source):
        spec = _lake.parse(source)
        if not spec.exists():
            raise StoreError(f"{spec}: the lake's catalog {spec.target} does not exist")
        _lake.load_extensions(con, spec.catalog)
        con.execute(f"ATTACH '{_lake._quote(spec.attach_target)}' AS {SRC} (READ_ONLY)")
    else:
        with RunStore(source, read_only=True) as src:  # checks it is a run store
            path = src.path
        con.execute(f"ATTACH '{_lake._quote(str(path))}' AS {SRC} (READ_ONLY)")


def copy_runs(source: str | Path | _lake.LakeSpec, dest: str | Path | _lake.LakeSpec, *,
              run_ids: Sequence[str] | None = None,
              data_path: str | Path | None = None) -> list[str]:
    """Copy ``run_ids`` (default: every run) of ``source`` into ``dest`` (created if
    needed); returns the runs copied. Refuses a run the destination already holds."""
    if str(_lake.parse(source) if _lake.is_lake(source) else Path(source).resolve()) == str(
            _lake.parse(dest) if _lake.is_lake(dest) else Path(dest).resolve()):
        raise StoreError("the source and the destination are the same store")
    with RunStore(dest, data_path=data_path) as store:
        cur = store.new_cursor()
        try:
            _attach_source(cur, source)
            have = set(store.run_ids())
            offered = [r[0] for r in cur.execute(
                f"SELECT run_id FROM (SELECT run_id FROM {SRC}.runs UNION "
                f"SELECT DISTINCT run_id FROM {SRC}.spans) WHERE run_id IS NOT NULL "
                f"ORDER BY 1").fetchall()]
            wanted = list(offered if run_ids is None else run_ids)
            unknown = sorted(set(wanted) - set(offered))
            if unknown:
                raise StoreError(f"{source} holds no run {', '.join(unknown)}; runs: "
                                 f"{', '.join(offered) or 'none'}")
            clash = sorted(set(wanted) & have)
            if clash:
                raise RunCollisionError(f"{dest} already holds run {', '.join(clash)}: "
                                        f"nothing copied")
            if not wanted:
                return []

            # a source of an older version gets the columns it lacks computed as they go
            version = cur.execute(f"SELECT max(CAST(value AS INTEGER)) FROM {SRC}.store_meta "
                                  f"WHERE key = 'schema_version'").fetchall()[0][0]

            def work(c: duckdb.DuckDBPyConnection) -> None:
                if store.is_lake:
                    _lake.stamp_commit(c, store.writer_id, f"copied from {source}")
                c.execute("CREATE OR REPLACE TEMP TABLE rs_wanted (run_id VARCHAR)")
                c.executemany("INSERT INTO rs_wanted VALUES (?)", [[r] for r in wanted])
                for table in BATCH_TABLES:
                    c.execute(f"INSERT INTO {table} ({', '.join(COLUMNS[table])}) "
                              f"SELECT {select_list(table, version)} FROM {SRC}.{table} "
                              f"WHERE run_id IN (SELECT run_id FROM rs_wanted)")
                cols = ", ".join(RUN_COLUMNS)
                select = (f"SELECT {cols} FROM {SRC}.runs "
                          f"WHERE run_id IN (SELECT run_id FROM rs_wanted)")
                if store.is_lake:
                    c.execute(f"INSERT INTO run_records ({cols}, recorded_ns, writer_id) "
                              f"SELECT *, ?, ? FROM ({select})",
                              [time.time_ns(), store.writer_id])
                else:
                    c.execute(f"INSERT INTO runs ({cols}) {select}")

            if store.is_lake:
                _lake.with_retries(cur, work)
            else:
                cur.execute("BEGIN")
                work(cur)
                cur.execute("COMMIT")
            return wanted
        except duckdb.Error as exc:
            raise StoreError(f"copying {source} into {dest}: {exc}") from exc
        finally:
            cur.close()


# -- upkeep ------------------------------------------------------------------------------------
# The time each batch table's rows are aged by.
_AGE = {"spans": "coalesce(end_ns, start_ns)", "open_spans": "start_ns",
        "span_events": "ts_ns", "metrics": "ts_ns", "logs": "ts_ns"}


@dataclass(frozen=True, kw_only=True)
class MaintenanceReport:
    deleted_rows: dict[str, int]
    files_before: int
    files_after: int
    seconds: float
    data_bytes: int | None = None  # a lake's, after the pass

    def line(self) -> str:
        dropped = sum(self.deleted_rows.values())
        return (f"retention dropped {dropped:,} row(s); data files {self.files_before} -> "
                f"{self.files_after}"
                + ("" if self.data_bytes is None else f" ({self.data_bytes / 2**20:,.1f} MiB)")
                + f"; {self.seconds:.2f} s")


def _data_files(cur: duckdb.DuckDBPyConnection) -> int:
    return int(cur.execute(
        f"SELECT coalesce(sum(file_count), 0) FROM ducklake_table_info('{_lake.ALIAS}')"
    ).fetchall()[0][0])


def data_bytes(cur: duckdb.DuckDBPyConnection) -> int:
    """Bytes of the data and delete files the lake's latest snapshot refers to (files only
    older snapshots refer to stay on disk until those snapshots expire)."""
    return int(cur.execute(
        f"SELECT coalesce(sum(file_size_bytes + delete_file_size_bytes), 0) "
        f"FROM ducklake_table_info('{_lake.ALIAS}')").fetchall()[0][0])


def _delete_older(store: RunStore, cur: duckdb.DuckDBPyConnection, cutoff_ns: int,
                  deleted: dict[str, int]) -> None:
    for table, age in _AGE.items():
        deleted[table] = deleted.get(table, 0) + _delete(
            store, cur, f"DELETE FROM {table} WHERE {age} < ?", [cutoff_ns])
    deleted["span_links"] = deleted.get("span_links", 0) + _delete(
        store, cur, "DELETE FROM span_links l WHERE NOT EXISTS (SELECT 1 FROM spans s "
        "WHERE s.trace_id = l.trace_id AND s.span_id = l.span_id)", [])


# Each pass drops the oldest share of rows the excess suggests; a pass can undershoot (old
# rows may be smaller than the average, and files carry bytes no row deletion removes: footers,
# delete files, tables no age applies to), so it measures again, a few times at most, and each
# pass that fell short drops twice the share of the one before.
_SIZE_PASSES = 6


def _retain_size(store: RunStore, cur: duckdb.DuckDBPyConnection, retain_bytes: int,
                 deleted: dict[str, int]) -> None:
    """Drop the oldest rows (by the same ages as time retention, every table at one cutoff)
    until the latest snapshot's files hold at most ``retain_bytes``; deleted rows are
    rewritten out of their files so the bytes really go."""
    lake = _lake.ALIAS
    ages = " UNION ALL ".join(f"SELECT {age} AS age_ns FROM {table}"
                              for table, age in _AGE.items())
    for attempt in range(_SIZE_PASSES):
        _lake.with_retries(cur, lambda c: c.execute(
            f"CALL ducklake_flush_inlined_data('{lake}')").fetchall())
        size = data_bytes(cur)
        if size <= retain_bytes:
            return
        share = min(1.0, (1.0 - retain_bytes / size) * 2 ** attempt)
        cutoff, oldest = cur.execute(
            f"SELECT quantile_disc(age_ns, ?), min(age_ns) FROM ({ages}) "
            f"WHERE age_ns IS NOT NULL", [share]).fetchall()[0]
        if cutoff is None:  # no row has an age: what remains is not data to age out
            return
        # rows strictly older than the cutoff, and always at least the oldest instant's
        _delete_older(store, cur, max(int(cutoff), int(oldest) + 1), deleted)
        for call in (f"CALL ducklake_rewrite_data_files('{lake}', delete_threshold => 0.0)",
                     f"CALL ducklake_merge_adjacent_files('{lake}')"):
            _lake.with_retries(cur, lambda c, sql=call: c.execute(sql).fetchall())


def maintain(store: RunStore, *, retain_s: float | None = None,
             retain_bytes: int | None = None, keep_snapshots_s: float = 3600.0,
             now_ns: int | None = None) -> MaintenanceReport:
    """One pass of retention and compaction (see the module doc). ``now_ns`` is the clock
    retention and snapshot expiry count back from (default: the wall clock). ``retain_bytes`` (a lake only)
    drops the oldest rows until the latest snapshot's data files hold at most that many."""
    store._require_writable()
    check_keep_snapshots(keep_snapshots_s)
    if retain_bytes is not None:
        if not store.is_lake:
            raise StoreError("size retention is for a lake: a DuckDB file does not shrink "
                             "when rows go (use time retention)")
        if retain_bytes <= 0:
            raise StoreError(f"size retention must be positive, not {retain_bytes} bytes")
    t0 = time.perf_counter()
    now_ns = time.time_ns() if now_ns is None else now_ns
    cur = store.new_cursor()
    deleted: dict[str, int] = {}
    # a reader: all of DuckDB's threads, however long the writer has been alone
    with store.reading():
        try:
            files_before = _data_files(cur) if store.is_lake else 0
            if retain_s is not None:
                if retain_s <= 0:
                    raise StoreError(f"retention must be positive, not {retain_s}")
                _delete_older(store, cur, now_ns - int(retain_s * 1e9), deleted)
            if retain_bytes is not None:
                _retain_size(store, cur, int(retain_bytes), deleted)
            if not store.is_lake:
                cur.execute("CHECKPOINT")
                return MaintenanceReport(deleted_rows=deleted, files_before=0, files_after=0,
                                         seconds=time.perf_counter() - t0)
            lake = _lake.ALIAS
            for call in (f"CALL ducklake_flush_inlined_data('{lake}')",
                         f"CALL ducklake_merge_adjacent_files('{lake}')"):
                _lake.with_retries(cur, lambda c, sql=call: c.execute(sql).fetchall())
            _expire_and_clean(store, cur, now_ns - int(keep_snapshots_s * 1e9))
            return MaintenanceReport(deleted_rows=deleted, files_before=files_before,
                                     files_after=_data_files(cur),
                                     seconds=time.perf_counter() - t0, data_bytes=data_bytes(cur))
        finally:
            cur.close()


def _expire_and_clean(store: RunStore, cur: duckdb.DuckDBPyConnection, cutoff_ns: int) -> None:
    """Expire the snapshots older than ``cutoff_ns`` and delete the files only they held.

    DuckLake's own ``older_than`` is exact on a postgres catalog, but a sqlite catalog keeps
    the times as text and compares them by day: every snapshot of the cutoff's day would go,
    the one a query began on a moment ago included, and that query reads an empty table. So
    the snapshots are chosen here, by their typed times, and expired by id. Files cannot be
    chosen by id: on a sqlite catalog their cutoff is the end of the day before, so a file
    stays on disk up to a day past ``keep_snapshots_s`` and is never deleted early."""
    lake = _lake.ALIAS

    def at(ns: int) -> str:  # an instant, whatever the session's TimeZone
        return f"(to_timestamp(0) + to_microseconds({ns // 1000}))"

    cutoff = at(cutoff_ns)
    day_ns = 86_400 * 10**9
    files_cutoff = (at(cutoff_ns // day_ns * day_ns - 1000) if store.lake.catalog == "sqlite"
                    else cutoff)

    def expire(c: duckdb.DuckDBPyConnection) -> None:
        old = [r[0] for r in c.execute(
            f"SELECT snapshot_id FROM ducklake_snapshots('{lake}') WHERE snapshot_time < "
            f"{cutoff} AND snapshot_id < (SELECT max(snapshot_id) FROM "
            f"ducklake_snapshots('{lake}')) ORDER BY snapshot_id").fetchall()]
        if old:
            c.execute(f"CALL ducklake_expire_snapshots('{lake}', versions => ?)",
                      [old]).fetchall()

    _lake.with_retries(cur, expire)
    _lake.with_retries(cur, lambda c: c.execute(
        f"CALL ducklake_cleanup_old_files('{lake}', older_than => {files_cutoff})").fetchall())
    # a commit, flush or merge that lost its race left the files it had written, tracked by
    # nothing; a writer's files are untracked too until its commit, so only old ones go
    _lake.with_retries(cur, lambda c: c.execute(
        f"CALL ducklake_delete_orphaned_files('{lake}', older_than => {cutoff})").fetchall())


def check_keep_snapshots(keep_snapshots_s: float) -> None:
    """Refuse a snapshot window a running query could outlive (see the module doc)."""
    if not keep_snapshots_s >= MIN_KEEP_SNAPSHOTS_S:
        raise StoreError(
            f"snapshots must be kept at least {MIN_KEEP_SNAPSHOTS_S:.0f} s, not "
            f"{keep_snapshots_s:g} s: a query still reading an expired snapshot sees its rows "
            f"as gone (keep them longer than the longest query; the default is 1 hour)")


def _delete(store: RunStore, cur: duckdb.DuckDBPyConnection, sql: str, params: list) -> int:
    out: list[int] = []

    def work(c: duckdb.DuckDBPyConnection) -> None:
        out[:] = [c.execute(sql, params).fetchall()[0][0]]

    if store.is_lake:
        _lake.with_retries(cur, work)
    else:
        work(cur)
    return out[0] if out else 0


class Maintenance:
    """``maintain`` every ``every_s`` seconds in a daemon thread, until ``stop()``.
    ``passes`` counts the passes that finished, ``failures`` those that failed (each logged;
    the next pass tries again)."""

    def __init__(self, store: RunStore, *, every_s: float, retain_s: float | None = None,
                 retain_bytes: int | None = None, keep_snapshots_s: float = 3600.0) -> None:
        if every_s <= 0:
            raise StoreError(f"maintenance interval must be positive, not {every_s}")
        check_keep_snapshots(keep_snapshots_s)
        self._store, self.every_s = store, every_s
        self._kw = {"retain_s": retain_s, "retain_bytes": retain_bytes,
                    "keep_snapshots_s": keep_snapshots_s}
        self._stop = threading.Event()
        self.passes = self.failures = 0
        self.last: MaintenanceReport | None = None
        self._thread = threading.Thread(target=self._run, name="rolloutscope-lake-upkeep",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.last = maintain(self._store, **self._kw)
                self.passes += 1
            except Exception as exc:  # noqa: BLE001 - upkeep never stops the collector
                self.failures += 1
                log.warning("lake upkeep failed (tried again in %.0f s): %s", self.every_s,
                            exc)

    def stop(self, timeout: float | None = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
