"""``rolloutscope export perfetto RUN --out trace.json [--window START:END]``: a run, or a time
window of it, as Chrome trace-event JSON that ui.perfetto.dev opens."""

from __future__ import annotations

import argparse
from pathlib import Path

from rolloutscope.cli import UsageError


def split_run_ref(text: str) -> tuple[str, str | None]:
    """``RUN.duckdb`` or ``RUN.duckdb:RUN_ID`` as (path, run id or None)."""
    if Path(text).exists() or ":" not in text:
        return text, None
    path, _, run_id = text.rpartition(":")
    return path, run_id or None


def pick_run(store, run_id: str | None, what: str) -> str:
    """The run named, else the file's newest capture (a replay written beside it is not)."""
    runs = store.run_ids()
    if run_id is not None:
        if run_id not in runs:
            raise UsageError(f"no run {run_id!r} in {store.path} (it holds: "
                             f"{', '.join(runs) or 'none'})")
        return run_id
    if not runs:
        raise UsageError(f"{store.path} holds no run to {what}")
    children = {r for (r,) in store.query(
        "SELECT run_id FROM runs WHERE parent_run_id IN (SELECT run_id FROM runs)")}
    roots = [r for r in runs if r not in children]
    return (roots or runs)[-1]


def cmd_export_perfetto(args: argparse.Namespace) -> int:
    from rolloutscope.export.perfetto import Window, WindowError, export_run
    from rolloutscope.store import RunStore

    try:
        window = Window.parse(args.window)
    except WindowError as exc:
        raise UsageError(str(exc)) from None
    path, run_id = split_run_ref(args.run)
    with RunStore(path, read_only=True) as store:
        run_id = pick_run(store, args.run_id or run_id, "export")
        out = export_run(store, run_id, args.out, window=window)
    where = "" if args.window is None else f" (window {args.window} s)"
    print(f"rolloutscope export: run {run_id}{where} -> {out.path}: {out.events:,} events, "
          f"{out.tracks:,} tracks, {out.counters:,} counter points; open it at "
          f"ui.perfetto.dev (Open trace file) or chrome://tracing", flush=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run in another tool's format")
    formats = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    pf = formats.add_parser(
        "perfetto", help="Chrome trace-event JSON for ui.perfetto.dev: a track per shard, "
                         "participant and rollout lane, counters for the gauges")
    pf.add_argument("run", help="run store (.duckdb), optionally RUN.duckdb:RUN_ID")
    pf.add_argument("--run-id", default=None, help="run to export when the file holds several")
    pf.add_argument("--out", required=True, help="trace file to write (JSON)")
    pf.add_argument("--window", default=None, metavar="START:END",
                    help="only this window, in seconds since the run's start (400:900, 400:)")
    pf.set_defaults(handler=cmd_export_perfetto)
