"""Bounds on the HTTP server's connections: in number, and in the time they may sit idle.

aiohttp closes a connection that has not sent a complete request head within its keep-alive
timeout of connecting or of its previous response (the service sets that timeout: it is the
header timeout), and the routes bound the body's time. What aiohttp does not bound is how many
connections there are: 1,100 idle sockets exhaust a 1,024 file-descriptor limit, after which
the collector can accept nobody. ``ConnectionLimiter`` wraps the server's protocol factory:

- at most ``max_connections`` are open; a new one past that closes the connection that has been
  idle longest (connected and not in a request: a slow or missing request head, or a kept-alive
  connection between requests), so a flood of idle or slow-header connections never keeps a
  real sender out;
- when every connection is in a request, the new one is answered ``503`` with ``Retry-After``
  and closed (a clear refusal, which the stock exporters retry);
- what it evicts and refuses is logged at most once per ``log_interval_s`` per kind, with how
  many more there were.

A connection is in a request from the moment aiohttp hands its request to the routes until the
response is written (``middleware``), and idle otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

log = logging.getLogger(__name__)


class RateLimitedLog:
    """At most one line per ``interval_s`` for each kind of message, saying how many were held
    back since the last one."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger, self._interval, self._clock = logger, interval_s, clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self.lines = 0

    def warning(self, kind: str, message: str, *args: Any) -> None:
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        suffix = f" ({held} more like it in the last {self._interval:g} s)" if held else ""
        self.lines += 1
        self._logger.warning(message + suffix, *args)


class RateLimitFilter(logging.Filter):
    """A logging filter with ``RateLimitedLog``'s rule, for loggers the collector does not
    write itself (aiohttp's, asyncio's, gRPC's): at most one record per ``interval_s`` for each
    logger and message, the next one saying how many were held back."""

    def __init__(self, interval_s: float = 10.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._interval, self._clock = interval_s, clock
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        if len(self._last) > 1024:  # messages with their values in them: keep the map small
            self._last.clear()
            self._held.clear()
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {self._interval:g} s)"
        return True


class _Connection:
    __slots__ = ("transport", "busy")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.busy = 0  # requests in progress (HTTP/1.1: at most one at a time)


def _refusal(max_connections: int, retry_after_s: float) -> bytes:
    body = orjson.dumps({"error": {
        "problem": "too_many_connections",
        "message": f"the collector has {max_connections} connections in requests, its limit; "
                   f"retry after {retry_after_s:g} s"}})
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: {max(1, round(retry_after_s))}\r\n"
            f"Connection: close\r\n\r\n")
    return head.encode() + body


class ConnectionLimiter:
    def __init__(self, *, max_connections: int, retry_after_s: float = 1.0,
                 log_interval_s: float = 10.0) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        self.max_connections = max_connections
        self._refusal_bytes = _refusal(max_connections, retry_after_s)
        self._open: dict[asyncio.BaseTransport, _Connection] = {}
        self._idle: OrderedDict[_Connection, None] = OrderedDict()  # oldest idle first
        self.evicted = 0
        self.refused = 0
        self.peak = 0
        self.log = RateLimitedLog(log, log_interval_s)

    @property
    def open(self) -> int:
        return len(self._open)

    def stats(self) -> dict[str, int]:
        return {"open": len(self._open), "idle": len(self._idle), "peak": self.peak,
                "max": self.max_connections, "evicted_idle": self.evicted,
                "refused": self.refused}

    def protocol_factory(self, factory: Callable[[], asyncio.Protocol]
                         ) -> Callable[[], asyncio.Protocol]:
        """``factory`` (aiohttp's server) with every connection counted and bounded."""
        return lambda: _Limited(self, factory)

    # -- the protocol's side ---------------------------------------------------------------
    def _admit(self, transport: asyncio.Transport) -> bool:
        if len(self._open) >= self.max_connections and not self._evict_idle():
            self.refused += 1
            self.log.warning("refused", "refused a connection: all %d connections are in "
                                        "requests", self.max_connections)
            return False
        conn = _Connection(transport)
        self._open[transport] = conn
        self._idle[conn] = None
        self.peak = max(self.peak, len(self._open))
        return True

    def _evict_idle(self) -> bool:
        for conn in self._idle:
            if conn.transport.get_write_buffer_size():
                continue  # still sending its last response
            self._forget(conn.transport)
            conn.transport.abort()
            self.evicted += 1
            self.log.warning("evicted", "closed the longest idle connection to admit a new one "
                                        "(%d connections open, the limit)", self.max_connections)
            return True
        return False

    def _forget(self, transport: asyncio.BaseTransport) -> None:
        conn = self._open.pop(transport, None)
        if conn is not None:
            self._idle.pop(conn, None)

    # -- the routes' side ------------------------------------------------------------------
    @web.middleware
    async def middleware(self, request: web.Request, handler):
        conn = self._open.get(request.transport)
        if conn is None:  # evicted meanwhile, or not ours
            return await handler(request)
        conn.busy += 1
        self._idle.pop(conn, None)
        try:
            response = await handler(request)
            if isinstance(response, web.Response):
                # written here, so that the connection turns idle only once it has sent it
                try:
                    await response.prepare(request)
                    await response.write_eof()
                except ConnectionError:
                    pass  # the peer went away; aiohttp sees the same and says nothing
            return response
        finally:
            conn.busy -= 1
            if not conn.busy and conn.transport in self._open:
                self._idle[conn] = None


class _Limited(asyncio.Protocol):
    """aiohttp's protocol for one connection, admitted (or refused) by the limiter."""

    __slots__ = ("_limiter", "_factory", "_inner", "_transport")

    def __init__(self, limiter: ConnectionLimiter, factory: Callable[[], asyncio.Protocol]):
        self._limiter = limiter
        self._factory = factory
        self._inner: Any = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if not self._limiter._admit(transport):
            transport.write(self._limiter._refusal_bytes)
            transport.close()
            return
        self._inner = self._factory()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._inner is not None:
            return self._inner.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._limiter._forget(self._transport)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()
