"""RunStore: the one owner of a run's DuckDB file in this process.

Rule: one ``RunStore`` per file per process. It owns the DuckDB connection and lends a fresh
cursor to each caller (DuckDB cursors are cheap duplicate connections, safe across threads), and
it owns the single ``StoreWriter`` that appends. Readers in *other* processes open a finished
file read-only; while a collector writes, they go through its query endpoint instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from rolloutscope.store import derived as _derived
from rolloutscope.store import lake as _lake
from rolloutscope.store import views as _views
from rolloutscope.store.errors import (
    NotARunStoreError,
    ReadOnlyStoreError,
    SchemaVersionError,
    StoreError,
    translate,
)
from rolloutscope.store.schema import DDL, SCHEMA_VERSION, legacy_views, migration
from rolloutscope.vocabulary import RunSource

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

# Every connection and cursor of a store buffers a query's whole result for its reader instead
# of DuckDB's default 976.5 KiB stream buffer: with the small buffer, a large union read to the
# client (``SELECT * FROM rs_read.incidents`` on a 10^8-span run) left every DuckDB thread
# parked and the query never returned nor honoured interrupt(), while the same query into a
# table took 6 s (tests/store/test_store_files.py). Readers fetch whole results anyway, and
# DuckDB's memory limit still bounds them.
STREAM_BUFFER_SQL = "SET streaming_buffer_size = '1GB'"

DEFAULT_FILE_NAME = "run.duckdb"
# rows per Arrow batch of ``query_frame``: DuckDB allocates a batch's buffers for all its rows
# however few it holds (at its default of 1M rows a 10-row result held ~100 MB of address space,
# enough that a test process which kept a few hundred of them could no longer fork)
ARROW_BATCH_ROWS = 65_536
_NOT_AN_ID = re.compile(r"[^A-Za-z0-9._-]+")


def default_run_name(path: Path) -> str:
    """The run a store files rows without ``nemo.run.id`` under: the file's name without its
    suffix, or the folder's name for a ``run.duckdb`` (a run directory)."""
    name = path.parent.name if path.name == DEFAULT_FILE_NAME else path.stem
    return _NOT_AN_ID.sub("-", name).strip("-.") or "run"


def resolve_path(path: str | Path | _lake.LakeSpec) -> Path | _lake.LakeSpec:
    """A run is a ``.duckdb`` file, a directory holding ``run.duckdb``, or a lake
    (``ducklake:sqlite:PATH`` / ``ducklake:postgres:CONNINFO``, see ``lake.py``)."""
    if _lake.is_lake(path):
        return _lake.parse(path)
    p = Path(path)
    if p.is_dir() or (not p.suffix and not p.exists()):
        return p / DEFAULT_FILE_NAME
    return p


class RunCatalog:
    """What every reader asks of a run store, over its ``query``, ``query_df`` and
    ``maintained``: the same for a store opened in this process (``RunStore``) and one read
    through a running collector (``remote.RemoteRunStore``)."""

    def view(self, name: str, *, run_id: str | None = None) -> pd.DataFrame:
        """A model or incident view as a DataFrame, optionally for one run: read from the
        maintained rows where the store keeps them (``relation``)."""
        if name not in _views.names():
            raise StoreError(f"unknown view {name!r}; known: {', '.join(sorted(_views.names()))}")
        rel = self.relation(name)  # name is from the allowlist
        if run_id is None:
            return self.query_df(f"SELECT * FROM {rel}")
        return self.query_df(f"SELECT * FROM {rel} WHERE run_id = ?", [run_id])

    def relation(self, name: str) -> str:
        """What a reader selects from for view ``name``: its maintained form
        (``rs_read.<name>``: the stored rows and those of spans not derived yet, equal to the
        view) where the store keeps one, else the view itself."""
        if name not in _views.names() or not self.maintained:
            return name
        if name == "incidents" and self._incidents_kept():
            return "main.d_incidents"  # computed over exactly what the store holds now
        if name in _derived.STEP_VIEWS and self._incidents_kept():
            return f"main.d_final_{name}"  # kept with them
        return f"rs_read.{name}"

    def _incidents_kept(self) -> bool:
        """Whether the store's kept incidents (``derived.keep_incidents``) are current; a
        remote store's answer is False (its collector's store changes as it is read)."""
        return False

    def run_ids(self) -> list[str]:
        """Every run the store names: its ``runs`` rows and the runs of its spans, these from
        the kept span catalogue and the spans not derived yet where the store keeps them (a
        scan of every span's run id took 0.6 s at 10^8 spans)."""
        spans = ("SELECT run_id_k AS run_id FROM main.d_span_catalog WHERE nulls & 1 = 0 "
                 "UNION SELECT run_id FROM rs_tail.spans" if self.maintained
                 else "SELECT DISTINCT run_id FROM spans")
        return [r[0] for r in self.query(
            f"SELECT run_id FROM (SELECT run_id FROM runs UNION {spans}) "
            "WHERE run_id IS NOT NULL ORDER BY run_id")]

    @property
    def default_run_id(self) -> str | None:
        """The run rows that name none belong to (``rows.RUN_RULE``); None for a file written
        before stores had one."""
        rows = self.query("SELECT value FROM store_meta WHERE key = 'default_run_id'")
        return rows[0][0] if rows else None

    def run_config(self, run_id: str) -> dict[str, Any]:
        rows = self.query("SELECT config FROM runs WHERE run_id = ?", [run_id])
        return json.loads(rows[0][0]) if rows and rows[0][0] else {}


class RunStore(RunCatalog):
    """A run store file or lake, opened for writing (creating it if needed) or read-only.

    A lake (``lake.py``) admits many writer processes and readers beside them; ``data_path``
    places a new lake's data files.

    ``threads``: DuckDB's threads while a reader holds a ``cursor()`` (None: DuckDB's default,
    one per core). In a file, while no reader has for ``WRITER_ALONE_AFTER_S``, the writer
    commits on one thread: a commit's insert gains nothing from a second one and pays about
    1.4 µs more CPU per span for it (``benchmarks/bench_collector.py``), and a view of a large
    run loses nothing, since a reader raises the threads again before it runs. A lake keeps its
    threads (``_Threads``)."""

    def __init__(self, path: str | Path | _lake.LakeSpec, *, read_only: bool = False,
                 threads: int | None = None, data_path: str | Path | None = None):
        self.read_only = read_only
        self._maintained: bool | None = None
        self._kept_incidents: bool | None = None
        config = {"threads": threads} if threads else {}
        lake = _lake.is_lake(path)
        self._threads = _Threads(fixed=lake)
        if lake:
            self._init_lake(_lake.parse(path, data_path=data_path), config)
            return
        self.lake = None
        self.path = resolve_path(path)
        self._lock = threading.Lock()
        self._writer = None
        # a read-only file whose stored views are older than this version gets the current
        # ones as temporary views; those live per connection, so each thread keeps one cursor
        self._temp_views = False
        # the version of a read-only file older than this one, whose tables the temporary
        # views bring up to date (schema.legacy_views); None when it is current
        self._legacy: tuple[int, str] | None = None
        self._local = threading.local()
        self._thread_cursors: list[duckdb.DuckDBPyConnection] = []
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path} does not exist")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(str(self.path), read_only=read_only, config=config)
            self._con.execute(STREAM_BUFFER_SQL)
        except duckdb.Error as exc:
            raise translate(exc, path=str(self.path)) from exc
        try:
            self._check_or_create_schema()
        except BaseException:
            self._con.close()
            raise

    def _init_lake(self, spec: _lake.LakeSpec, config: dict) -> None:
        self.lake = self.path = spec
        self._lock = threading.Lock()
        self._writer = None
        self._temp_views = False
        self._legacy = None
        self._local = threading.local()
        self._thread_cursors = []
        self.writer_id = _lake.writer_id()
        if self.read_only and not spec.exists():
            raise StoreError(f"{spec}: the lake's catalog {spec.target} does not exist")
        self._con = _lake.connect(spec, read_only=self.read_only, config=config,
                                  create=not self.read_only)
        self._con.execute(STREAM_BUFFER_SQL)
        try:
            self._check_or_create_lake_schema()
        except duckdb.Error as exc:
            self._con.close()
            raise translate(exc, path=str(spec)) from exc
        except BaseException:
            self._con.close()
            raise

    def _check_or_create_lake_schema(self) -> None:
        """The lake's tables and views, created by whichever writer comes first; several
        starting at once race, and the losers retry and find them made."""
        con = self._con
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = ?",
            [_lake.ALIAS]).fetchall()}
        found = SCHEMA_VERSION
        if "store_meta" in tables:
            found = self._schema_version(con, latest=True)
        elif self.read_only or tables:
            raise NotARunStoreError(str(self.path), "no store_meta table")
        if self.read_only:
            self._install_read_views(con, found, _lake.ALIAS)
            return
        if "store_meta" in tables and found == SCHEMA_VERSION and _views.installed_current(con):
            return  # another writer made it all; nothing to race for

        def create(cur: duckdb.DuckDBPyConnection) -> None:
            for stmt in _lake.lake_ddl():
                cur.execute(stmt)
            # store_meta has no key on a lake: the versions are rows, and the latest counts
            version = cur.execute("SELECT max(CAST(value AS INTEGER)) FROM store_meta "
                                  "WHERE key = 'schema_version'").fetchall()[0][0]
            for stmt in migration(version or SCHEMA_VERSION):  # None: a new lake
                cur.execute(stmt)
            if version != SCHEMA_VERSION:
                cur.execute("INSERT INTO store_meta VALUES ('schema_version', ?)",
                            [str(SCHEMA_VERSION)])
            if not cur.execute("SELECT 1 FROM store_meta WHERE key = 'default_run_id'"
                               ).fetchall():
                cur.execute("INSERT INTO store_meta VALUES ('default_run_id', ?)",
                            [_lake_run_name(self.lake)])
            _views.install(cur, temporary=False)

        _lake.with_retries(con, create)
        if "store_meta" not in tables:
            _lake.prime_table_stats(con)

    def new_cursor(self) -> duckdb.DuckDBPyConnection:
        """A fresh cursor of the owned connection, its default catalog the store's own."""
        cur = self._con.cursor()
        cur.execute(STREAM_BUFFER_SQL)
        if self.lake is not None:
            cur.execute(f"USE {_lake.ALIAS}")
        return cur

    def writer_alone(self) -> None:
        """Called by the writer before a commit: one DuckDB thread, unless a reader holds a
        cursor or has within ``WRITER_ALONE_AFTER_S``."""
        self._threads.writer_alone(self._con)

    @property
    def is_lake(self) -> bool:
        return self.lake is not None

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False, **kw: Any) -> RunStore:
        return cls(path, read_only=read_only, **kw)

    def _check_or_create_schema(self) -> None:
        con = self._con
        has_meta = bool(con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'store_meta'"
        ).fetchall()[0][0])
        found = SCHEMA_VERSION
        if has_meta:
            found = self._schema_version(con)
        else:
            n_tables = con.execute("SELECT count(*) FROM information_schema.tables").fetchall()
            if self.read_only or n_tables[0][0]:
                raise NotARunStoreError(str(self.path), "no store_meta table")
        if self.read_only:
            catalog = con.execute("SELECT current_database()").fetchall()[0][0]
            self._install_read_views(con, found, catalog)
            return
        con.execute("BEGIN")
        for stmt in DDL:
            con.execute(stmt)
        if found < SCHEMA_VERSION:
            log.info("%s: migrating the store from version %d to %d", self.path, found,
                     SCHEMA_VERSION)
            for stmt in migration(found):
                con.execute(stmt)
        con.execute("DELETE FROM store_meta WHERE key = 'schema_version'")
        con.execute("INSERT INTO store_meta VALUES ('schema_version', ?)",
                    [str(SCHEMA_VERSION)])
        # named once, when the file is first written, so a renamed file keeps its run
        con.execute("INSERT OR IGNORE INTO store_meta VALUES ('default_run_id', ?)",
                    [default_run_name(self.path)])
        _views.install(con, temporary=False)
        rederive = _derived.install(con)
        con.execute("COMMIT")
        if rederive and _derived.pending(con)[1]:
            # a store written before its rows were maintained (or by other views): brought up
            # to date once, on this first write
            t0 = time.perf_counter()
            n = _derived.derive(con)
            log.info("%s: derived the model rows of %d spans in %.1f s", self.path, n,
                     time.perf_counter() - t0)

    def _schema_version(self, con: duckdb.DuckDBPyConnection, *, latest: bool = False) -> int:
        """The store's schema version; ``SchemaVersionError`` when it is newer than this
        code's. ``latest``: of several rows (a lake's), the highest."""
        rows = con.execute(
            "SELECT value FROM store_meta WHERE key = 'schema_version'").fetchall()
        if not rows:
            raise NotARunStoreError(str(self.path), "no schema_version in store_meta")
        found = max(int(r[0]) for r in rows) if latest else int(rows[0][0])
        if found > SCHEMA_VERSION:
            raise SchemaVersionError(str(self.path), found, SCHEMA_VERSION)
        return found

    def _install_read_views(self, con: duckdb.DuckDBPyConnection, found: int,
                            catalog: str) -> None:
        """A read-only store's views: the stored ones when they are this version's, else
        the current ones as temporary views (per connection: ``cursor`` installs them in each
        thread's), over temporary views that give older tables the current columns."""
        if found < SCHEMA_VERSION:
            # measured at 10M spans: incidents 7.6 s read this way, 1.2 s once migrated
            log.warning("%s is a version-%d store opened read-only: its views compute the "
                        "columns it lacks as they read, several times slower; opening it once "
                        "for writing migrates it (about 10 s for 10M spans)", self.path, found)
            self._legacy = (found, catalog)
        elif _views.installed_current(con):
            return
        self._temp_views = True
        self._install_temp_views(con)

    def _install_temp_views(self, cur: duckdb.DuckDBPyConnection) -> None:
        self.install_legacy_tables(cur)
        _views.install(cur, temporary=True, row_ids=self._legacy is None)

    def install_legacy_tables(self, cur: duckdb.DuckDBPyConnection) -> None:
        """On a read-only store of an older version, give ``cur`` (a ``new_cursor()``) the
        temporary views that read its tables with the current columns; nothing otherwise."""
        if self._legacy is not None:
            for stmt in legacy_views(*self._legacy):
                cur.execute(stmt)

    # -- reading ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of this store's connection for the caller's thread; closed afterwards.
        On a read-only file whose views are older than this version, a thread gets the same
        cursor (holding the current views) every time, nested calls included: a caller that
        installs views of its own takes ``new_cursor()`` (and ``install_legacy_tables``)."""
        if self._temp_views:
            cur = getattr(self._local, "cursor", None)
            if cur is None:
                cur = self._local.cursor = self.new_cursor()
                self._install_temp_views(cur)
                with self._lock:
                    self._thread_cursors.append(cur)
            try:
                yield cur
            except duckdb.Error as exc:
                raise translate(exc, path=str(self.path)) from exc
            return
        cur = self.new_cursor()
        try:
            with self.reading():
                yield cur
        except duckdb.Error as exc:
            raise translate(exc, path=str(self.path)) from exc
        finally:
            cur.close()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Count the caller as a reader while it runs: DuckDB's threads are the configured
        ones, and the writer does not take them down to one (``writer_alone``). Every
        ``cursor()`` is one; work on a ``new_cursor()`` beside the writer (maintenance) says so
        with this."""
        self._threads.reader_in(self._con)
        try:
            yield
        finally:
            self._threads.reader_out()

    def query_df(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        with self.cursor() as cur:
            return cur.execute(sql, params or []).df()

    def query_frame(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """``query_df`` with text columns held as Arrow strings (``arrow_frame``): the result
        crosses from DuckDB as Arrow and no Python string is made per value. Every other
        column has ``query_df``'s dtype and values. At 10M spans the 809k rollout tries read in
        0.9 s instead of 2.2 s (``benchmarks/bench_render.py --load-reps``), and ``isin`` on
        their ids takes half the time."""
        import numpy as np
        import pyarrow as pa

        from rolloutscope.store.frames import arrow_frame

        with self.cursor() as cur:
            table = cur.execute(sql, params or []).to_arrow_table(ARROW_BATCH_ROWS)
        if table.num_rows < ARROW_BATCH_ROWS:
            # DuckDB allocates each batch's buffers for all its rows: a smaller result would
            # hold them (and the frame the result's), so it is copied to its own size
            table = table.take(pa.array(np.arange(table.num_rows)))
        return arrow_frame(table)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        with self.cursor() as cur:
            return cur.execute(sql, params or []).fetchall()

    def query_records(self, sql: str, params: Sequence[Any] | dict | None = None
                      ) -> list[dict[str, Any]]:
        """Rows as dicts by column name; ``params`` a list (``?``) or a dict (``$name``)."""
        with self.cursor() as cur:
            cur.execute(sql, params or [])
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    @property
    def maintained(self) -> bool:
        """Whether this store keeps its model rows as spans arrive (``derived.py``): a file
        written by this version. A lake, and a file written before, read the views."""
        if self._maintained is None:
            if self.lake is not None or self._temp_views or self._legacy is not None:
                self._maintained = False
            else:
                with self.cursor() as cur:
                    self._maintained = _derived.available(cur)
                if not self._maintained and self.read_only:
                    log.info("%s keeps no maintained model rows (written before they were "
                             "kept): its views are computed from the spans as they are read; "
                             "opening it once for writing derives them", self.path)
        return self._maintained

    def _incidents_kept(self) -> bool:
        # a read-only file cannot change while it is open: asked once
        if self.read_only and self._kept_incidents is not None:
            return self._kept_incidents
        with self.cursor() as cur:
            kept = _derived.incidents_kept_current(cur)
        if self.read_only:
            self._kept_incidents = kept
        return kept

    # -- writing ---------------------------------------------------------------------------
    def register_run(
        self, run_id: str, *, source: RunSource | str = RunSource.LIVE,
        parent_run_id: str | None = None, scenario: str | None = None,
        variants: Sequence[str] = (), seed: int | None = None,
        config: Mapping[str, Any] | None = None, metadata: Mapping[str, Any] | None = None,
        origin_ns: int | None = None,
    ) -> None:
        """Record (or update) a run and the config it used; detectors read thresholds here.

        ``origin_ns`` is the run's clock origin where it has one (a replay's epoch): readers
        count seconds from it (``run_thresholds.origin_ns``), else from the first time seen."""
        self._require_writable()
        if origin_ns is not None:
            metadata = {**(metadata or {}), "origin_ns": int(origin_ns)}
        source = RunSource(source).value
        if self.lake is not None:
            self._register_lake_run(run_id, source, parent_run_id, scenario, variants, seed,
                                    config, metadata)
            return
        with self.cursor() as cur:
            cur.execute(
                """INSERT INTO runs (run_id, source, parent_run_id, scenario, variants, seed,
                                     config, metadata, created_ns)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (run_id) DO UPDATE SET
                     source = excluded.source,
                     parent_run_id = coalesce(excluded.parent_run_id, runs.parent_run_id),
                     scenario = coalesce(excluded.scenario, runs.scenario),
                     variants = excluded.variants,
                     seed = coalesce(excluded.seed, runs.seed),
                     config = coalesce(excluded.config, runs.config),
                     metadata = coalesce(excluded.metadata, runs.metadata)""",
                [run_id, source, parent_run_id, scenario, json.dumps(list(variants)), seed,
                 json.dumps(dict(config)) if config is not None else None,
                 json.dumps(dict(metadata)) if metadata is not None else None,
                 time.time_ns()])

    def _register_lake_run(self, run_id, source, parent_run_id, scenario, variants, seed,
                           config, metadata) -> None:
        """A registration appended to ``run_records``: the ``runs`` view takes the latest."""
        params = [run_id, source, parent_run_id, scenario, json.dumps(list(variants)), seed,
                  json.dumps(dict(config)) if config is not None else None,
                  json.dumps(dict(metadata)) if metadata is not None else None,
                  time.time_ns(), time.time_ns(), self.writer_id]
        cur = self.new_cursor()
        try:
            _lake.with_retries(cur, lambda c: c.execute(
                """INSERT INTO run_records (run_id, source, parent_run_id, scenario, variants,
                                            seed, config, metadata, created_ns, recorded_ns,
                                            writer_id)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""", params))
        except duckdb.Error as exc:
            raise translate(exc, path=str(self.path)) from exc
        finally:
            cur.close()

    def writer(self, **kw: Any):
        """The store's one writer (created on first use; keyword options apply then)."""
        from rolloutscope.store.writer import StoreWriter

        self._require_writable()
        with self._lock:
            if self._writer is None or self._writer.closed:
                self._writer = StoreWriter(self, **kw)
            return self._writer

    def _require_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.path} is open read-only")

    def raw_connection(self) -> duckdb.DuckDBPyConnection:
        """The owned connection, for the writer only."""
        return self._con

    def close(self) -> None:
        """Drain and stop the writer, drop markers of spans that did end, close the file."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if not self.read_only and self.lake is not None:
            # markers whose span ended in another writer's commit; no CHECKPOINT: on a lake
            # that is compaction, which the maintenance task does apart from any writer
            with contextlib.suppress(duckdb.Error):
                _lake.with_retries(self._con, lambda c: c.execute(
                    "DELETE FROM open_spans o WHERE EXISTS "
                    "(SELECT 1 FROM spans s WHERE s.span_id = o.span_id "
                    " AND s.trace_id = o.trace_id)"), attempts=20)
        elif not self.read_only:
            with contextlib.suppress(duckdb.Error):
                self._con.execute(  # each run's own: runs of one seed share span ids
                    "DELETE FROM open_spans o WHERE EXISTS "
                    "(SELECT 1 FROM spans s WHERE s.span_id = o.span_id "
                    " AND s.trace_id = o.trace_id "
                    " AND s.run_id IS NOT DISTINCT FROM o.run_id)")
                if _derived.available(self._con):
                    # rows written beside the writer (bulk SQL), and the steps that settled
                    _derived.derive(self._con, keep_steps_now=True)
                    if (_derived.pending(self._con)[1] >= _derived.KEEP_INCIDENTS_FROM_SPANS
                            and not _derived.incidents_kept_current(self._con)):
                        self._keep_incidents()
                self._con.execute("CHECKPOINT")
        for cur in self._thread_cursors:
            cur.close()
        self._threads.close()
        self._con.close()

    def _keep_incidents(self) -> None:
        """The incidents kept for the readers of the closed store (derived.keep_incidents);
        a failure is logged: readers then compute them."""
        try:
            took = _derived.keep_incidents(self._con)
        except duckdb.Error as exc:
            log.warning("%s: keeping the incidents failed (readers compute them): %s",
                        self.path, exc)
            return
        log.info("%s: kept the incidents for its readers in %.1f s", self.path, took)

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# how long after the last reader let go of its cursor the writer may go down to one thread:
# a dashboard's refresh is many queries in a row, and each change of DuckDB's threads starts or
# joins its worker threads
WRITER_ALONE_AFTER_S = 0.5


class _Threads:
    """DuckDB's threads for one store: as configured while readers are in, one while the
    writer is alone. The setting is the database instance's, so it is read and changed on a
    cursor of its own, under a lock; the writer only ever lowers it and a reader raises it.

    ``fixed``: never changed, as for a lake. DuckLake runs its catalog's queries from inside
    the tasks of the query that needs them, on DuckDB's worker threads, and each of those
    queries ends by taking the scheduler's lock to relaunch the threads; lowering them holds
    that lock while it joins the workers, so a worker inside such a query never finishes and the
    process hangs. Stress runs of a writer, upkeep and a reader on one lake, 40 s each: 3 of 21
    hung while the threads changed, none of 36 with them fixed; on a file, whose queries never
    nest, none of 18 hung with them changing. A collector's lake upkeep test aborted once with
    "double free or corruption" while they changed."""

    def __init__(self, *, fixed: bool = False) -> None:
        self._lock = threading.Lock()
        self._cur: duckdb.DuckDBPyConnection | None = None
        self._reading = 0
        self._read_until = 0.0  # monotonic time before which the writer keeps the threads
        self._configured: int | None = None  # the threads readers get, read on first use
        self._lowered = False
        self._fixed = fixed  # a lake, one thread configured, or DuckDB refused to lower them
        self._warned = False

    def _execute(self, con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple] | None:
        """``sql`` on the store's own cursor; None if DuckDB refuses it, which is logged (once)
        and fails neither the commit nor the query that asked: the next try takes a new
        cursor."""
        try:
            if self._cur is None:
                self._cur = con.cursor()
            return self._cur.execute(sql).fetchall()
        except duckdb.Error as exc:
            if not self._warned:
                self._warned = True
                log.warning("DuckDB's threads could not be changed (%s): %s", sql, exc)
            if self._cur is not None:
                with contextlib.suppress(duckdb.Error):
                    self._cur.close()
                self._cur = None
            return None

    def reader_in(self, con: duckdb.DuckDBPyConnection) -> None:
        with self._lock:
            self._reading += 1
            if self._lowered:  # raised again, or left lowered for the next reader to retry
                self._lowered = self._execute(
                    con, f"SET threads = {self._configured}") is None

    def reader_out(self) -> None:
        with self._lock:
            self._reading -= 1
            self._read_until = time.monotonic() + WRITER_ALONE_AFTER_S

    def writer_alone(self, con: duckdb.DuckDBPyConnection) -> None:
        def keep() -> bool:
            return (self._lowered or self._fixed or self._reading > 0
                    or time.monotonic() < self._read_until)

        if keep():  # read without the lock first: most commits change nothing
            return
        with self._lock:
            if keep():
                return
            if self._configured is None:
                rows = self._execute(con, "SELECT current_setting('threads')")
                if rows is None:
                    return
                self._configured = int(rows[0][0])
            if self._configured <= 1:
                self._fixed = True
                return
            self._lowered = self._execute(con, "SET threads = 1") is not None
            self._fixed = not self._lowered  # refused: the writer stops trying

    def close(self) -> None:
        with self._lock:
            if self._cur is not None:
                self._cur.close()
                self._cur = None


def __getattr__(name: str) -> Any:
    """``TEXT``, ``as_text`` and ``arrow_frame`` live in ``frames`` (pandas loads with it)."""
    if name in ("TEXT", "as_text", "arrow_frame"):
        from rolloutscope.store import frames

        return getattr(frames, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(path: str | Path | _lake.LakeSpec, *, read_only: bool = False) -> RunStore:
    return RunStore(path, read_only=read_only)


def _lake_run_name(spec: _lake.LakeSpec) -> str:
    """A lake's default run: its sqlite catalog's name, or the postgres database's."""
    if spec.catalog == "sqlite":
        return default_run_name(Path(spec.target))
    m = re.search(r"dbname=(\S+)", spec.target)
    return _NOT_AN_ID.sub("-", m.group(1) if m else "lake").strip("-.") or "lake"
