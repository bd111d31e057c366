"""A run store read through a running collector: ``CollectorClient`` (SQL into Arrow tables
and DataFrames, the collector's own metrics) and ``RemoteRunStore`` (what a reader calls on a
``RunStore``, over the same endpoint). Standard library HTTP only, so a notebook needs nothing
beyond rolloutscope.

    from rolloutscope.store.remote import CollectorClient
    client = CollectorClient("http://127.0.0.1:4318")
    df = client.query_df("SELECT * FROM incidents WHERE run_id = ?", ["run-1"])

DuckDB admits no second process on a file one process writes, so a reader beside a collector
cannot open its store; the collector's ``/v1/query`` endpoint reads it for them. The live
dashboard of ``rolloutscope serve`` runs in its own process and reads through
``RemoteRunStore``: a burst of page loads, a session's frames, a renderer's memory, none of it
is the collector's. What a read costs the collector is bounded there: read-only statements,
each under the endpoint's time, row and byte limits, a few at once, within the store's DuckDB
memory limit (``collectors/query.py``).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

if TYPE_CHECKING:
    import pandas as pd

from rolloutscope.store.errors import StoreError
from rolloutscope.store.store import RunCatalog

ARROW_STREAM = "application/vnd.apache.arrow.stream"
ANSWER_GRACE_S = 5.0


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python value JSON can carry."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} cannot be sent as a query parameter")


class CollectorClientError(Exception):
    """Base class; ``status`` is the HTTP status (None when the collector was unreachable)."""

    retry_after_s: float | None = None

    def __init__(self, message: str, *, status: int | None = None, problem: str | None = None):
        self.status, self.problem = status, problem
        super().__init__(message)


class CollectorUnavailableError(CollectorClientError):
    """No collector answered at the URL."""


class UnauthorizedError(CollectorClientError):
    """The collector wants a (different) bearer token."""


class QueryRefusedError(CollectorClientError):
    """The statement writes or escapes the store; the endpoint is read-only."""


class QueryTimeoutError(CollectorClientError):
    """The query ran past the collector's per-query time limit."""


class QueryError(CollectorClientError):
    """Any other refusal: SQL that does not parse or fails, a result over the row limit."""


class QueryBusyError(CollectorClientError):
    """The collector ran and queued as many queries as it admits, for longer than the call's
    time allowed."""


_BY_STATUS = {401: UnauthorizedError, 403: QueryRefusedError, 408: QueryTimeoutError,
              429: QueryBusyError}


class CollectorClient:
    def __init__(self, url: str = "http://127.0.0.1:4318", *, token: str | None = None,
                 timeout_s: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s

    def query_arrow(self, sql: str, params: list | dict | None = None, *,
                    timeout_s: float | None = None) -> pa.Table:
        """The result of ``sql`` with ``params`` bound to its ``?`` placeholders (a list) or
        its ``$name`` ones (a dict). A collector
        busy with other queries (429) is asked again after its Retry-After, within
        ``timeout_s`` (default: the client's)."""
        doc: dict[str, Any] = {"sql": sql, "format": "arrow"}
        if params:
            doc["params"] = dict(params) if isinstance(params, dict) else list(params)
        limit = self.timeout_s if timeout_s is None else timeout_s
        doc["timeout_s"] = limit  # the collector stops the query when this call gives up
        until = time.monotonic() + limit
        while True:
            try:
                # the collector answers 408 at the limit; the socket waits a little longer
                body = self._post("/v1/query", doc, accept=ARROW_STREAM,
                                  timeout_s=max(0.1, until - time.monotonic()) + ANSWER_GRACE_S)
                return pa.ipc.open_stream(body).read_all()
            except QueryBusyError as exc:
                wait = exc.retry_after_s or 0.2
                if time.monotonic() + wait >= until:
                    raise
                time.sleep(wait)

    def query_df(self, sql: str, params: list | dict | None = None) -> pd.DataFrame:
        return self.query_arrow(sql, params).to_pandas()

    def query_records(self, sql: str) -> list[dict[str, Any]]:
        """The JSON encoding of the endpoint, for callers without pyarrow at hand."""
        return json.loads(self._post("/v1/query", {"sql": sql, "format": "json"}))["rows"]

    def metrics(self) -> dict[str, Any]:
        """The collector's own counters (accepted / rejected / retried items, writer state)."""
        return json.loads(self._request(urllib.request.Request(
            self.url + "/metrics", headers=self._headers)))

    def _post(self, path: str, doc: dict[str, Any], accept: str = "application/json", *,
              timeout_s: float | None = None) -> bytes:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(doc, default=_plain).encode(), method="POST",
            headers={**self._headers, "Content-Type": "application/json", "Accept": accept})
        return self._request(request, timeout_s)

    def _request(self, request: urllib.request.Request, timeout_s: float | None = None) -> bytes:
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())["error"]
                message, problem = error["message"], error["problem"]
            except (ValueError, KeyError, TypeError):
                message, problem = f"HTTP {exc.code} {exc.reason}", None
            error_class = _BY_STATUS.get(exc.code, QueryError)
            failure = error_class(message, status=exc.code, problem=problem)
            if error_class is QueryBusyError:
                try:
                    failure.retry_after_s = float(exc.headers.get("Retry-After", ""))
                except ValueError:
                    pass
            raise failure from None
        except TimeoutError:
            raise QueryTimeoutError(f"no answer from {self.url} within the call's time "
                                    f"limit") from None
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(getattr(exc, "reason", None), TimeoutError):
                raise QueryTimeoutError(f"no answer from {self.url} within the call's time "
                                        f"limit") from None
            raise CollectorUnavailableError(
                f"no collector at {self.url}: {getattr(exc, 'reason', exc)}") from None


class RemoteReadTimeout(StoreError):
    """A read through the collector did not finish within its time limit."""


class RemoteRunStore(RunCatalog):
    """The run store behind the collector at ``url`` (its OTLP/HTTP base URL), read-only."""

    is_lake = False
    lake = None
    # the run changes while the collector writes: nothing read is valid for ever
    read_only = False
    remote = True

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 60.0) -> None:
        self.client = CollectorClient(url, token=token, timeout_s=timeout_s)
        self.path = self.client.url
        self._maintained: bool | None = None
        self._local = threading.local()

    def _duck(self) -> duckdb.DuckDBPyConnection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = duckdb.connect()
        return con

    def query_arrow(self, sql: str, params: Sequence[Any] | None = None, *,
                    timeout_s: float | None = None) -> pa.Table:
        try:
            return self.client.query_arrow(sql, params, timeout_s=timeout_s)
        except QueryTimeoutError as exc:
            raise RemoteReadTimeout(str(exc)) from None

    def _relation(self, table: pa.Table) -> duckdb.DuckDBPyRelation:
        return self._duck().from_arrow(table)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        table = self.query_arrow(sql, params)
        return self._relation(table).fetchall() if table.num_columns else []

    def query_df(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        return self._relation(self.query_arrow(sql, params)).df()

    def query_records(self, sql: str, params: Sequence[Any] | dict | None = None
                      ) -> list[dict[str, Any]]:
        table = self.query_arrow(sql, params)
        rel = self._relation(table)
        return [dict(zip(rel.columns, row)) for row in rel.fetchall()]

    def query_frame(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        from rolloutscope.store.frames import arrow_frame

        return arrow_frame(self.query_arrow(sql, params))

    @property
    def maintained(self) -> bool:
        """Whether the collector's store keeps maintained rows (``rs_read`` is there): a
        collector always derives them for a file, never for a lake."""
        if self._maintained is None:
            self._maintained = bool(self.query(
                "SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'rs_read'")[0][0])
        return self._maintained

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()

    def __enter__(self) -> RemoteRunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
