"""``rolloutscope serve``: the collector process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from rolloutscope.cli import UsageError
from rolloutscope.cli.stores import STORE_HELP, add_data_path, store_arg, with_data_path
from rolloutscope.collectors.otlp.connections import RateLimitedLog, RateLimitFilter
from rolloutscope.collectors.otlp.limits import MiB, DecodeLimits
from rolloutscope.collectors.query import QueryLimits
from rolloutscope.collectors.scrape import DEFAULT_INTERVAL_S, ScrapeConfig, engine_target
from rolloutscope.collectors.service import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    BindRefusedError,
    CollectorConfig,
    CollectorService,
    Endpoints,
    freeze_set_up_heap,
)

READY_PREFIX = "rolloutscope collector ready "


def read_token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise UsageError(f"cannot read token file {path}: {exc.strerror}") from None
    if not token:
        raise UsageError(f"token file {path} is empty")
    if any(c.isspace() for c in token) or not token.isprintable():
        raise UsageError(f"token file {path} must hold one token without spaces")
    return token


def config_from_args(args: argparse.Namespace) -> CollectorConfig:
    try:
        return CollectorConfig(
            db_path=with_data_path(args.db, args), host=args.host, http_port=args.otlp_http_port,
            grpc_port=args.otlp_grpc_port, token=read_token(args.token_file),
            limits=DecodeLimits(max_body_bytes=int(args.max_body_mib * MiB),
                                max_decoded_bytes=int(args.max_decoded_mib * MiB),
                                max_attributes=args.max_attributes,
                                max_attribute_value_bytes=args.max_attribute_value_bytes),
            query=QueryLimits(timeout_s=args.query_timeout_s,
                              max_result_bytes=int(args.query_max_result_mib * MiB),
                              max_rows=args.query_max_rows),
            max_queued_rows=args.max_queued_rows, retry_after_s=args.retry_after_s,
            commit_max_delay_ms=args.commit_max_delay_ms,
            commit_when_idle=args.commit_when_idle,
            max_inflight_bytes=int(args.max_inflight_mib * MiB),
            max_connections=args.max_connections, header_timeout_s=args.header_timeout_s,
            body_timeout_s=args.body_timeout_s, store_memory_mib=args.store_memory_mib,
            store_threads=args.store_threads, scrape=scrape_of(args))
    except (BindRefusedError, ValueError, argparse.ArgumentTypeError) as exc:
        raise UsageError(str(exc)) from None


def scrape_of(args: argparse.Namespace) -> ScrapeConfig | None:
    """The engines ``--scrape`` names, read every ``--scrape-interval-s``; None without any."""
    if not args.scrape:
        if args.scrape_interval_s is not None:
            raise UsageError("--scrape-interval-s needs --scrape URL (an engine's /metrics)")
        return None
    interval = DEFAULT_INTERVAL_S if args.scrape_interval_s is None else args.scrape_interval_s
    return ScrapeConfig(targets=tuple(engine_target(url) for url in args.scrape),
                        interval_s=interval)


DASHBOARD_READY_PREFIX = "rolloutscope dashboard ready "


def _rate_limited_loop_errors(loop: asyncio.AbstractEventLoop) -> None:
    """The event loop's own error reports (``socket.accept() out of system resource``, a
    transport's failure) at most once per 10 s each, with how many were held back."""
    limited = RateLimitedLog(logging.getLogger("rolloutscope.collectors.loop"))

    def report(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        message = context.get("message", "event loop error")
        exc = context.get("exception")
        limited.warning(message, "%s%s", message, f": {exc!r}" if exc is not None else "")

    loop.set_exception_handler(report)


def _start_upkeep(service: CollectorService, upkeep: dict | None) -> None:
    """Retention and compaction beside the writer, stopped before the store closes."""
    if upkeep is None:
        return
    from rolloutscope.store.lake_ops import Maintenance

    maintenance = Maintenance(service.store, **upkeep)
    service.join(maintenance.stop)


def _upkeep_of(args: argparse.Namespace) -> dict | None:
    from rolloutscope.cli.lake import keep_snapshots_s_of, retain_bytes_of

    if args.every_s is None:
        for given, flag in ((args.retain_hours, "--retain-hours"),
                            (args.retain_gib, "--retain-gib")):
            if given is not None:
                raise UsageError(f"{flag} needs --maintain-every-s (how often to apply it)")
        return None
    if args.every_s <= 0:
        raise UsageError("--maintain-every-s must be positive")
    return {"every_s": args.every_s, "keep_snapshots_s": keep_snapshots_s_of(args),
            "retain_s": None if args.retain_hours is None else args.retain_hours * 3600.0,
            "retain_bytes": retain_bytes_of(args)}


def _watchdog_of(args: argparse.Namespace):
    """The ``--on-incident`` / ``--notify-*`` flag group as a WatchdogConfig; None when
    neither channel is asked for."""
    from rolloutscope.collectors.watchdog import KINDS, WatchdogConfig

    kinds = [k.strip() for k in (args.notify_kinds or "").split(",") if k.strip()]
    try:
        config = WatchdogConfig(on_incident=args.on_incident, notify_url=args.notify_url,
                                kinds=frozenset(kinds or KINDS),
                                interval_s=args.watch_interval_s)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not config.wanted:
        if args.notify_kinds:
            raise UsageError("--notify-kinds needs --on-incident CMD or --notify-url URL")
        return None
    return config


def _start_watchdog(service: CollectorService, watch) -> None:
    """The detectors evaluated live, delivering to the command or webhook; stopped before the
    store closes."""
    if watch is None:
        return
    from rolloutscope.collectors.watchdog import Watchdog

    watchdog = Watchdog(service.store, watch)
    watchdog.start()
    service.join(watchdog.stop)


async def _start_live_dashboard(service: CollectorService, config: CollectorConfig,
                                endpoints: Endpoints, port: int) -> None:
    # the live dashboard runs in its own process and reads through this collector's query
    # endpoint (``store/remote.py``): no page load, session or renderer can take
    # this process's memory or its event loop from ingest. It binds loopback, and asks for the
    # collector's token when it has one.
    from rolloutscope.cli.dashboard_process import DashboardProcess

    where = (f"OTLP/HTTP {endpoints.http} (/v1/traces, /v1/metrics, /v1/logs) and "
             f"OTLP/gRPC {endpoints.grpc}")
    dashboard = DashboardProcess(endpoints.http, port=port, token=config.token,
                                 waiting_for=where)
    try:
        url = await asyncio.to_thread(dashboard.start)
    except OSError as exc:  # collecting matters more than the view of it
        print(f"rolloutscope serve: live dashboard not started: {exc}", file=sys.stderr,
              flush=True)
        return
    service.join(dashboard.stop)
    print(f"{DASHBOARD_READY_PREFIX}{url}", flush=True)


async def _serve(config: CollectorConfig, *, dashboard_port: int | None,
                 upkeep: dict | None = None, watch=None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    _rate_limited_loop_errors(loop)
    service = CollectorService(config)

    async def ready(endpoints: Endpoints) -> None:
        _start_upkeep(service, upkeep)
        _start_watchdog(service, watch)
        # one machine-readable line; tests and scripts wait for it
        print(f"{READY_PREFIX}http={endpoints.http} grpc={endpoints.grpc} db={config.db_path}",
              flush=True)
        if dashboard_port is not None:
            await _start_live_dashboard(service, config, endpoints, dashboard_port)
        freeze_set_up_heap()  # set up, with its dashboard or without

    await service.run(stop, on_ready=ready)
    print("rolloutscope collector stopped; everything received is committed", flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # whatever a flood of senders makes any library log, it logs at a bounded rate
    for handler in logging.getLogger().handlers:
        handler.addFilter(RateLimitFilter())
    watch = _watchdog_of(args)
    if args.ray or args.ray_address is not None:
        if watch is not None:
            raise UsageError("--on-incident / --notify-url are not available with --ray: a "
                             "watchdog per node would deliver each incident once per node")
        from rolloutscope.cli.serve_ray import serve_on_ray

        return serve_on_ray(config, address=args.ray_address, upkeep=_upkeep_of(args),
                            dashboard_wanted=not args.no_dashboard)
    try:
        asyncio.run(_serve(config, dashboard_port=None if args.no_dashboard
                           else args.dashboard_port, upkeep=_upkeep_of(args), watch=watch))
    except OSError as exc:
        raise UsageError(f"cannot listen on {config.host}: {exc}") from None
    return 0


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0 picks a free one)")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="collect OTLP traces, metrics and logs into a run store")
    p.add_argument("--db", required=True, type=store_arg,
                   help=STORE_HELP + "; created if missing. Many serve processes may write "
                        "one lake at once")
    add_data_path(p)
    from rolloutscope.cli.lake import add_upkeep_options

    add_upkeep_options(p, every_help="retention and lake compaction every S seconds in a "
                                     "background thread (default: never; or run "
                                     "rolloutscope lake maintain beside the writers)")
    p.add_argument("--otlp-http-port", type=_port, default=DEFAULT_HTTP_PORT)
    p.add_argument("--otlp-grpc-port", type=_port, default=DEFAULT_GRPC_PORT)
    p.add_argument("--host", default=DEFAULT_HOST,
                   help="address to bind (a non-loopback one needs --token-file)")
    p.add_argument("--token-file", help="file holding the bearer token every request must carry")
    d = DecodeLimits()
    p.add_argument("--max-body-mib", type=float, default=d.max_body_bytes / MiB)
    p.add_argument("--max-decoded-mib", type=float, default=d.max_decoded_bytes / MiB)
    p.add_argument("--max-attributes", type=int, default=d.max_attributes)
    p.add_argument("--max-attribute-value-bytes", type=int, default=d.max_attribute_value_bytes)
    p.add_argument("--max-queued-rows", type=int, default=CollectorConfig.max_queued_rows,
                   help="rows waiting for commit before senders get 429 / RESOURCE_EXHAUSTED")
    p.add_argument("--retry-after-s", type=float, default=CollectorConfig.retry_after_s)
    p.add_argument("--commit-max-delay-ms", type=float,
                   default=CollectorConfig.commit_max_delay_ms,
                   help="longest a request waits for its group commit to gather others")
    p.add_argument("--commit-when-idle", action=argparse.BooleanOptionalAction,
                   default=CollectorConfig.commit_when_idle,
                   help="commit a group as soon as no request is arriving (the default); with "
                        "--no-commit-when-idle only --commit-max-delay-ms and the size bounds "
                        "end a group")
    p.add_argument("--query-timeout-s", type=float, default=QueryLimits().timeout_s)
    p.add_argument("--query-max-result-mib", type=float,
                   default=QueryLimits().max_result_bytes / MiB,
                   help="largest query result, serialised")
    p.add_argument("--query-max-rows", type=int, default=QueryLimits().max_rows,
                   help="most rows a query result may hold")
    p.add_argument("--max-inflight-mib", type=float,
                   default=CollectorConfig.max_inflight_bytes / MiB,
                   help="memory held for requests not yet answered (bodies and their decoded "
                        "rows) before senders get 429 / RESOURCE_EXHAUSTED")
    p.add_argument("--max-connections", type=int, default=CollectorConfig.max_connections,
                   help="open connections per server (default: what the open-file limit "
                        "holds, which serve raises to the hard limit, up to 4096); past them "
                        "senders are answered 503 / UNAVAILABLE, which they retry")
    p.add_argument("--header-timeout-s", type=float, default=CollectorConfig.header_timeout_s,
                   help="time a connection has to send a request head")
    p.add_argument("--body-timeout-s", type=float, default=CollectorConfig.body_timeout_s,
                   help="time a request has to send its body")
    p.add_argument("--store-memory-mib", type=int, default=CollectorConfig.store_memory_mib,
                   help="DuckDB's memory limit for the run file (it spills to disk past it)")
    p.add_argument("--store-threads", type=int, default=None,
                   help="DuckDB's threads for the live views and queries (default: one per "
                        "core); a file's writer alone always commits on one")
    p.add_argument("--dashboard-port", type=_port, default=5006,
                   help="live dashboard on 127.0.0.1 at this port (0 picks a free one)")
    p.add_argument("--no-dashboard", action="store_true", help="collect only")
    p.add_argument("--scrape", action="append", metavar="URL",
                   help="a generation engine's Prometheus /metrics (e.g. vLLM's "
                        "http://HOST:8000/metrics) read into the metrics table, each on its own "
                        "thread; repeat for every engine")
    p.add_argument("--scrape-interval-s", type=float, default=None, metavar="S",
                   help=f"seconds between reads of each engine (default {DEFAULT_INTERVAL_S:g}); "
                        f"a failing engine is retried at twice the last wait, up to "
                        f"{ScrapeConfig.max_backoff_s:g} s")
    w = p.add_argument_group("watchdog", "the incident detectors evaluated live, each new "
                             "incident delivered once with what the run waits on "
                             "(docs/watchdog.md)")
    w.add_argument("--on-incident", metavar="CMD",
                   help="run CMD in a shell for each incident, the notice as JSON on its stdin")
    w.add_argument("--notify-url", metavar="URL",
                   help="POST each notice as JSON to URL, retried with backoff on failure/5xx")
    w.add_argument("--notify-kinds", metavar="KIND,...",
                   help="only these incident kinds (default: all)")
    w.add_argument("--watch-interval-s", type=float, default=5.0, metavar="S",
                   help="how often the detectors are evaluated (default 5)")
    from rolloutscope.cli.serve_ray import add_ray_options

    add_ray_options(p)
    p.set_defaults(handler=cmd_serve)
