"""``rolloutscope steps RUN [--run-id ID] [--json]``: the step ledger of a run
(``rolloutscope.store.ledger``): per train step, how long it waited for rollouts, where its wall
time went, RL's own goodput buckets, the policy-version lag, and the groups it waited for last
with why.

Exit status: 0 the ledger was printed (a run with no train step prints that it has none); 2 the
input was wrong (no such file or run).
"""

from __future__ import annotations

import argparse
import json
import math

from rolloutscope.cli.export import pick_run
from rolloutscope.cli.stores import STORE_HELP, store_arg

# (column, header) of the table, in order
SHOWN = (("wait_s", "wait"), ("groups", "groups"), ("generating_s", "gen"),
         ("straggler_s", "stragglers"), ("parked_s", "parked"), ("refit_s", "refit"),
         ("train_s", "train"), ("checkpoint_s", "ckpt"), ("other_s", "other"),
         ("generation_bubble_s", "gen idle"), ("policy_lag", "lag"))
BUCKETS = (("productive_s", "productive"), ("overhead_s", "overhead"), ("idle_s", "idle"),
           ("wasted_s", "wasted"))


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and abs(v) < 0.005:  # rounding, not a time: no "-0.00"
        v = 0.0
    if isinstance(v, float) and not float(v).is_integer():
        return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.1f}"
    return f"{int(v):,}"


def cmd_steps(args: argparse.Namespace) -> int:
    from rolloutscope.store import RunStore
    from rolloutscope.store.ledger import ledger_report

    with RunStore(args.run, read_only=True) as store:
        run_id = pick_run(store, args.run_id, "show")
        report = ledger_report(store, run_id)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    steps = report["steps"]
    if not steps:
        print(f"run {run_id}: no train step (neither NeMo-RL's rl.<algorithm>.step spans nor "
              "rl.train_step spans)")
        return 0
    dialects = sorted({s["dialect"] for s in steps})
    print(f"run {run_id}: {len(steps):,} train steps ({', '.join(dialects)}); seconds")
    header = ["step", "start", "dur", *(h for _, h in SHOWN)]
    rows = [[_cell(s["step"]), _cell(s["start_s"]), _cell(s["duration_s"]),
             *(_cell(s[c]) for c, _ in SHOWN)] for s in steps]
    if any(s[c] is not None for s in steps for c, _ in BUCKETS):
        header += [h for _, h in BUCKETS]
        for row, s in zip(rows, steps):
            row += [_cell(s[c]) for c, _ in BUCKETS]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    said = False
    for s in steps:
        for g in s["straggler_groups"]:
            if not said:
                print("\nlast groups each step waited for:")
                said = True
            print(f"  step {s['step']}: {g['rollout_id']} committed at "
                  f"{_cell(g['committed_s'])} s: {g['why']}")
    for p in report["pending"]:
        for g in p["straggler_groups"]:
            print(f"  after the last step: {g['rollout_id']} try {g['attempt']} still running: "
                  f"{g['why']}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    steps = sub.add_parser("steps", help="the step ledger: per train step its wait, where its "
                                         "time went, goodput, policy lag and stragglers")
    steps.add_argument("run", type=store_arg, help=STORE_HELP)
    steps.add_argument("--run-id", help="the run of the store (default: its newest capture)")
    steps.add_argument("--json", action="store_true",
                       help="print the ledger as JSON: the steps, each with its stragglers")
    steps.set_defaults(handler=cmd_steps)
