"""A small client of a running collector: query its run store into DataFrames, read its own
metrics. Standard library HTTP only, so a notebook needs nothing beyond rolloutscope.

    from rolloutscope.collectors.client import CollectorClient
    client = CollectorClient("http://127.0.0.1:4318")
    df = client.query_df("SELECT * FROM incidents")
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pandas as pd
import pyarrow as pa

from rolloutscope.collectors.query import ARROW_STREAM


class CollectorClientError(Exception):
    """Base class; ``status`` is the HTTP status (None when the collector was unreachable)."""

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


_BY_STATUS = {401: UnauthorizedError, 403: QueryRefusedError, 408: QueryTimeoutError}


class CollectorClient:
    def __init__(self, url: str = "http://127.0.0.1:4318", *, token: str | None = None,
                 timeout_s: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s

    def query_arrow(self, sql: str) -> pa.Table:
        body = self._post("/v1/query", {"sql": sql, "format": "arrow"}, accept=ARROW_STREAM)
        return pa.ipc.open_stream(body).read_all()

    def query_df(self, sql: str) -> pd.DataFrame:
        return self.query_arrow(sql).to_pandas()

    def query_records(self, sql: str) -> list[dict[str, Any]]:
        """The JSON encoding of the endpoint, for callers without pyarrow at hand."""
        return json.loads(self._post("/v1/query", {"sql": sql, "format": "json"}))["rows"]

    def metrics(self) -> dict[str, Any]:
        """The collector's own counters (accepted / rejected / retried items, writer state)."""
        return json.loads(self._request(urllib.request.Request(
            self.url + "/metrics", headers=self._headers)))

    def _post(self, path: str, doc: dict[str, Any], accept: str = "application/json") -> bytes:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(doc).encode(), method="POST",
            headers={**self._headers, "Content-Type": "application/json", "Accept": accept})
        return self._request(request)

    def _request(self, request: urllib.request.Request) -> bytes:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())["error"]
                message, problem = error["message"], error["problem"]
            except (ValueError, KeyError, TypeError):
                message, problem = f"HTTP {exc.code} {exc.reason}", None
            raise _BY_STATUS.get(exc.code, QueryError)(
                message, status=exc.code, problem=problem) from None
        except (urllib.error.URLError, OSError) as exc:
            raise CollectorUnavailableError(
                f"no collector at {self.url}: {getattr(exc, 'reason', exc)}") from None
