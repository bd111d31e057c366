"""A run store in a DuckLake: Parquet data files plus a catalog database, many writers at once.

A lake is named the way DuckDB's own ``ATTACH`` names one:

- ``ducklake:sqlite:PATH/catalog.sqlite``: one machine; data files go beside the catalog (in
  ``PATH/catalog_data/``) unless a data path is given;
- ``ducklake:postgres:dbname=… host=…`` (a libpq connection string): many machines; a new lake
  needs a data path every writer can reach.

The tables are the file store's (``schema.py``) with two differences DuckLake imposes: it has no
PRIMARY KEY or UNIQUE constraints, so ``store_meta`` is a plain table written only by the first
writer, and the one-row-per-run ``runs`` is a view over ``run_records``, to which every writer
and every ``register_run`` only appends (later values win, bounds widen). Appending never
conflicts with another writer's appends, so writers in many processes commit side by side;
what still conflicts (two deletes of ended spans' start markers in one data file, the catalog's
lock) is retried.

Each writer stamps its commits' DuckLake snapshots with its writer id (``host:pid:start``) as
the snapshot's author, so every row is attributable through its ``snapshot_id``:
``SELECT s.author, count(*) FROM spans JOIN ducklake_snapshots('lake') s USING (snapshot_id)``
(``writer_rows`` below). The extensions load offline from the ``duckdb-extension-*`` packages
built for this duckdb version.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb

from rolloutscope.errors import InputError
from rolloutscope.store.errors import StoreError
from rolloutscope.store.schema import DDL, RUN_COLUMNS

PREFIX = "ducklake:"
ALIAS = "lake"  # the catalog name a lake is attached under in every connection
CATALOGS = ("sqlite", "postgres")
# the extension package of each, and the name DuckDB loads it under (its entry point)
_EXTENSIONS = {"ducklake": "ducklake", "sqlite": "sqlite_scanner",
               "postgres": "postgres_scanner"}


class LakeSpecError(StoreError, InputError):
    """A lake name that does not say which catalog, or where."""


class LakeUnavailableError(StoreError):
    """The DuckDB extensions a lake needs are not installed for this duckdb."""


class CommitConflictError(StoreError):
    """A lake commit lost a race with another writer (or the catalog was locked): retried."""


def is_lake(spec: object) -> bool:
    return isinstance(spec, LakeSpec) or str(spec).startswith(PREFIX)


@dataclass(frozen=True, kw_only=True)
class LakeSpec:
    catalog: str  # sqlite | postgres
    target: str  # the catalog file, or a libpq connection string
    data_path: str | None = None

    def __str__(self) -> str:
        return f"{PREFIX}{self.catalog}:{self.target}"

    def __fspath__(self) -> str:
        # code that makes a Path of a store (a capture's label, a report's source) keeps the
        # name whole, and RunStore of that Path opens the lake again
        return str(self)

    @property
    def name(self) -> str:
        """What a reader calls the lake in a sentence, as a file's name: the catalog file's
        name, or the postgres database's."""
        if self.catalog == "sqlite":
            return Path(self.target).name
        m = re.search(r"dbname=(\S+)", self.target)
        return m.group(1) if m else "postgres lake"

    @property
    def attach_target(self) -> str:
        return str(self)

    def with_data_path(self, data_path: str | Path | None) -> LakeSpec:
        return self if data_path is None else replace(self, data_path=str(data_path))

    def default_data_path(self) -> str | None:
        """Where a new lake's data files go when no data path was given."""
        if self.data_path is not None:
            return self.data_path
        if self.catalog == "sqlite":
            p = Path(self.target)
            return str(p.parent / f"{p.stem}_data") + os.sep
        return None

    def exists(self) -> bool:
        """Whether the catalog is there (a postgres catalog is asked when attached)."""
        return self.catalog != "sqlite" or Path(self.target).is_file()


def parse(spec: str | LakeSpec, *, data_path: str | Path | None = None) -> LakeSpec:
    """``ducklake:sqlite:PATH`` or ``ducklake:postgres:CONNINFO`` -> LakeSpec, or a
    ``LakeSpecError`` that says what was wrong."""
    if isinstance(spec, LakeSpec):
        return spec.with_data_path(data_path)
    text = str(spec)
    if not text.startswith(PREFIX):
        raise LakeSpecError(f"{text!r} is not a lake: a lake is named ducklake:sqlite:PATH or "
                            f"ducklake:postgres:CONNINFO")
    rest = text[len(PREFIX):]
    catalog, sep, target = rest.partition(":")
    if not sep or catalog not in CATALOGS:
        raise LakeSpecError(
            f"{text!r}: the lake's catalog must be one of {', '.join(CATALOGS)} "
            f"(ducklake:sqlite:PATH/catalog.sqlite or ducklake:postgres:dbname=… host=…), "
            f"not {catalog!r}")
    target = target.strip()
    if not target:
        raise LakeSpecError(f"{text!r} names no {catalog} catalog after '{PREFIX}{catalog}:'")
    if catalog == "sqlite":
        p = Path(target).expanduser()
        if p.is_dir():
            raise LakeSpecError(f"{text!r}: {p} is a directory; name the catalog file inside "
                                f"it (e.g. {p / 'catalog.sqlite'})")
        if p.exists():
            with open(p, "rb") as fh:
                head = fh.read(16)
            if head and head != b"SQLite format 3\x00":
                raise LakeSpecError(f"{text!r}: {p} exists and is not an SQLite database")
        target = str(p.resolve())
    elif "=" not in target:
        raise LakeSpecError(f"{text!r}: a postgres catalog is a libpq connection string "
                            f"(key=value pairs such as 'dbname=lake host=127.0.0.1'), "
                            f"not {target!r}")
    return LakeSpec(catalog=catalog, target=target,
                    data_path=None if data_path is None else str(data_path))


# -- extensions --------------------------------------------------------------------------------
_ext_lock = threading.Lock()
_ext_dir: str | None = None


def _extension_dir() -> str:
    """A folder of this process holding each extension under the name DuckDB loads it by
    (the sqlite package ships ``sqlite.duckdb_extension``; its entry point is sqlite_scanner)."""
    global _ext_dir
    with _ext_lock:
        if _ext_dir is not None:
            return _ext_dir
        folder = tempfile.mkdtemp(prefix="rolloutscope-duckdb-ext-")
        atexit.register(shutil.rmtree, folder, True)
        version = duckdb.__version__
        for package, name in _EXTENSIONS.items():
            spec = importlib.util.find_spec(f"duckdb_extension_{package}")
            if spec is None or not spec.submodule_search_locations:
                raise LakeUnavailableError(
                    f"the DuckDB {package} extension is not installed: "
                    f"pip install 'duckdb-extension-{package}=={version}'")
            base = Path(list(spec.submodule_search_locations)[0]) / "extensions"
            found = base / f"v{version}" / f"{package}.duckdb_extension"
            if not found.is_file():
                have = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
                raise LakeUnavailableError(
                    f"duckdb-extension-{package} holds no build for duckdb {version} "
                    f"(it has {', '.join(have) or 'none'}): install "
                    f"'duckdb-extension-{package}=={version}'")
            os.symlink(found, os.path.join(folder, f"{name}.duckdb_extension"))
        _ext_dir = folder
        return folder


def load_extensions(con: duckdb.DuckDBPyConnection, catalog: str) -> None:
    folder = _extension_dir()
    for package in ("ducklake", catalog):
        path = os.path.join(folder, f"{_EXTENSIONS[package]}.duckdb_extension")
        con.execute(f"LOAD '{path}'")


def connect(spec: LakeSpec, *, read_only: bool, config: dict | None = None,
            create: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the lake attached as ``lake`` and made the default catalog."""
    config = {"autoinstall_known_extensions": False, **(config or {})}
    con = duckdb.connect(config=config)
    try:
        load_extensions(con, spec.catalog)
        # a lost race with another writer is retried by DuckLake first, then by the writer
        con.execute("SET ducklake_max_retry_count = 100")
        options = ["READ_ONLY"] if read_only else []
        data_path = spec.data_path
        if data_path is None and create and _is_new(spec):
            # a new lake only: an existing one keeps the data path it was made with
            data_path = spec.default_data_path()
            if data_path is None:
                raise LakeSpecError(
                    f"{spec}: a new postgres lake needs a data path every writer can reach "
                    f"(--data-path)")
        if data_path is not None and not read_only:
            if "://" not in data_path:
                Path(data_path).mkdir(parents=True, exist_ok=True)
                data_path = str(Path(data_path).resolve()) + os.sep
            options.append(f"DATA_PATH '{_quote(data_path)}'")
        if spec.catalog == "sqlite" and not read_only:
            Path(spec.target).parent.mkdir(parents=True, exist_ok=True)
            _wal(spec.target)
        opts = f" ({', '.join(options)})" if options else ""
        for attempt in range(50):
            try:
                con.execute(f"ATTACH '{_quote(spec.attach_target)}' AS {ALIAS}{opts}")
                break
            except duckdb.Error as exc:
                # two writers creating one new catalog, or another holding its lock
                if attempt == 49 or not _retryable(exc):
                    raise
                time.sleep(0.05 + 0.02 * attempt)
        con.execute(f"USE {ALIAS}")
        _allow_lake_paths(con, spec)
    except duckdb.Error as exc:
        con.close()
        if "data_path is not set" in str(exc):
            raise LakeSpecError(f"{spec}: a new {spec.catalog} lake needs a data path every "
                                f"writer can reach (--data-path)") from None
        raise StoreError(f"{spec}: cannot open the lake: {exc}") from exc
    except BaseException:
        con.close()
        raise
    return con


def _is_new(spec: LakeSpec) -> bool:
    """Whether a lake is still to be made. An sqlite catalog is new until it holds DuckLake's
    tables: writers starting together (one collector per Ray node) find the file another has
    just created (``_wal``) before DuckLake has made the lake in it."""
    if spec.catalog != "sqlite":
        return not spec.exists()
    if not spec.exists():
        return True
    import sqlite3

    for attempt in range(100):
        try:
            con = sqlite3.connect(f"file:{spec.target}?mode=ro", uri=True, timeout=5)
            try:
                return not con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                       "name = 'ducklake_metadata'").fetchall()
            finally:
                con.close()
        except sqlite3.OperationalError:
            if attempt == 99:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def _wal(path: str) -> None:
    """Put an sqlite catalog in WAL mode (kept in the file): readers then read beside a writer's
    commit instead of failing on the lock that SQLite's default journal takes for it."""
    import sqlite3

    for attempt in range(100):
        try:
            con = sqlite3.connect(path, timeout=5)
            try:
                if con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    con.execute("PRAGMA journal_mode=WAL")
            finally:
                con.close()
            return
        except sqlite3.OperationalError:
            if attempt == 99:
                raise
            time.sleep(0.05)


def _allow_lake_paths(con: duckdb.DuckDBPyConnection, spec: LakeSpec) -> None:
    """Keep the lake's own files reachable once a caller turns external access off (the
    collector does, so the query endpoint reaches no other file)."""
    rows = con.execute(f"SELECT value FROM ducklake_options('{ALIAS}') "
                       f"WHERE option_name = 'data_path'").fetchall()
    allowed = [str(r[0]) for r in rows if r[0] and "://" not in str(r[0])]
    if spec.catalog == "sqlite":
        allowed.append(str(Path(spec.target).parent) + os.sep)
    if allowed:
        con.execute("SET allowed_directories = ?", [allowed])


def _quote(text: str) -> str:
    return text.replace("'", "''")


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, duckdb.TransactionException):
        return True
    msg = str(exc).lower()
    # DuckLake's own calls (ducklake_flush_inlined_data) that lose a race with a committing
    # writer report only that their transaction was aborted: a fresh transaction retries it
    return ("database is locked" in msg or "conflict" in msg or "busy" in msg
            or "unique constraint failed" in msg or "current transaction is aborted" in msg
            # writers making a new lake together: one read a table's inlined rows as another
            # wrote the catalog, and found the table of those rows not made yet
            or ("ducklake_inlined_data" in msg and "does not exist" in msg))


def as_conflict(exc: BaseException) -> CommitConflictError | None:
    """The retryable form of a lake commit failure, or None when it is not a lost race."""
    if isinstance(exc, duckdb.Error) and _retryable(exc):
        return CommitConflictError(str(exc))
    return None


def with_retries(con: duckdb.DuckDBPyConnection, work, *, attempts: int = 200,
                 base_sleep_s: float = 0.005) -> None:
    """Run ``work(con)`` in one transaction, retrying lost races with jittered backoff."""
    for attempt in range(attempts):
        con.execute("BEGIN")
        try:
            work(con)
            con.execute("COMMIT")
            return
        except duckdb.Error as exc:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass
            if attempt == attempts - 1 or not _retryable(exc):
                raise
            time.sleep(min(0.5, base_sleep_s * (1.5 ** min(attempt, 12)))
                       * (0.5 + (os.getpid() % 7) / 7))


# -- schema ------------------------------------------------------------------------------------
_PK = re.compile(r"\s+PRIMARY KEY")
_NOT_NULL = re.compile(r"\s+NOT NULL")

RUN_RECORD_EXTRA = ("recorded_ns", "writer_id")


def lake_ddl() -> tuple[str, ...]:
    """The file store's DDL, less the constraints DuckLake lacks, and ``runs`` as
    ``run_records`` (append-only) plus the ``runs`` view."""
    out = []
    for stmt in DDL:
        if "TABLE IF NOT EXISTS runs " in stmt:
            stmt = stmt.replace("TABLE IF NOT EXISTS runs ", "TABLE IF NOT EXISTS run_records ")
            stmt = _NOT_NULL.sub("", stmt).rstrip().rstrip(")").rstrip()
            stmt += ",\n    recorded_ns BIGINT,\n    writer_id VARCHAR\n)"
        out.append(_PK.sub("", stmt))
    out.append(RUNS_VIEW)
    return tuple(out)


# DuckLake 1.5 caches a table's statistics only once the table has a stats row, which it first
# gets from an insert; a never-written table costs a metadata query per column per scan, every
# query (duckdb/ducklake #1313, #1398), and the incident views scan the empty tables of a fresh
# lake (open_spans, logs, links) dozens of times: 5x slower. One row written and deleted when
# the lake is made leaves each table a stats row and no data.
_PRIME_TABLES = ("spans", "open_spans", "span_events", "span_links", "metrics", "logs",
                 "run_records")
_PRIME_KEY = "__rolloutscope_stats__"


def prime_table_stats(con: duckdb.DuckDBPyConnection) -> None:
    """Give every table of a new lake its stats row (see above): the insert is committed
    before the delete, since rows inserted and deleted in one transaction never reach it."""
    for table in _PRIME_TABLES:
        with_retries(con, lambda c, t=table: c.execute(
            f"INSERT INTO {t} (run_id) VALUES ('{_PRIME_KEY}')"))
        with_retries(con, lambda c, t=table: c.execute(
            f"DELETE FROM {t} WHERE run_id = '{_PRIME_KEY}'"))


def _latest(col: str, *, when: str | None = None) -> str:
    cond = when or f"{col} IS NOT NULL"
    return f"arg_max({col}, recorded_ns) FILTER (WHERE {cond})"


# One row per run, as the file store's upserts leave it: a registration's source and variants,
# the latest non-null of its other fields, the first creation, the widest seen bounds.
RUNS_VIEW = f"""CREATE OR REPLACE VIEW runs AS
SELECT run_id,
       coalesce({_latest('source')}, 'live') AS source,
       {_latest('parent_run_id')} AS parent_run_id,
       {_latest('scenario')} AS scenario,
       {_latest('variants', when='source IS NOT NULL')} AS variants,
       {_latest('seed')} AS seed,
       {_latest('config')} AS config,
       {_latest('metadata')} AS metadata,
       min(created_ns) AS created_ns,
       min(first_seen_ns) AS first_seen_ns,
       max(last_seen_ns) AS last_seen_ns
FROM run_records
GROUP BY run_id"""

assert RUN_COLUMNS[-1] == "last_seen_ns"  # the view's column order is the table's


def writer_id() -> str:
    """Who wrote a commit: this host, process and start time."""
    return f"{socket.gethostname()}:{os.getpid()}:{time.time_ns() // 1_000_000}"


def stamp_commit(con: duckdb.DuckDBPyConnection, author: str, message: str) -> None:
    """Name the writer as the author of the snapshot the open transaction commits."""
    con.execute(f"CALL ducklake_set_commit_message('{ALIAS}', ?, ?)", [author, message])


def record_run_bounds(con: duckdb.DuckDBPyConnection, seen: dict[str, tuple[int, int]],
                      author: str) -> None:
    """The writer's run bounds as appended records (the ``runs`` view widens over them)."""
    now = time.time_ns()
    for run_id, (first, last) in seen.items():
        con.execute("INSERT INTO run_records (run_id, first_seen_ns, last_seen_ns, recorded_ns, "
                    "writer_id) VALUES (?, ?, ?, ?, ?)", [run_id, first, last, now, author])


def writer_rows(con: duckdb.DuckDBPyConnection, table: str = "spans") -> list[tuple[str, int]]:
    """(writer id, rows) of ``table``: each row's snapshot names the writer that committed it."""
    if table not in ("spans", "open_spans", "span_events", "span_links", "metrics", "logs"):
        raise StoreError(f"no batch table {table!r}")
    return con.execute(
        f"SELECT s.author, count(*) FROM {ALIAS}.{table} t "
        f"JOIN ducklake_snapshots('{ALIAS}') s ON s.snapshot_id = t.snapshot_id "
        f"GROUP BY 1 ORDER BY 1").fetchall()


# -- layout ------------------------------------------------------------------------------------
def window_files(con: duckdb.DuckDBPyConnection, lo_ns: int, hi_ns: int, *,
                 table: str = "spans", column: str = "start_ns") -> tuple[int, int]:
    """(data files of ``table`` whose ``column`` may hold a value in [lo_ns, hi_ns), data files
    of ``table``) in the lake's latest snapshot, by DuckLake's own per-file min/max statistics
    in the catalog: the files a read filtered to that window opens; DuckLake skips the others.
    A file without statistics for the column counts as overlapping, one whose column is all
    NULL does not (no range matches NULL). Rows still inlined in the catalog are in no file."""
    meta = f"__ducklake_metadata_{ALIAS}"
    return tuple(con.execute(f"""
        WITH t AS (SELECT table_id FROM {meta}.ducklake_table
                   WHERE table_name = $table AND end_snapshot IS NULL),
             c AS (SELECT column_id FROM {meta}.ducklake_column
                   WHERE table_id = (SELECT table_id FROM t) AND column_name = $column
                     AND end_snapshot IS NULL),
             f AS (SELECT data_file_id FROM {meta}.ducklake_data_file
                   WHERE table_id = (SELECT table_id FROM t) AND end_snapshot IS NULL),
             s AS (SELECT data_file_id, TRY_CAST(min_value AS BIGINT) AS lo,
                          TRY_CAST(max_value AS BIGINT) AS hi,
                          value_count IS NOT NULL AND value_count = 0 AS all_null
                   FROM {meta}.ducklake_file_column_stats
                   WHERE table_id = (SELECT table_id FROM t)
                     AND column_id = (SELECT column_id FROM c))
        SELECT count(*) FILTER (WHERE s.data_file_id IS NULL
                                 OR (NOT s.all_null AND (s.lo IS NULL OR s.hi IS NULL
                                                         OR (s.hi >= $lo AND s.lo < $hi)))),
               count(*)
        FROM f LEFT JOIN s USING (data_file_id)""",
        {"table": table, "column": column, "lo": lo_ns, "hi": hi_ns}).fetchall()[0])


def files_read(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> int:
    """Data files DuckLake opened to run ``sql`` (its scans' "Total Files Read", from EXPLAIN
    ANALYZE; the query runs)."""
    plan = "\n".join(str(r[1]) for r in con.execute(f"EXPLAIN ANALYZE {sql}",
                                                    params or []).fetchall())
    return sum(int(n) for n in re.findall(r"Total Files Read:\s*(\d+)", plan))
