"""Read-only SQL over the run store, for readers while the collector writes.

DuckDB lets no second process open a file that one process writes, so notebooks and scripts
query a live run through the collector. Three layers keep a query from changing or escaping the
store: (1) exactly one statement, of type SELECT (``SHOW``/``DESCRIBE``/``FROM t``/``PRAGMA``
reads are SELECTs to DuckDB); (2) no function with a side effect on the file
(``checkpoint()``, ``nextval()``); (3) the service opens the store with
``enable_external_access = false``, so no statement can read or write other files, attach
databases or install/load extensions. Each query has a time limit (DuckDB's ``interrupt``)
and a row limit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from rolloutscope.collectors.otlp.errors import BadRequestError, PayloadTooLargeError

# Functions that write to the store even inside a SELECT.
WRITING_FUNCTIONS = frozenset({"checkpoint", "force_checkpoint", "nextval"})
ARROW_STREAM = "application/vnd.apache.arrow.stream"


class QueryRefusedError(BadRequestError):
    """The statement is not a read-only query."""

    status = 403

    def __init__(self, message: str) -> None:
        super().__init__("refused_statement", message)


class QueryTimeoutError(BadRequestError):
    status = 408

    def __init__(self, timeout_s: float) -> None:
        super().__init__("query_timeout", f"query exceeded its time limit of {timeout_s:g} s")


@dataclass(frozen=True, kw_only=True)
class QueryLimits:
    timeout_s: float = 30.0
    max_rows: int = 5_000_000
    max_concurrent: int = 2


def _function_names(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        name = node.get("function_name")
        if isinstance(name, str):
            yield name.lower()
        for value in node.values():
            yield from _function_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _function_names(value)


def check_read_only(cur: duckdb.DuckDBPyConnection, sql: str) -> str:
    """The one read-only statement in ``sql``; raises ``QueryRefusedError`` otherwise."""
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
    writing = sorted(set(_function_names(tree)) & WRITING_FUNCTIONS)
    if writing:
        raise QueryRefusedError(f"function(s) {', '.join(writing)} write to the store and are "
                                f"refused")
    return statement.query


class QueryEngine:
    """Runs read-only queries on cursors of the store's connection, off the event loop."""

    def __init__(self, store, limits: QueryLimits) -> None:
        self._store = store
        self.limits = limits
        self._pool = ThreadPoolExecutor(max_workers=limits.max_concurrent,
                                        thread_name_prefix="rolloutscope-query")

    async def run(self, sql: str) -> pa.Table:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.run_blocking, sql)

    def run_blocking(self, sql: str) -> pa.Table:
        with self._store.cursor() as cur:
            # a SELECT must not scan Python objects of this process by name
            cur.execute("SET python_enable_replacements = false")
            statement = check_read_only(cur, sql)
            timer = threading.Timer(self.limits.timeout_s, cur.interrupt)
            timer.start()
            try:
                reader = cur.execute(statement).fetch_record_batch(64 * 1024)
                batches, rows = [], 0
                for record_batch in reader:
                    rows += record_batch.num_rows
                    if rows > self.limits.max_rows:
                        raise PayloadTooLargeError(
                            "too_many_rows", f"result exceeds {self.limits.max_rows} rows; "
                                             f"add a LIMIT or aggregate")
                    batches.append(record_batch)
                return pa.Table.from_batches(batches, schema=reader.schema)
            except duckdb.InterruptException:
                raise QueryTimeoutError(self.limits.timeout_s) from None
            except duckdb.PermissionException as exc:
                raise QueryRefusedError(f"statement touches files outside the store: "
                                        f"{exc}") from None
            except duckdb.Error as exc:
                raise BadRequestError("sql_error", f"query failed: {exc}") from None
            finally:
                timer.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def arrow_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def json_rows(table: pa.Table) -> bytes:
    return orjson.dumps({"columns": table.column_names, "rows": table.to_pylist()},
                        default=str, option=orjson.OPT_SERIALIZE_NUMPY)
