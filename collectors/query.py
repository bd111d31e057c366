"""Read-only SQL over the run store, for readers while the collector writes.

DuckDB lets no second process open a file that one process writes, so notebooks and scripts
query a live run through the collector. What keeps a query from changing or escaping the store
is decided on DuckDB's own parse of the statement that will run, never on its text:

1. exactly one statement, of type SELECT (``SHOW``/``DESCRIBE``/``SUMMARIZE``/``FROM t`` are
   SELECTs to DuckDB; ``PRAGMA``, ``CALL``, ``SET`` are not);
2. its parse tree (``json_serialize_sql``) is walked for every table function: only those that
   read nothing but the store's catalog or generate values are allowed
   (``ALLOWED_TABLE_FUNCTIONS``), and the table macros the store itself defines (a window of a
   view, ``model_calls_of(run, floor_ns)``), ``query('…')`` is parsed the same way, recursively, and
   ``query_table('…')`` must name the store's tables or views; a scalar function with a side
   effect (``nextval``) is refused;
3. the service opens the store with ``enable_external_access = false``, so nothing can read or
   write other files, attach databases or install extensions whatever got through.

Values travel apart from the text: ``params``, a JSON list (for ``?``) or object (for
``$name``) of scalars or lists of scalars, binds the statement's placeholders, so a reader never
splices a value into SQL.

Each query runs in a worker thread, off the event loop that receives OTLP: the query, the
fetch and the serialisation to Arrow IPC or JSON all happen there, under one deadline (DuckDB's
``interrupt`` while it executes, a check between result batches while serialising), within a
row limit and a byte limit on the result, and within DuckDB's memory limit for the store (set by
the service). At most ``max_concurrent`` run at once and ``max_waiting`` wait; past that the
endpoint answers 429.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from rolloutscope.collectors.otlp.errors import BadRequestError, PayloadTooLargeError
from rolloutscope.store.remote import ARROW_STREAM

MiB = 1024 * 1024

# Scalar functions that write to the store even inside a SELECT (or reveal the process's
# environment where external access is on).
REFUSED_FUNCTIONS = frozenset({"checkpoint", "force_checkpoint", "nextval", "setval",
                               "getenv"})
# Table functions a query may call: generators, and readers of the store's own catalog.
# Everything else (checkpoint(), read_csv(), duckdb_secrets(), ...) is refused.
ALLOWED_TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "json_each", "json_tree",
    "duckdb_tables", "duckdb_views", "duckdb_columns", "duckdb_constraints", "duckdb_indexes",
    "duckdb_schemas", "duckdb_types", "duckdb_functions", "duckdb_keywords", "duckdb_settings",
    "duckdb_databases", "pragma_table_info", "pragma_storage_info",
})
_NESTED_QUERY_DEPTH = 4


class QueryRefusedError(BadRequestError):
    """The statement is not a read-only query over the store."""

    status = 403

    def __init__(self, message: str) -> None:
        super().__init__("refused_statement", message)


class QueryTimeoutError(BadRequestError):
    status = 408

    def __init__(self, timeout_s: float) -> None:
        super().__init__("query_timeout", f"query exceeded its time limit of {timeout_s:g} s")


class QueryBusyError(BadRequestError):
    status = 429

    def __init__(self, running: int) -> None:
        super().__init__("query_busy", f"{running} queries are running or waiting, the limit; "
                                       f"retry")


@dataclass(frozen=True, kw_only=True)
class QueryLimits:
    timeout_s: float = 30.0
    max_rows: int = 5_000_000
    max_result_bytes: int = 128 * MiB
    max_concurrent: int = 2
    max_waiting: int = 8
    max_sql_bytes: int = 1 * MiB

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"the query time limit must be positive, got {self.timeout_s}")
        for name in ("max_rows", "max_result_bytes", "max_concurrent", "max_sql_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class QueryResult:
    body: bytes | bytearray | memoryview
    content_type: str
    rows: int


# -- refusal, on DuckDB's parse ----------------------------------------------------------
def _parse_tree(cur: duckdb.DuckDBPyConnection, sql: str) -> tuple[Any, str]:
    """(parse tree, statement text) of the one SELECT in ``sql``."""
    try:
        statements = cur.extract_statements(sql)
    except duckdb.PermissionException as exc:
        raise QueryRefusedError(f"statement touches files outside the store: {exc}") from None
    except duckdb.Error as exc:
        raise BadRequestError("sql_error", f"SQL does not parse: {exc}") from None
    if len(statements) != 1:
        raise QueryRefusedError(f"send exactly one statement, got {len(statements)}")
    statement = statements[0]
    if statement.type != duckdb.StatementType.SELECT:
        kind = statement.type.name
        raise QueryRefusedError(f"{kind} statements are refused: the query endpoint is "
                                f"read-only and accepts one SELECT")
    tree = orjson.loads(cur.execute("SELECT json_serialize_sql(?)", [statement.query])
                        .fetchall()[0][0])
    if tree.get("error"):
        raise QueryRefusedError(f"the statement cannot be analysed, so it is refused: "
                                f"{tree.get('error_message', 'unknown error')}")
    return tree, statement.query


def _nodes(node: Any) -> Iterator[dict]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def _constant_texts(arg: dict) -> list[str] | None:
    """The text constants of a table function's argument (a string or a list of strings)."""
    if arg.get("class") == "CONSTANT":
        value = arg.get("value") or {}
        if (value.get("type") or {}).get("id") == "VARCHAR" and not value.get("is_null"):
            return [value["value"]]
        return None
    if arg.get("class") == "FUNCTION" and arg.get("function_name") == "list_value":
        texts = [_constant_texts(child) for child in arg.get("children", [])]
        if all(t is not None and len(t) == 1 for t in texts):
            return [t[0] for t in texts]
    return None


def _store_relations(cur: duckdb.DuckDBPyConnection) -> set[str]:
    rows = cur.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal UNION "
                       "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    return {name.lower() for (name,) in rows}


def _store_table_macros(cur: duckdb.DuckDBPyConnection) -> set[str]:
    """The table macros the store defines (``model_calls_of``, ``incidents_since``, ...): each
    is a SELECT over the store's own views, installed with them, so calling one reads nothing
    else."""
    rows = cur.execute("SELECT DISTINCT function_name FROM duckdb_functions() "
                       "WHERE function_type = 'table_macro' AND NOT internal").fetchall()
    return {name.lower() for (name,) in rows}


def _check_tree(cur: duckdb.DuckDBPyConnection, tree: Any, depth: int) -> None:
    relations: set[str] | None = None
    macros: set[str] | None = None
    for node in _nodes(tree):
        if node.get("type") == "TABLE_FUNCTION" and isinstance(node.get("function"), dict):
            function = node["function"]
            name = str(function.get("function_name", "")).lower()
            args = function.get("children") or []
            if name == "query":
                texts = _constant_texts(args[0]) if len(args) == 1 else None
                if texts is None or len(texts) != 1:
                    raise QueryRefusedError("query() must be given one constant SELECT")
                if depth >= _NESTED_QUERY_DEPTH:
                    raise QueryRefusedError("query() nested too deep")
                inner, _ = _parse_tree(cur, texts[0])
                _check_tree(cur, inner, depth + 1)
            elif name == "query_table":
                texts = _constant_texts(args[0]) if args else None
                if relations is None:
                    relations = _store_relations(cur)
                if texts is None or any(t.lower() not in relations for t in texts):
                    raise QueryRefusedError("query_table() may name only the store's tables "
                                            "and views, as constants")
            elif name in ALLOWED_TABLE_FUNCTIONS:
                pass
            elif name in (macros if macros is not None
                          else (macros := _store_table_macros(cur))):
                pass
            else:
                raise QueryRefusedError(
                    f"table function {name}() is refused: the query endpoint reads the store's "
                    f"tables and views (and generators such as range())")
        elif node.get("class") == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            if name in REFUSED_FUNCTIONS:
                raise QueryRefusedError(f"function {name}() writes to the store or leaves it, "
                                        f"and is refused")


_SCALARS = (str, int, float, bool, type(None))
MAX_PARAMS = 1_000


def _bindable(value: Any) -> bool:
    return isinstance(value, _SCALARS) or (
        isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value))


def check_params(params: Any) -> list | dict:
    """``params`` as DuckDB binds them: a JSON list (for ``?``) or object (for ``$name``) of
    scalars or lists of scalars."""
    if params is None:
        return []
    if isinstance(params, dict):
        items = list(params.items())
    elif isinstance(params, list):
        items = list(enumerate(params))
    else:
        raise BadRequestError("bad_params", f"params must be a JSON list or object, got "
                                            f"{type(params).__name__}")
    if len(items) > MAX_PARAMS:
        raise BadRequestError("bad_params", f"at most {MAX_PARAMS} params, got {len(items)}")
    for key, value in items:
        if not _bindable(value):
            raise BadRequestError("bad_params", f"params[{key!r}] is a {type(value).__name__}: "
                                                f"send strings, numbers, booleans, null or "
                                                f"lists of them")
    return params


def check_read_only(cur: duckdb.DuckDBPyConnection, sql: str) -> str:
    """The one read-only statement in ``sql``; raises ``QueryRefusedError`` otherwise."""
    tree, statement = _parse_tree(cur, sql)
    _check_tree(cur, tree, 0)
    return statement


# -- running -----------------------------------------------------------------------------
class _Deadline:
    """One deadline for a query: interrupts DuckDB when it passes."""

    def __init__(self, cur: duckdb.DuckDBPyConnection, at: float, limit_s: float) -> None:
        self.at, self.limit_s = at, limit_s
        self._timer = threading.Timer(max(0.0, at - time.monotonic()), cur.interrupt)
        self._timer.daemon = True

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


class QueryEngine:
    """Runs read-only queries on cursors of the store's connection, off the event loop."""

    def __init__(self, store, limits: QueryLimits) -> None:
        self._store = store
        self.limits = limits
        self._pool = ThreadPoolExecutor(max_workers=limits.max_concurrent,
                                        thread_name_prefix="rolloutscope-query")
        self._pending = 0

    async def run(self, sql: str, fmt: str = "arrow", params: list | None = None,
                  timeout_s: float | None = None) -> QueryResult:
        """The serialised result of ``sql`` (``fmt``: arrow or json) with ``params`` bound,
        within ``timeout_s`` where the reader gives up sooner than the endpoint's limit."""
        if self._pending >= self.limits.max_concurrent + self.limits.max_waiting:
            raise QueryBusyError(self._pending)
        limit = self.limits.timeout_s
        if isinstance(timeout_s, int | float) and not isinstance(timeout_s, bool) \
                and timeout_s > 0:
            limit = min(limit, float(timeout_s))
        deadline = time.monotonic() + limit
        loop = asyncio.get_running_loop()
        self._pending += 1
        try:
            return await loop.run_in_executor(self._pool, self.run_blocking, sql, fmt, deadline,
                                              params, limit)
        finally:
            self._pending -= 1

    def run_blocking(self, sql: str, fmt: str = "arrow", deadline: float | None = None,
                     params: list | None = None, limit_s: float | None = None) -> QueryResult:
        limits = self.limits
        params = check_params(params)
        limit_s = limits.timeout_s if limit_s is None else limit_s
        at = deadline if deadline is not None else time.monotonic() + limit_s
        with self._store.cursor() as cur:
            # a SELECT must not scan Python objects of this process by name
            cur.execute("SET python_enable_replacements = false")
            # this reader streams the result in batches under its byte limit: DuckDB's own small
            # stream buffer, not the store's whole-result one, keeps a large result from
            # filling the collector's memory (tests/collectors/test_query_isolation.py); the
            # result is materialized first (``_fetch``), so the small buffer is safe
            cur.execute("RESET streaming_buffer_size")
            statement = check_read_only(cur, sql)
            with _Deadline(cur, at, limit_s) as timer:
                if timer.passed:  # it waited its whole time for a worker
                    raise QueryTimeoutError(limit_s)
                try:
                    return self._fetch(cur, statement, fmt, timer, params)
                except (QueryTimeoutError, PayloadTooLargeError):
                    raise
                except duckdb.OutOfMemoryException as exc:
                    raise PayloadTooLargeError(
                        "query_out_of_memory", f"query needs more memory than the store's "
                                               f"limit ({exc}); aggregate or filter it") from None
                except duckdb.PermissionException as exc:
                    raise QueryRefusedError(f"statement touches files outside the store: "
                                            f"{exc}") from None
                except Exception as exc:
                    # an interrupt surfaces as InterruptException while executing, and as an
                    # OSError from the Arrow reader while fetching: the deadline says which
                    if timer.passed or isinstance(exc, duckdb.InterruptException):
                        raise QueryTimeoutError(limit_s) from None
                    if isinstance(exc, duckdb.Error | pa.ArrowException | OSError):
                        raise BadRequestError("sql_error", f"query failed: {exc}") from None
                    raise

    def _fetch(self, cur: duckdb.DuckDBPyConnection, statement: str, fmt: str,
               timer: _Deadline, params: list) -> QueryResult:
        limits = self.limits
        # DuckDB 1.5 deadlocks streaming some plans (a union whose branches join the kept
        # rows, e.g. a dashboard's window of rs_read.completions or rs_read.rollout_attempts)
        # once their result outgrows its stream buffer: every thread parks, and an interrupt
        # is ignored. So the result is made first, in this cursor's own temporary table (no
        # stream: bounded by max_rows + 1 rows and the store's memory limit, past which it
        # spills to disk), and streamed from there, which a plain table's scan does safely.
        cur.execute(f"CREATE OR REPLACE TEMP TABLE {_RESULT} AS SELECT * FROM ({statement}) "
                    f"LIMIT {int(limits.max_rows) + 1}", params)
        try:
            return self._stream(cur, fmt, timer)
        finally:
            cur.execute(f"DROP TABLE IF EXISTS {_RESULT}")

    def _stream(self, cur: duckdb.DuckDBPyConnection, fmt: str,
                timer: _Deadline) -> QueryResult:
        limits = self.limits
        result = cur.execute(f"SELECT * FROM {_RESULT}")
        reader = result.to_arrow_reader(64 * 1024)
        out = _JsonOut(reader.schema) if fmt == "json" else _ArrowOut(reader.schema)
        rows = 0
        for batch in reader:
            rows += batch.num_rows
            if rows > limits.max_rows:
                raise PayloadTooLargeError("too_many_rows",
                                           f"result exceeds {limits.max_rows} rows; add a "
                                           f"LIMIT or aggregate")
            out.write(batch)
            if out.size > limits.max_result_bytes:
                raise PayloadTooLargeError(
                    "result_too_large", f"result exceeds {limits.max_result_bytes} bytes; "
                                        f"select fewer columns or rows, or aggregate")
            if timer.passed:
                raise QueryTimeoutError(timer.limit_s)
        return QueryResult(out.finish(), out.content_type, rows)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


_RESULT = "rs_query_result"  # a query's result, in its cursor's temporary schema (``_fetch``)


class _ArrowOut:
    content_type = ARROW_STREAM

    def __init__(self, schema: pa.Schema) -> None:
        self._sink = pa.BufferOutputStream()
        self._writer = pa.ipc.new_stream(self._sink, schema)

    @property
    def size(self) -> int:
        return self._sink.tell()

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def finish(self) -> memoryview:
        self._writer.close()
        return memoryview(self._sink.getvalue())


class _JsonOut:
    """``{"columns": [...], "rows": [{...}, ...]}``, written batch by batch."""

    content_type = "application/json"

    def __init__(self, schema: pa.Schema) -> None:
        self._out = bytearray(b'{"columns":' + orjson.dumps(schema.names) + b',"rows":[')
        self._first = True

    @property
    def size(self) -> int:
        return len(self._out)

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        rows = orjson.dumps(batch.to_pylist(), default=str, option=orjson.OPT_SERIALIZE_NUMPY)
        if not self._first:
            self._out += b","
        self._out += memoryview(rows)[1:-1]
        self._first = False

    def finish(self) -> bytearray:
        self._out += b"]}"
        return self._out
