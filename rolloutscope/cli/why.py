"""``rolloutscope why``: what a run is waiting on at one moment (rolloutscope.store.waiting)."""

from __future__ import annotations

import argparse
import json

from rolloutscope.cli import UsageError
from rolloutscope.cli.stores import STORE_HELP, store_arg


def cmd_why(args: argparse.Namespace) -> int:
    from rolloutscope.store import RunStore
    from rolloutscope.store.waiting import waiting_on

    if args.step is not None and args.at is not None:
        raise UsageError("give --step N or --at SECONDS, not both")
    with RunStore(args.run, read_only=True) as store:
        answer = waiting_on(store, args.run_id, at_s=args.at, step=args.step)
    if args.json:
        print(json.dumps(answer.to_dict(), indent=2))
        return 0
    print(f"run {answer.run_id} at {answer.at_s:.1f} s: {answer.answer}")
    for g in answer.groups:
        ev = g.evidence
        where = f"  [{ev.name} {ev.span_id} at {ev.start_s:.1f} s]" if ev else ""
        row = f" {g.rollout}" if g.rollout else ""
        print(f"  {g.group}{row}: {g.doing} for {g.for_s:.0f} s{where}")
        if g.resource.health:
            print(f"      {g.resource.name}: {g.resource.health}")
    if answer.waiting > len(answer.groups):
        print(f"  ... and {answer.waiting - len(answer.groups)} more group(s)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("why", help="what a run is waiting on: the groups the current step still "
                                   "needs, where each one's slowest rollout is, and on what")
    p.add_argument("run", type=store_arg, help=STORE_HELP)
    p.add_argument("--run-id", help="the run of the store (needed when it holds several)")
    p.add_argument("--step", type=int, metavar="N",
                   help="while train step N was collecting: the end of its longest stretch "
                        "with no group committed (the last moment held, for a step that never "
                        "trained)")
    p.add_argument("--at", type=float, metavar="SECONDS",
                   help="at this many seconds from the run's origin (default: the last moment "
                        "the store holds)")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    p.set_defaults(handler=cmd_why)
