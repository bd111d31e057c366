"""Bounds on the HTTP server's connections: in number, and in the time they may sit idle.

aiohttp closes a connection that has not sent a complete request head within its keep-alive
timeout of connecting or of its previous response (the service sets that timeout: it is the
header timeout), and the routes bound the body's time. What aiohttp does not bound is how many
connections there are: every one is a file descriptor, and past the process's open-file limit
the collector can accept nobody. The service sizes the cap from that limit (``connection_caps``
in ``service.py``); ``ConnectionLimiter`` wraps the server's protocol factory and holds it:

- at most ``max_connections`` are open; a new one past that closes an idle connection, first
  one that has never sent a byte (the longest connected first), then one between requests or
  in a request head the routes do not have yet (the longest quiet first), so a flood of idle
  or slow-header connections never keeps a real sender out. It is closed, not reset: a
  kept-alive client finds its pooled connection closed when it next uses it and opens another;
- when every connection is in a request, the new one is answered ``503`` with ``Retry-After``
  and ``Connection: close`` once its request head has arrived, and what it still sends is read
  and dropped until it closes (at most ``linger_s``): the stock exporters retry that answer
  after the delay it names. Closing it with its request unread would reset it, which they see
  as a connection error. At most ``max_refusing`` are being answered at once (each holds a file
  descriptor too); past that the next is reset, and counted;
- what it evicts, refuses and resets is logged at most once per ``log_interval_s`` per kind,
  with how many more there were.

A connection is in a request from the moment aiohttp hands its request to the routes until the
response is written (``middleware``), and idle otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from google.rpc import status_pb2

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
    __slots__ = ("transport", "busy", "heard")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.busy = 0  # requests in progress (HTTP/1.1: at most one at a time)
        self.heard = False  # has sent a byte since it connected


_HEAD_END = b"\r\n\r\n"
_MAX_REFUSED_HEAD = 16 * 1024  # what a refused connection may send before it is answered
_UNAVAILABLE = 14  # google.rpc.Code


def _refusal(max_connections: int, retry_after_s: float, protobuf: bool) -> bytes:
    """The answer past the cap: ``503`` + ``Retry-After`` (integer seconds, RFC 9110), which
    the stock OTLP/HTTP exporters retry after that delay; the body is a ``google.rpc.Status``
    in the request's encoding, as OTLP/HTTP says."""
    message = (f"the collector has {max_connections} connections in requests, its limit; "
               f"retry after {retry_after_s:g} s")
    if protobuf:
        body = status_pb2.Status(code=_UNAVAILABLE, message=message).SerializeToString()
        media = "application/x-protobuf"
    else:
        body = orjson.dumps({"code": _UNAVAILABLE, "message": message,
                             "error": {"problem": "too_many_connections", "message": message}})
        media = "application/json"
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {media}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Retry-After: {max(1, math.ceil(retry_after_s))}\r\n"
            f"Connection: close\r\n\r\n")
    return head.encode() + body


class ConnectionLimiter:
    """``max_connections`` admitted at once; past them, at most ``max_refusing`` being
    answered ``503`` (each for at most ``linger_s``); past those too, a reset."""

    def __init__(self, *, max_connections: int, retry_after_s: float = 1.0,
                 log_interval_s: float = 10.0, max_refusing: int = 64,
                 linger_s: float = 10.0) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if max_refusing < 0:
            raise ValueError(f"max_refusing must not be negative, got {max_refusing}")
        if not linger_s > 0:
            raise ValueError(f"linger_s must be positive, got {linger_s}")
        self.max_connections = max_connections
        self.max_refusing = max_refusing
        self.linger_s = linger_s
        self._refusals = {protobuf: _refusal(max_connections, retry_after_s, protobuf)
                          for protobuf in (False, True)}
        self._open: dict[asyncio.BaseTransport, _Connection] = {}
        # evicted first: connections that never sent a byte, the longest connected first
        self._silent: OrderedDict[_Connection, None] = OrderedDict()
        # then those between requests (kept alive) or in a request head the routes do not
        # have yet, the longest quiet first
        self._idle: OrderedDict[_Connection, None] = OrderedDict()
        self.refusing = 0  # connections being answered 503 now
        self.evicted = 0
        self.refused = 0
        self.reset = 0
        self.peak = 0
        self.log = RateLimitedLog(log, log_interval_s)

    @property
    def open(self) -> int:
        return len(self._open)

    def stats(self) -> dict[str, int]:
        idle = len(self._silent) + len(self._idle)
        return {"open": len(self._open), "idle": idle, "in_requests": len(self._open) - idle,
                "peak": self.peak, "max": self.max_connections, "evicted_idle": self.evicted,
                "refused": self.refused, "refusing": self.refusing,
                "max_refusing": self.max_refusing, "reset": self.reset}

    def protocol_factory(self, factory: Callable[[], asyncio.Protocol]
                         ) -> Callable[[], asyncio.Protocol]:
        """``factory`` (aiohttp's server) with every connection counted and bounded."""
        return lambda: _Limited(self, factory)

    # -- the protocol's side ---------------------------------------------------------------
    def _admit(self, transport: asyncio.Transport) -> bool:
        if len(self._open) >= self.max_connections and not self._evict_idle():
            return False
        conn = _Connection(transport)
        self._open[transport] = conn
        self._silent[conn] = None
        self.peak = max(self.peak, len(self._open))
        return True

    def _refuse(self) -> bool:
        """Whether a connection past the cap can be answered (else it is reset)."""
        if self.refusing >= self.max_refusing:
            self.reset += 1
            self.log.warning("reset", "reset a connection: all %d connections are in requests "
                                      "and %d more are being refused", self.max_connections,
                             self.refusing)
            return False
        self.refused += 1
        self.refusing += 1
        self.log.warning("refused", "answered a connection 503: all %d connections are in "
                                    "requests", self.max_connections)
        return True

    def _evict_idle(self) -> bool:
        for order in (self._silent, self._idle):
            for conn in order:
                if conn.transport.get_write_buffer_size():
                    continue  # still sending its last response
                self._forget(conn.transport)
                # a FIN, not a reset: a kept-alive client sees its pooled connection closed
                # before it reuses it, and opens another (urllib3, aiohttp and gRPC all do)
                conn.transport.close()
                self.evicted += 1
                self.log.warning("evicted", "closed the longest idle connection to admit a new "
                                            "one (%d connections open, the limit)",
                                 self.max_connections)
                return True
        return False

    def _heard(self, transport: asyncio.BaseTransport) -> None:
        """A connection sent bytes: no longer silent, and the last to be evicted of the idle."""
        conn = self._open.get(transport)
        if conn is None:
            return
        if not conn.heard:
            conn.heard = True
            self._silent.pop(conn, None)
            if not conn.busy:
                self._idle[conn] = None
        elif not conn.busy:
            self._idle.pop(conn, None)
            self._idle[conn] = None

    def _forget(self, transport: asyncio.BaseTransport) -> None:
        conn = self._open.pop(transport, None)
        if conn is not None:
            self._silent.pop(conn, None)
            self._idle.pop(conn, None)

    # -- the routes' side ------------------------------------------------------------------
    @web.middleware
    async def middleware(self, request: web.Request, handler):
        conn = self._open.get(request.transport)
        if conn is None:  # evicted meanwhile, or not ours
            return await handler(request)
        conn.busy += 1
        self._silent.pop(conn, None)
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
                conn.heard = True
                self._idle[conn] = None


class _Limited(asyncio.Protocol):
    """aiohttp's protocol for one connection, admitted by the limiter; or, past its cap, a
    refusal: the request head is read, answered ``503`` + ``Retry-After`` + ``Connection:
    close``, the write side shut, and what the sender still sends (its body) read and dropped
    until it closes or ``linger_s`` passes. Closing with its request unread would make the
    kernel reset the connection, and the sender would see a connection error instead of the
    answer; the stock exporters retry the answer after ``Retry-After``."""

    __slots__ = ("_limiter", "_factory", "_inner", "_transport", "_head", "_answered",
                 "_linger")

    def __init__(self, limiter: ConnectionLimiter, factory: Callable[[], asyncio.Protocol]):
        self._limiter = limiter
        self._factory = factory
        self._inner: Any = None
        self._transport: asyncio.Transport | None = None
        self._head: bytearray | None = None  # a refused connection's request head so far
        self._answered = False
        self._linger: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        limiter = self._limiter
        if limiter._admit(transport):
            self._inner = self._factory()
            self._inner.connection_made(transport)
        elif limiter._refuse():
            self._head = bytearray()
            # bounded in time from the start: a refused sender that sends nothing, or does
            # not close after the answer, is closed when this fires
            self._linger = asyncio.get_running_loop().call_later(
                limiter.linger_s, transport.close)
        else:
            transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._limiter._heard(self._transport)
            self._inner.data_received(data)
        elif self._head is not None and not self._answered:
            self._head += data[:_MAX_REFUSED_HEAD]
            if _HEAD_END in self._head or len(self._head) >= _MAX_REFUSED_HEAD:
                self._answer()
        # after the answer: the rest of the request, read and dropped

    def _answer(self) -> None:
        head = bytes(self._head).split(_HEAD_END, 1)[0].lower()
        protobuf = b"\ncontent-type: application/x-protobuf" in head or \
            b"\ncontent-type: application/protobuf" in head
        self._answered = True
        self._head = bytearray()
        self._transport.write(self._limiter._refusals[protobuf])
        if self._transport.can_write_eof():
            self._transport.write_eof()

    def eof_received(self) -> bool | None:
        if self._inner is not None:
            return self._inner.eof_received()
        if self._head is not None and not self._answered and self._head:
            self._answer()  # a head cut short by a half close still gets its answer
        return False  # the transport closes once the answer is written

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is not None:
            self._limiter._forget(self._transport)
            self._inner.connection_lost(exc)
        elif self._head is not None:
            self._limiter.refusing -= 1
            self._head = None
            if self._linger is not None:
                self._linger.cancel()

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()
