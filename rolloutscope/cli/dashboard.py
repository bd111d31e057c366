"""``rolloutscope dashboard RUN.duckdb``: the read-only dashboard over a finished run.

``rolloutscope dashboard http://127.0.0.1:4318``: the live dashboard of a running collector,
in this process, reading the run through the collector's query endpoint (what ``serve`` starts
for its own dashboard)."""

from __future__ import annotations

import argparse
import sys

from rolloutscope.cli.stores import STORE_HELP, store_arg
from rolloutscope.dashboard.defaults import DEFAULT_ADDRESS, DEFAULT_PORT


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return value


def _store_or_collector(text: str):
    """A collector's URL as given; anything else a run store (``store_arg``)."""
    if text.startswith(("http://", "https://")):
        return text
    return store_arg(text)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from rolloutscope.collectors.service import is_loopback
    from rolloutscope.store import RunStore
    from rolloutscope.dashboard.app import serve_dashboard
    from rolloutscope.dashboard.shared import DashboardLimits

    try:
        limits = DashboardLimits.from_env(memory_mib=args.memory_mib,
                                          max_sessions=args.max_sessions,
                                          read_timeout_s=args.read_timeout_s)
    except ValueError as exc:
        from rolloutscope.cli import UsageError

        raise UsageError(str(exc)) from None

    if not is_loopback(args.address):
        print(f"rolloutscope dashboard: serving on {args.address}, reachable beyond this "
              "machine; the dashboard has no authentication", file=sys.stderr)
    from contextlib import ExitStack

    import os

    from rolloutscope.cli.dashboard_process import TOKEN_ENV

    token = os.environ.get(TOKEN_ENV) or None  # how serve hands its dashboard the token
    if args.token_file:
        from rolloutscope.cli.serve import read_token

        token = read_token(args.token_file)
    live = isinstance(args.run, str)
    with ExitStack() as stack:
        if live:
            from rolloutscope.store.remote import RemoteRunStore

            store = stack.enter_context(RemoteRunStore(args.run, token=token,
                                                       timeout_s=limits.read_timeout_s))
        else:
            store = stack.enter_context(RunStore(args.run, read_only=True))
        if args.run_id is not None and args.run_id not in store.run_ids():
            from rolloutscope.cli import UsageError

            raise UsageError(f"no run {args.run_id!r} in {store.path}")
        compare = (stack.enter_context(RunStore(args.compare, read_only=True))
                   if args.compare else None)
        serve_dashboard(store, port=args.port, address=args.address, live=live,
                        show=not args.no_browser, run_id=args.run_id, compare=compare,
                        limits=limits, token=token, waiting_for=args.waiting_for,
                        on_ready=lambda url: print(f"dashboard: {url}", flush=True))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="read-only dashboard over a finished run, or the live "
                                         "one of a running collector")
    p.add_argument("run", type=_store_or_collector,
                   help=f"{STORE_HELP}; or a running collector's OTLP/HTTP URL "
                        f"(http://127.0.0.1:4318): its live run, read through its query "
                        f"endpoint")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"port to serve on (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--address", default=DEFAULT_ADDRESS,
                   help=f"address to bind (default {DEFAULT_ADDRESS})")
    p.add_argument("--run-id", default=None, help="run to show when the file holds several")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument("--compare", default=None, metavar="OTHER.duckdb",
                   help="another run store whose runs the Replay and Diff tabs offer")
    from rolloutscope.dashboard import defaults as shared

    p.add_argument("--memory-mib", type=int, default=None,
                   help=f"the server's memory bound: DuckDB gets a quarter, the frames its "
                        f"sessions share half, and a new session is answered 'busy' while "
                        f"the process holds more than the bound less a session's room "
                        f"(default {shared.DEFAULT_MEMORY_MIB}, or ${shared.MEMORY_ENV})")
    p.add_argument("--max-sessions", type=int, default=None,
                   help=f"browser sessions open at once; more get the 'busy' page (default "
                        f"{shared.DEFAULT_MAX_SESSIONS}, or ${shared.SESSIONS_ENV})")
    p.add_argument("--read-timeout-s", type=float, default=None,
                   help=f"a read of the store that takes longer is stopped and its message "
                        f"shown (default {shared.DEFAULT_READ_TIMEOUT_S:g}, or "
                        f"${shared.READ_TIMEOUT_ENV})")
    p.add_argument("--token-file", default=None,
                   help="file holding the bearer token of the collector (for a URL); every "
                        "page then asks for it too")
    p.add_argument("--waiting-for", default=None, help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_dashboard)
