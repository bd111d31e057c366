"""``rolloutscope import KIND FILE... --db RUN.duckdb``: the importers on the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rolloutscope.cli import UsageError
from rolloutscope.cli.stores import STORE_HELP, store_arg
from rolloutscope.collectors.importers.files import KINDS


def _start_ns(text: str | None) -> int | None:
    from rolloutscope.collectors.importers.log_lines import TimeOutOfRange, parse_iso8601

    if text is None:
        return None
    try:
        return parse_iso8601(text)
    except TimeOutOfRange as exc:
        raise UsageError(f"--start: {exc}") from None
    except ValueError:
        raise UsageError(f"--start {text!r} is not an ISO 8601 time") from None


def _user_config(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--config {path}: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"--config {path}: must hold a JSON object")
    return config


def cmd_import(args: argparse.Namespace) -> int:
    from rolloutscope.collectors.importers.files import import_files

    report = import_files(args.kind, args.files, db=args.db, run_id=args.run_id,
                          start_ns=_start_ns(args.start), start_text=args.start,
                          interval_s=args.interval_s, user_config=_user_config(args.config))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.summary())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    imp = sub.add_parser(
        "import", help="import a run that was not collected live: controller log, logger "
                       "metrics or OTLP/JSON files",
        description="Write FILEs into one run of a run store (source=import). rl-log: the RL "
                    "controller's stdout; rl-metrics: TensorBoard event files or directories, "
                    "or JSON lines; otlp-json: OTLP/JSON requests or SDK console spans, one per "
                    "line. Bad lines are counted and reported, never fatal.")
    imp.add_argument("kind", choices=KINDS, metavar="KIND", help=" | ".join(KINDS))
    imp.add_argument("files", nargs="+", metavar="FILE", help="files, read in the order given")
    imp.add_argument("--db", required=True, type=store_arg,
                     help="run store to write: " + STORE_HELP)
    imp.add_argument("--run-id", help="run to write (default: the store's only run, else the "
                                      "first file's name; otlp-json: for records without "
                                      "nemo.run.id)")
    imp.add_argument("--start", metavar="ISO8601",
                     help="time of the first line/record when the file carries no times")
    imp.add_argument("--interval-s", type=float, default=30.0,
                     help="rl-metrics without times: seconds between records (default 30, the "
                          "stall watchdog's interval)")
    imp.add_argument("--config", metavar="JSON_FILE",
                     help="config the run used (thresholds such as stall_timeout_s, "
                          "max_num_steps), merged over what the files state")
    imp.add_argument("--json", action="store_true", help="print the report as JSON")
    imp.set_defaults(handler=cmd_import)

    fol = sub.add_parser(
        "follow", help="tail a live controller log and stream what it says to a collector",
        description="Follow FILE as the controller writes it (partial lines wait for their "
                    "newline; rotation and truncation are followed) and send the spans, events "
                    "and log lines the rl-log importer derives to a running collector over "
                    "OTLP/HTTP. Stops on SIGINT/SIGTERM after sending what it read.")
    fol.add_argument("kind", choices=("rl-log",), metavar="KIND", help="rl-log")
    fol.add_argument("file", metavar="FILE")
    fol.add_argument("--collector", default="http://127.0.0.1:4318",
                     help="the collector's OTLP/HTTP base URL (default %(default)s)")
    fol.add_argument("--run-id", help="run the lines belong to (default: the file's stem)")
    fol.add_argument("--token-file", help="file holding the collector's bearer token")
    fol.add_argument("--poll-s", type=float, default=0.5, help="poll period (default 0.5 s)")
    fol.add_argument("--from-end", action="store_true",
                     help="skip what the file already holds; follow only new lines")
    fol.set_defaults(handler=cmd_follow)


def cmd_follow(args: argparse.Namespace) -> int:
    import signal
    import threading

    from rolloutscope.cli.serve import read_token
    from rolloutscope.collectors.importers.follow import Follower

    if args.poll_s <= 0:
        raise UsageError("--poll-s must be positive")
    path = Path(args.file)
    follower = Follower(path, collector=args.collector, run_id=args.run_id or path.stem,
                        token=read_token(args.token_file), from_end=args.from_end)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"rolloutscope following {path} into {args.collector} as run "
          f"{follower.report.run_id}", flush=True)
    follower.run(stop, poll_s=args.poll_s)
    s = follower.stats
    print(f"followed {s.lines} line(s): {s.batches_sent} batch(es) sent, {s.retries} "
          f"retried, {s.batches_refused} refused; {follower.report.unknown_lines} unknown, "
          f"{follower.report.bad_count} bad line(s)", flush=True)
    return 1 if s.batches_refused else 0
