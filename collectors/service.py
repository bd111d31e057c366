"""The collector service: one process, one event loop, the only writer of the run file.

Everything long-lived enters one ``AsyncExitStack`` in ``CollectorService.run``; a later part
(the live dashboard) joins by entering the same stack. Teardown runs in reverse order of entry,
and that order is the durability contract on shutdown:

1. the servers stop accepting and finish their in-flight requests (each waits for its commit);
2. the commit waiter settles every pending future;
3. the store's writer commits everything still queued, and the file is closed.

So SIGTERM/SIGINT lose nothing that was queued, and a 2xx/OK was only ever sent after the
commit of its rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import orjson
from aiohttp import web

from rolloutscope.collectors.otlp.counters import COLLECTOR_SERVICE, CollectorCounters
from rolloutscope.collectors.otlp.errors import BadRequestError
from rolloutscope.collectors.otlp.grpc import BearerTokenInterceptor, OtlpGrpcHandlers
from rolloutscope.collectors.otlp.http import OtlpHttpRoutes
from rolloutscope.collectors.otlp.limits import MiB, DecodeLimits
from rolloutscope.collectors.otlp.receiver import CommitQueue, OtlpReceiver
from rolloutscope.collectors.query import (
    ARROW_STREAM,
    QueryEngine,
    QueryLimits,
    arrow_ipc,
    json_rows,
)
from rolloutscope.store.rows import RowBatch
from rolloutscope.store.store import RunStore

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 4318
DEFAULT_GRPC_PORT = 4317
SELF_METRICS_INTERVAL_S = 10.0


class BindRefusedError(Exception):
    """A non-loopback bind was asked for without a token."""


@dataclass(frozen=True, kw_only=True)
class CollectorConfig:
    db_path: Path
    host: str = DEFAULT_HOST
    http_port: int = DEFAULT_HTTP_PORT
    grpc_port: int = DEFAULT_GRPC_PORT
    token: str | None = None
    limits: DecodeLimits = field(default_factory=DecodeLimits)
    query: QueryLimits = field(default_factory=QueryLimits)
    max_queued_rows: int = 2_000_000
    commit_max_rows: int = 50_000
    commit_max_delay_ms: float = 50.0
    retry_after_s: float = 1.0
    drain_timeout_s: float = 30.0
    self_metrics_interval_s: float = SELF_METRICS_INTERVAL_S

    def __post_init__(self) -> None:
        check_bind(self.host, self.token)


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def check_bind(host: str, token: str | None) -> None:
    if token is None and not is_loopback(host):
        raise BindRefusedError(
            f"refusing to listen on non-loopback address {host!r} without a token: anyone who "
            f"can reach it could write to and read the run; pass --token-file")


@dataclass(frozen=True)
class Endpoints:
    http: str  # base URL, e.g. http://127.0.0.1:4318
    grpc: str  # host:port


def _auth_middleware(token: str):
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def require_token(request: web.Request, handler):
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return web.json_response(
                {"error": {"problem": "unauthenticated",
                           "message": "missing or wrong bearer token"}},
                status=401, headers={"WWW-Authenticate": 'Bearer realm="rolloutscope"'})
        return await handler(request)

    return require_token


class CollectorService:
    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.counters = CollectorCounters()
        self.endpoints: Endpoints | None = None
        self.store: RunStore | None = None
        self._writer = None
        self._query: QueryEngine | None = None
        self._started = time.monotonic()
        self._stack: contextlib.AsyncExitStack | None = None

    # -- HTTP routes besides OTLP ----------------------------------------------------------
    async def _query_route(self, request: web.Request) -> web.Response:
        try:
            if request.method == "POST":
                doc = orjson.loads(await request.read() or b"{}")
                if not isinstance(doc, dict):
                    raise BadRequestError("invalid_json", "send a JSON object {\"sql\": ...}")
            else:
                doc = dict(request.query)
            sql, fmt = doc.get("sql"), doc.get("format", "arrow")
            if not isinstance(sql, str) or not sql.strip():
                raise BadRequestError("missing_sql", "no SQL given: send {\"sql\": \"SELECT ...\"}")
            if fmt not in ("arrow", "json"):
                raise BadRequestError("bad_format", f"format must be arrow or json, got {fmt!r}")
            table = await self._query.run(sql)
        except orjson.JSONDecodeError as exc:
            return _json_error(400, "invalid_json", f"body is not valid JSON: {exc}")
        except BadRequestError as exc:
            self.counters.problems[exc.problem] += 1
            return _json_error(exc.status, exc.problem, exc.message)
        if fmt == "arrow":
            return web.Response(body=arrow_ipc(table), content_type=ARROW_STREAM)
        return web.Response(body=json_rows(table), content_type="application/json")

    async def _metrics_route(self, request: web.Request) -> web.Response:
        stats = self._writer.stats
        doc = self.counters.snapshot()
        doc["writer"] = {"queued_rows": self._writer.queued_rows,
                         "max_queued_rows": self._writer.max_queued_rows,
                         "committed_rows": stats.committed_rows, "commits": stats.commits,
                         "rejected_rows": stats.rejected_rows, "failed_rows": stats.failed_rows,
                         "last_commit_ms": stats.last_commit_ms}
        doc["uptime_s"] = time.monotonic() - self._started
        return web.Response(body=orjson.dumps(doc), content_type="application/json")

    # -- lifecycle -------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event,
                  on_ready: Callable[[Endpoints], Awaitable[None] | None] | None = None) -> None:
        """Serve until ``stop`` is set, then drain and commit everything (see module doc)."""
        async with contextlib.AsyncExitStack() as stack:
            self._stack = stack
            await self._start(stack)
            if on_ready is not None:
                maybe = on_ready(self.endpoints)
                if asyncio.iscoroutine(maybe):
                    await maybe
            await stop.wait()
            log.info("collector stopping: draining in-flight requests and queued rows")

    def join(self, stop: Callable[[], None]) -> None:
        """Have a part that reads the store (the live dashboard) stop with the service: it
        enters the exit stack last, so it stops first, while the store is still open."""
        self._stack.callback(stop)

    async def _start(self, stack: contextlib.AsyncExitStack) -> None:
        cfg = self.config
        # entered first, closed last: close() drains the writer's queue into the file
        self.store = stack.enter_context(RunStore(cfg.db_path))
        with self.store.cursor() as cur:
            # the store never reads or writes other files: no COPY/ATTACH/INSTALL, and no
            # query through the read endpoint can reach the file system (see query.py)
            cur.execute("SET enable_external_access = false")
        self._writer = self.store.writer(max_rows=cfg.commit_max_rows,
                                         max_delay_ms=cfg.commit_max_delay_ms,
                                         max_queued_rows=cfg.max_queued_rows)
        commits = CommitQueue(self._writer, retry_after_s=cfg.retry_after_s)
        stack.callback(commits.close)  # after the servers: settles what they still wait for
        self._query = QueryEngine(self.store, cfg.query)
        stack.callback(self._query.close)
        stack.callback(self.commit_self_metrics)  # the final counts, once the servers stopped
        receiver = OtlpReceiver(enqueue=commits.enqueue, limits=cfg.limits,
                                counters=self.counters)
        grpc_port = await self._start_grpc(stack, receiver)
        http_port = await self._start_http(stack, receiver)
        host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        self.endpoints = Endpoints(http=f"http://{host}:{http_port}", grpc=f"{host}:{grpc_port}")
        task = asyncio.create_task(self._record_self_metrics())
        stack.push_async_callback(_cancel, task)  # stops first: nothing to drain

    async def _start_http(self, stack: contextlib.AsyncExitStack, receiver: OtlpReceiver) -> int:
        cfg = self.config
        middlewares = [_auth_middleware(cfg.token)] if cfg.token else []
        app = web.Application(middlewares=middlewares,
                              client_max_size=cfg.limits.max_body_bytes + MiB)
        OtlpHttpRoutes(receiver).add_to(app)
        app.router.add_route("*", "/v1/query", self._query_route)
        app.router.add_get("/metrics", self._metrics_route)
        # auto_decompress off: the receiver inflates gzip itself, under a size limit
        runner = web.AppRunner(app, auto_decompress=False, access_log=None,
                               shutdown_timeout=cfg.drain_timeout_s)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, cfg.host, cfg.http_port, reuse_address=True,
                           shutdown_timeout=cfg.drain_timeout_s)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    async def _start_grpc(self, stack: contextlib.AsyncExitStack, receiver: OtlpReceiver) -> int:
        cfg = self.config
        interceptors = [BearerTokenInterceptor(cfg.token)] if cfg.token else []
        max_message = cfg.limits.max_decoded_bytes
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[("grpc.max_receive_message_length", max_message),
                     ("grpc.max_send_message_length", 16 * MiB),
                     ("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers(OtlpGrpcHandlers(receiver).generic_handlers())
        port = server.add_insecure_port(f"{cfg.host}:{cfg.grpc_port}")
        if port == 0:
            raise OSError(f"cannot listen for gRPC on {cfg.host}:{cfg.grpc_port}")
        await server.start()
        stack.push_async_callback(server.stop, cfg.drain_timeout_s)
        return port

    async def _record_self_metrics(self) -> None:
        """Append the collector's own counters to the metrics table, cumulatively."""
        while True:
            await asyncio.sleep(self.config.self_metrics_interval_s)
            self.commit_self_metrics()

    def commit_self_metrics(self) -> None:
        batch = RowBatch()
        now = time.time_ns()
        for name, signal, value in self.counters.rows():
            batch.add_row("metrics", service=COLLECTOR_SERVICE, name=name, kind="sum",
                          ts_ns=now, value=float(value), unit="{item}",
                          attributes=orjson.dumps({"signal": signal}).decode())
        try:
            self._writer.submit(batch)  # not awaited: nothing acknowledges these rows
        except Exception as exc:  # noqa: BLE001 - a full queue skips this tick
            log.debug("self metrics skipped: %s", exc)


async def _cancel(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _json_error(status: int, problem: str, message: str) -> web.Response:
    return web.Response(status=status, content_type="application/json",
                        body=orjson.dumps({"error": {"problem": problem, "message": message}}))
