"""The collector service: one process, one event loop, the only writer of the run file.

Everything long-lived enters one ``AsyncExitStack`` in ``CollectorService.run``; a later part
(the live dashboard) joins by entering the same stack. Teardown runs in reverse order of entry,
and that order is the durability contract on shutdown:

1. the servers stop accepting and finish their in-flight requests (each waits for its commit);
2. the commit waiter settles every pending future;
3. the store's writer commits everything still queued, and the file is closed.

So SIGTERM/SIGINT lose nothing that was queued, and a 2xx/OK was only ever sent after the
commit of its rows.

Nothing a sender does can exhaust it: the memory held for requests is bounded in bytes
(``InflightBudget``), the HTTP server's connections in number and idle time
(``ConnectionLimiter`` and aiohttp's keep-alive timeout as the header timeout), the gRPC
server's by its own options, both numbers sized from the open-file limit
(``connection_caps``), DuckDB's memory by ``memory_limit``, and queries run off the event loop
under their deadline (``QueryEngine``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import resource
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import orjson
from aiohttp import web

from rolloutscope.auth import bearer_token_matches
from rolloutscope.collectors.otlp import fastdecode
from rolloutscope.collectors.otlp.budget import DEFAULT_INFLIGHT_BYTES, InflightBudget
from rolloutscope.collectors.otlp.connections import ConnectionLimiter
from rolloutscope.collectors.otlp.counters import COLLECTOR_SERVICE, CollectorCounters
from rolloutscope.collectors.otlp.errors import BadRequestError
from rolloutscope.collectors.otlp.grpc import BearerTokenInterceptor, OtlpGrpcHandlers
from rolloutscope.collectors.otlp.http import OtlpHttpRoutes, read_body
from rolloutscope.collectors.otlp.limits import MiB, DecodeLimits
from rolloutscope.collectors.otlp.receiver import CommitQueue, OtlpReceiver
from rolloutscope.collectors.query import QueryEngine, QueryLimits
from rolloutscope.collectors.scrape import EngineScraper, ScrapeConfig
from rolloutscope.store.rows import RowBatch
from rolloutscope.store.store import RunStore

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 4318
DEFAULT_GRPC_PORT = 4317
SELF_METRICS_INTERVAL_S = 10.0
DEFAULT_STORE_MEMORY_MIB = 1024
FDS_KEPT_BACK = 128  # descriptors left for the store's files, the dashboard and the rest
MAX_SIZED_CONNECTIONS = 4096
"""Connections per server when the open-file limit sizes them, however high it is: an idle
HTTP connection costs the collector about 18 KiB and a gRPC one 16, so 136 MiB at most for both
servers, which docs/collecting.md's memory bound counts."""
FLEET_CONNECTIONS = 1024
"""Fewer connections per server than this, from the open-file limit, is warned about at start:
a fleet of exporters (one per Gym server, engine and trainer rank) reaches it."""
GRPC_IDLE_MS = 5 * 60 * 1000  # a gRPC connection with no call for this long is closed


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
    commit_max_bytes: int = 64 * MiB
    commit_max_delay_ms: float = 250.0
    """The longest a batch waits for others while requests are still arriving; with none on
    its way the writer commits at once (``StoreWriter.group_with``)."""
    commit_when_idle: bool = True
    """Commit as soon as no request is arriving; off, only the bounds end a group (what
    benchmarks/bench_ingest.py compares against)."""
    retry_after_s: float = 1.0
    drain_timeout_s: float = 30.0
    self_metrics_interval_s: float = SELF_METRICS_INTERVAL_S
    max_inflight_bytes: int = DEFAULT_INFLIGHT_BYTES
    """Bytes held for requests not yet answered (bodies, inflated bodies, decoded rows)."""
    max_connections: int | None = None
    """Open connections per server (OTLP/HTTP, OTLP/gRPC); None: as many as the open-file limit
    holds, up to ``MAX_SIZED_CONNECTIONS``; fewer than asked if the limit holds fewer."""
    header_timeout_s: float = 10.0
    """A request head must arrive within this of connecting or of the previous response."""
    body_timeout_s: float = 60.0
    grpc_max_concurrent: int = 4
    """gRPC exports being read, decoded or committed at once (each message is in memory)."""
    store_memory_mib: int = DEFAULT_STORE_MEMORY_MIB
    """DuckDB's memory limit for the run file (writer, views, queries); it spills past it."""
    store_threads: int | None = None
    """DuckDB's threads for the live views and queries of the run file; None: DuckDB's default,
    one per core. While nothing reads a file, the writer commits on one thread (``RunStore``),
    which costs less CPU per span; 1 keeps the views on one thread too (docs/collecting.md,
    "DuckDB's threads follow the readers")."""
    scrape: ScrapeConfig | None = None
    """Engines' Prometheus ``/metrics`` read into the metrics table beside ingest
    (``collectors/scrape.py``); None: none."""

    def __post_init__(self) -> None:
        check_bind(self.host, self.token)
        for name in ("max_inflight_bytes", "max_connections", "grpc_max_concurrent",
                     "store_memory_mib"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.store_threads is not None and self.store_threads < 1:
            raise ValueError(f"store_threads must be positive, got {self.store_threads}")
        for name in ("header_timeout_s", "body_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address (127.0.0.0/8, ::1):
    only this machine can reach it."""
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
    @web.middleware
    async def require_token(request: web.Request, handler):
        if not bearer_token_matches(request.headers.get("Authorization"), token):
            return web.json_response(
                {"error": {"problem": "unauthenticated",
                           "message": "missing or wrong bearer token"}},
                status=401, headers={"WWW-Authenticate": 'Bearer realm="rolloutscope"'})
        return await handler(request)

    return require_token


def freeze_set_up_heap() -> None:
    """In a process that is a collector, once it is set up (servers bound, the live dashboard
    started): move every object alive now to the interpreter's permanent generation, where the
    cyclic garbage collector never walks it again (``/metrics`` reports how many).

    They live as long as the process anyway: the modules of DuckDB, Arrow, gRPC, aiohttp (and
    Panel, Bokeh, HoloViews with the dashboard) and the service itself. A high ingest rate
    allocates quickly enough to trigger full collections, and each walked all of them: two of
    about 50 ms per 120,000 spans in ``benchmarks/bench_ingest.py``, some 12% of the receiver's
    CPU; frozen, the same two take about 2 ms. Garbage is collected first, so no cycle is
    frozen. Only for a process of its own (``rolloutscope serve``, a Ray collector actor): a
    process that embeds the service keeps its heap as it is."""
    gc.collect()
    gc.freeze()


class CollectorService:
    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.counters = CollectorCounters()
        self.endpoints: Endpoints | None = None
        self.store: RunStore | None = None
        self._writer = None
        self._query: QueryEngine | None = None
        self._budget = InflightBudget(config.max_inflight_bytes,
                                      retry_after_s=config.retry_after_s)
        # every connection is a file descriptor: take what the hard limit allows, then size
        # the caps from it
        raise_open_file_limit()
        self.caps = connection_caps(config.max_connections)
        self._limiter = ConnectionLimiter(max_connections=self.caps.http,
                                          max_refusing=self.caps.refusing,
                                          retry_after_s=config.retry_after_s,
                                          linger_s=config.header_timeout_s)
        self._grpc_max_connections = self.caps.grpc
        self._started = time.monotonic()
        self._stack: contextlib.AsyncExitStack | None = None
        self.scraper: EngineScraper | None = None

    # -- HTTP routes besides OTLP ----------------------------------------------------------
    async def _query_route(self, request: web.Request) -> web.Response:
        try:
            if request.method == "POST":
                raw = await read_body(request, self.config.query.max_sql_bytes,
                                      timeout_s=self.config.body_timeout_s)
                doc = orjson.loads(raw or b"{}")
                if not isinstance(doc, dict):
                    raise BadRequestError("invalid_json", "send a JSON object {\"sql\": ...}")
            else:
                doc = dict(request.query)
                if "params" in doc:  # ?params=<a JSON list>
                    doc["params"] = orjson.loads(doc["params"])
            sql, fmt = doc.get("sql"), doc.get("format", "arrow")
            if not isinstance(sql, str) or not sql.strip():
                raise BadRequestError("missing_sql", "no SQL given: send {\"sql\": \"SELECT ...\"}")
            if fmt not in ("arrow", "json"):
                raise BadRequestError("bad_format", f"format must be arrow or json, got {fmt!r}")
            result = await self._query.run(sql, fmt, doc.get("params"), doc.get("timeout_s"))
        except orjson.JSONDecodeError as exc:
            return _json_error(400, "invalid_json", f"body is not valid JSON: {exc}")
        except ConnectionError:  # the reader went away mid-request
            return web.Response(status=499)
        except BadRequestError as exc:
            self.counters.problems[exc.problem] += 1
            headers = {"Retry-After": "1"} if exc.status == 429 else None
            return _json_error(exc.status, exc.problem, exc.message, headers)
        return web.Response(body=result.body, content_type=result.content_type)

    async def _metrics_route(self, request: web.Request) -> web.Response:
        stats = self._writer.stats
        doc = self.counters.snapshot()
        doc["writer"] = {"queued_rows": self._writer.queued_rows,
                         "max_queued_rows": self._writer.max_queued_rows,
                         "committed_rows": stats.committed_rows, "commits": stats.commits,
                         "rejected_rows": stats.rejected_rows, "failed_rows": stats.failed_rows,
                         "last_commit_ms": stats.last_commit_ms}
        doc["inflight"] = {"bytes": self._budget.used, "peak_bytes": self._budget.peak,
                           "max_bytes": self._budget.limit, "refused": self._budget.refused}
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        doc["connections"] = {"http": self._limiter.stats(),
                              "grpc_max": self._grpc_max_connections,
                              "open_file_limit": soft, "open_file_hard_limit": hard}
        if self.scraper is not None:
            doc["scrape"] = self.scraper.stats()
        doc["uptime_s"] = time.monotonic() - self._started
        doc["gc"] = {"frozen_objects": gc.get_freeze_count(),
                     "collections": [g["collections"] for g in gc.get_stats()]}
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
        self.store = stack.enter_context(RunStore(cfg.db_path, threads=cfg.store_threads))
        with self.store.cursor() as cur:
            # the store never reads or writes other files: no COPY/ATTACH/INSTALL, and no
            # query through the read endpoint can reach the file system (see query.py)
            cur.execute("SET enable_external_access = false")
            # one limit for DuckDB in this process: the writer's appends and the query
            # endpoint, which the live dashboard reads through (it spills to the store's temp
            # directory past it)
            cur.execute(f"SET memory_limit = '{int(cfg.store_memory_mib)}MiB'")
        self._writer = self.store.writer(max_rows=cfg.commit_max_rows,
                                         max_delay_ms=cfg.commit_max_delay_ms,
                                         max_bytes=cfg.commit_max_bytes,
                                         max_queued_rows=cfg.max_queued_rows)
        commits = CommitQueue(self._writer, retry_after_s=cfg.retry_after_s)
        stack.callback(commits.close)  # after the servers: settles what they still wait for
        self._query = QueryEngine(self.store, cfg.query)
        stack.callback(self._query.close)
        stack.callback(self.commit_self_metrics)  # the final counts, once the servers stopped
        if cfg.scrape is not None:
            # the engines' points go to the default run: its row (run_thresholds reads it) is
            # made now, not left to the first span, so a store of engines alone has incidents
            run = self.store.default_run_id
            if run and not self.store.query("SELECT 1 FROM runs WHERE run_id = ?", [run]):
                self.store.register_run(run)
            # its own threads, submitting without waiting; stopped before the writer drains
            self.scraper = EngineScraper(cfg.scrape, submit=self._writer.submit).start()
            stack.callback(self.scraper.stop)
        receiver = OtlpReceiver(enqueue=commits.enqueue, limits=cfg.limits,
                                counters=self.counters)
        fastdecode.warn_if_unavailable()
        # commits grouped across senders: the writer waits while requests are arriving
        if cfg.commit_when_idle:
            receiver.on_arrived = self._writer.wake
            self._writer.group_with(lambda: receiver.arriving)
        wanted = cfg.max_connections or FLEET_CONNECTIONS
        if self.caps.http < wanted:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.warning("at most %d connections per server: the open-file limit is %d (hard "
                        "limit %s); past them senders are answered 503 / UNAVAILABLE and "
                        "retry. Raise the hard limit (ulimit -Hn, LimitNOFILE=) to admit more",
                        self.caps.http, soft,
                        "unlimited" if hard == resource.RLIM_INFINITY else hard)
        grpc_port = await self._start_grpc(stack, receiver)
        http_port = await self._start_http(stack, receiver)
        host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        self.endpoints = Endpoints(http=f"http://{host}:{http_port}", grpc=f"{host}:{grpc_port}")
        task = asyncio.create_task(self._record_self_metrics())
        stack.push_async_callback(_cancel, task)  # stops first: nothing to drain

    async def _start_http(self, stack: contextlib.AsyncExitStack, receiver: OtlpReceiver) -> int:
        cfg = self.config
        middlewares = [self._limiter.middleware]
        if cfg.token:
            middlewares.append(_auth_middleware(cfg.token))
        app = web.Application(middlewares=middlewares,
                              client_max_size=cfg.limits.max_body_bytes + MiB)
        OtlpHttpRoutes(receiver, self._budget, body_timeout_s=cfg.body_timeout_s).add_to(app)
        app.router.add_route("*", "/v1/query", self._query_route)
        app.router.add_get("/metrics", self._metrics_route)
        # auto_decompress off: the receiver inflates gzip itself, under a size limit. The
        # keep-alive timeout is the header timeout: aiohttp closes a connection without a
        # complete request head that long after it connected or after its last response.
        runner = web.AppRunner(app, auto_decompress=False, access_log=None,
                               shutdown_timeout=cfg.drain_timeout_s,
                               keepalive_timeout=cfg.header_timeout_s)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = LimitedTCPSite(runner, cfg.host, cfg.http_port, limiter=self._limiter,
                              reuse_address=True, shutdown_timeout=cfg.drain_timeout_s,
                              backlog=self.caps.backlog)
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
                     ("grpc.so_reuseport", 0),
                     ("grpc.max_allowed_incoming_connections", self._grpc_max_connections),
                     ("grpc.server_handshake_timeout_ms", int(cfg.header_timeout_s * 1000)),
                     ("grpc.max_connection_idle_ms", GRPC_IDLE_MS)])
        handlers = OtlpGrpcHandlers(receiver, self._budget,
                                    max_concurrent=cfg.grpc_max_concurrent)
        server.add_generic_rpc_handlers(handlers.generic_handlers())
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


def _json_error(status: int, problem: str, message: str,
                headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, content_type="application/json", headers=headers,
                        body=orjson.dumps({"error": {"problem": problem, "message": message}}))


class LimitedTCPSite(web.TCPSite):
    """aiohttp's TCP site with every connection admitted by a ``ConnectionLimiter``."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *,
                 limiter: ConnectionLimiter, **kwargs) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._limiter = limiter

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._limiter.protocol_factory(self._runner.server), self._host, self._port,
            backlog=self._backlog, reuse_address=self._reuse_address,
            reuse_port=self._reuse_port)
        self._bound_port = self._server.sockets[0].getsockname()[1]


def _open_file_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


@dataclass(frozen=True)
class ConnectionCaps:
    http: int
    """OTLP/HTTP connections admitted at once."""
    grpc: int
    """OTLP/gRPC connections admitted at once (``grpc.max_allowed_incoming_connections``)."""
    refusing: int
    """HTTP connections past the cap being answered 503 at once (``ConnectionLimiter``)."""
    backlog: int
    """The HTTP listening socket's backlog: the event loop accepts up to this many in one go
    before their protocols admit or refuse them, so they are descriptors too."""


def connection_caps(configured: int | None, open_file_limit: int | None = None
                    ) -> ConnectionCaps:
    """What the open-file limit holds: ``FDS_KEPT_BACK`` descriptors for the rest of the
    process, then half each for the HTTP and the gRPC server, the HTTP half including the
    connections it is refusing and those its accept loop takes in one go. ``configured``
    (None: ``MAX_SIZED_CONNECTIONS``) where that holds more."""
    limit = _open_file_limit() if open_file_limit is None else open_file_limit
    share = max(32, (limit - FDS_KEPT_BACK) // 2)
    refusing = max(4, min(64, share // 16))
    backlog = max(4, min(128, share // 8))
    cap = min(configured or MAX_SIZED_CONNECTIONS, share - refusing - backlog)
    return ConnectionCaps(http=cap, grpc=cap, refusing=refusing, backlog=backlog)


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
