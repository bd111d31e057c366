"""``rolloutscope demo``: the whole pipeline on an embedded example, live.

One process: a collector (OTLP/HTTP and gRPC on loopback, free ports) writing a fresh DuckDB
file; the live dashboard over that file on 127.0.0.1; and the built-in ``demo`` scenario replayed
in accelerated wall-clock time, exported over OTLP through the stock exporter into the collector
— the path a real training process takes. The composite run has healthy stretches, a shard
quarantine, a snapshot that outlasts a rollout deadline (and the finished try nobody ACKs), and
a stall, each within a couple of minutes at the default speed. Once the live run has finished,
it is replayed on the virtual clock with the known fix for each of its incidents, into the same
file as runs whose parent is the live one, so the dashboard's Replay tab shows before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import tempfile
import threading
import time
import webbrowser
from pathlib import Path

from rolloutscope.cli import UsageError

DEFAULT_SPEED = 10.0
DEFAULT_PORT = 5006


class CollectorThread:
    """A ``CollectorService`` on its own event loop in a background thread."""

    def __init__(self, config) -> None:
        from rolloutscope.collectors.service import CollectorService

        self.service = CollectorService(config)
        self.endpoints = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="rolloutscope-collector",
                                        daemon=True)

    def _main(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def ready(endpoints) -> None:
                self.endpoints = endpoints
                self._ready.set()

            await self.service.run(self._stop, on_ready=ready)

        try:
            asyncio.run(serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._ready.set()

    def start(self, timeout_s: float = 60.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            raise UsageError(f"the collector did not start: {self._error}")

    def stop(self, timeout_s: float = 60.0) -> None:
        """Drain and commit everything received, then close the file."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)


def replay_with_fixes(store, run_id: str, kinds: list[str], url: str) -> None:
    """Replay the finished live run with the fix for each of its incidents, into its own file
    (virtual clock: seconds), and say what each replay did to the incidents."""
    from rolloutscope.replay.fixes import fix_plans, replay_fixes

    plans, unfixed = fix_plans(kinds)
    if not plans:
        print("rolloutscope demo: no incident of this run has a fix to replay", flush=True)
        return
    t = time.perf_counter()
    print(f"rolloutscope demo: replaying the run with the fix for each incident "
          f"({len(plans)} replay(s) on the virtual clock)", flush=True)
    for plan, result in replay_fixes(store, run_id, plans):
        if result.error is not None:
            print(f"  {'+'.join(plan.variants)}: failed: {result.error}", flush=True)
            continue
        said = "; ".join(f"{len(keys)} {what}" for what, keys in (
            ("vanished", result.vanished), ("reproduced", result.reproduced),
            ("appeared", result.appeared)) if keys)
        print(f"  run {result.run_id} (fixes {', '.join(plan.variants)} for "
              f"{', '.join(plan.kinds)}): incidents {said or 'none'}", flush=True)
    if unfixed:
        print(f"  no variant fixes {', '.join(unfixed)} (each replay above says whether they recur)",
              flush=True)
    print(f"rolloutscope demo: fix replays written in {time.perf_counter() - t:,.1f} s; the "
          f"Replay tab at {url} compares each with the live run", flush=True)


def run_demo(*, db: Path, scenario_name: str, speed: float, port: int, open_browser: bool,
             exit_after_replay: bool, stop: threading.Event, fixes: bool = True) -> int:
    from rolloutscope.collectors.service import CollectorConfig
    from rolloutscope.vocabulary import RunSource
    from rolloutscope.cli.dashboard_process import DashboardProcess
    from rolloutscope.replay.run_live import ReplayStopped, replay_live
    from rolloutscope.replay.scenarios import get
    from rolloutscope.replay.run_scenario import effective_variants
    from rolloutscope.replay.variants import ordered

    scenario = get(scenario_name)
    run_id = f"{scenario.name}-{time.strftime('%Y%m%dT%H%M%S')}"
    collector = CollectorThread(CollectorConfig(db_path=db, http_port=0, grpc_port=0))
    collector.start()
    dashboard = None
    try:
        store = collector.service.store
        store.register_run(run_id, source=RunSource.REPLAY, scenario=scenario.name,
                           variants=ordered(effective_variants(scenario)), seed=scenario.seed,
                           config=scenario.config_dict(),
                           metadata={"description": scenario.description, "speed": speed,
                                     "live": True, "horizon_s": scenario.horizon_s})
        # as in serve: the dashboard is a process of its own, reading through the collector
        dashboard = DashboardProcess(collector.endpoints.http, port=port, run_id=run_id)
        try:
            dashboard.start()
        except OSError as exc:
            dashboard = None
            raise UsageError(f"cannot serve the dashboard: {exc}") from None
        minutes = scenario.horizon_s / speed / 60
        print(f"rolloutscope demo: dashboard at {dashboard.url}", flush=True)
        print(f"  run {run_id}: scenario {scenario.name!r} at {speed:g}x, {minutes:.1f} min of "
              f"wall time; collector {collector.endpoints.http} (OTLP/HTTP), "
              f"{collector.endpoints.grpc} (gRPC); run file {db}", flush=True)
        if open_browser:
            webbrowser.open(dashboard.url)
        try:
            result = replay_live(scenario, endpoint=collector.endpoints.http, speed=speed,
                                 run_id=run_id, stop=stop)
        except ReplayStopped:
            print("rolloutscope demo: stopped", flush=True)
            return 0
        incidents = store.query("SELECT kind, count(*) FROM incidents WHERE run_id = ? "
                                "GROUP BY kind ORDER BY kind", [run_id])
        found = ", ".join(f"{kind} x{n}" for kind, n in incidents) or "none"
        print(f"rolloutscope demo: replay finished ({result.spans:,} spans, "
              f"{result.simulated_s:,.0f} simulated s); incidents: {found}", flush=True)
        if fixes:
            replay_with_fixes(store, run_id, [kind for kind, _ in incidents], dashboard.url)
        if not exit_after_replay:
            print(f"  the dashboard keeps serving at {dashboard.url}; Ctrl-C to stop", flush=True)
            stop.wait()
        return 0
    finally:
        if dashboard is not None:
            dashboard.stop()
        collector.stop()
        print(f"rolloutscope demo: run file {db} closed; reopen it with "
              f"`rolloutscope dashboard {db}`", flush=True)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.speed <= 0:
        raise UsageError("--speed must be positive")
    db = Path(args.db) if args.db else \
        Path(tempfile.mkdtemp(prefix="rolloutscope-demo-")) / "run.duckdb"
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return run_demo(db=db, scenario_name=args.scenario, speed=args.speed, port=args.port,
                    open_browser=not args.no_browser, exit_after_replay=args.exit_after_replay,
                    stop=stop, fixes=not args.no_fix_replays)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the whole pipeline, live, on an embedded example run",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help="dashboard port on 127.0.0.1 (default %(default)s; 0 picks a free one)")
    p.add_argument("--db", help="run file to write (default: a new one in a temporary folder)")
    p.add_argument("--speed", type=float, default=DEFAULT_SPEED,
                   help="simulated seconds per wall-clock second (default %(default)g)")
    p.add_argument("--scenario", default="demo",
                   help="built-in scenario to replay (default %(default)s; see "
                        "`rolloutscope scenario list`)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument("--exit-after-replay", action="store_true",
                   help="stop once the replay has finished instead of serving until Ctrl-C")
    p.add_argument("--no-fix-replays", action="store_true",
                   help="do not replay the finished run with the fix for each incident")
    p.set_defaults(handler=cmd_demo)
