"""``rolloutscope diff A.duckdb[:RUN] B.duckdb[:RUN]``: two runs side by side by train step
(committed, timeouts, re-dispatches, snapshots, incidents) and the difference, B - A.

Exit status: 0 the table was printed (whatever it shows: the status does not judge the
difference); 2 the input was wrong, which includes naming one run as both A and B (the same run
id in the same file, however the path is spelled): a run compared with itself says nothing. A
step marked ``+`` (explained under the table only when one is shown) is what happened after the
run's last completed train step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from rolloutscope.cli.export import pick_run, split_run_ref

SHOWN = (("committed", "committed"), ("timeouts", "timeouts"),
         ("redispatches", "redispatches"), ("snapshot_s", "snapshot s"),
         ("incidents", "incidents"))


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.1f}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v):,}"


def _delta(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return "0" if v == 0 else (f"{v:+,.1f}" if not float(v).is_integer() else f"{int(v):+,}")


def cmd_diff(args: argparse.Namespace) -> int:
    from rolloutscope.store import RunStore
    from rolloutscope.store.steps import diff_totals, step_diff, step_table

    sides = []
    for ref in (args.a, args.b):
        path, run_id = split_run_ref(ref)
        with RunStore(path, read_only=True) as store:
            run_id = pick_run(store, run_id, "compare")
            sides.append((path, run_id, step_table(store, run_id)))
    if _same_run(sides[0][:2], sides[1][:2]):
        from rolloutscope.cli import UsageError

        raise UsageError(f"A and B are the same run ({sides[0][1]} in {sides[0][0]}); name "
                         "another with FILE:RUN")
    (pa, ra, ta), (pb, rb, tb) = sides
    diff = step_diff(ta, tb)
    if args.json:
        print(json.dumps({"a": {"path": pa, "run_id": ra}, "b": {"path": pb, "run_id": rb},
                          "steps": json.loads(diff.to_json(orient="records")),
                          "totals": diff_totals(diff)}, indent=1))
        return 0
    print(f"A: {ra} ({pa})\nB: {rb} ({pb})\nper train step, A  B  (B - A)")
    marked = False
    head = f"{'step':>6}  " + "  ".join(f"{label:>22}" for _, label in SHOWN) + "  incident kinds"
    print(head)
    for r in diff.itertuples(index=False):
        row = r._asdict()
        trained = any(v is not None and not (isinstance(v, float) and math.isnan(v)) and bool(v)
                      for v in (r.trained_a, r.trained_b))
        step = f"{int(r.step)}" + ("" if trained else "+")
        marked = marked or not trained
        cells = [f"{_cell(row[c + '_a']):>6} {_cell(row[c + '_b']):>6} ({_delta(row['d_' + c]):>6})"
                 for c, _ in SHOWN]
        ka, kb = (row[k] if isinstance(row[k], str) else "" for k in
                  ("incident_kinds_a", "incident_kinds_b"))
        kinds = kb if ka == kb else f"A: {ka or '-'}; B: {kb or '-'}"
        print(f"{step:>6}  " + "  ".join(f"{c:>22}" for c in cells) + f"  {kinds}")
    totals = diff_totals(diff)
    cells = [f"{_cell(totals[c][0]):>6} {_cell(totals[c][1]):>6} ({_delta(totals[c][2]):>6})"
             for c, _ in SHOWN]
    print(f"{'total':>6}  " + "  ".join(f"{c:>22}" for c in cells))
    if marked:
        print("(a step marked + is what happened after the run's last completed train step)")
    return 0


def _same_run(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Whether (path, run id) a and b name one run: the same id in the same file or directory,
    however the path is spelled (a lake's address is compared as written)."""
    if a[1] != b[1]:
        return False
    pa, pb = Path(a[0]), Path(b[0])
    if pa.exists() and pb.exists():
        return os.path.samefile(pa, pb)
    return a[0] == b[0]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="two runs side by side by train step, and the difference",
                       epilog="exit status: 0 the table was printed, whatever it shows; 2 wrong "
                              "input, including one run named as both A and B")
    p.add_argument("a", help="run A: RUN.duckdb or RUN.duckdb:RUN_ID")
    p.add_argument("b", help="run B: RUN.duckdb or RUN.duckdb:RUN_ID (the same file is fine)")
    p.add_argument("--json", action="store_true", help="the table as JSON")
    p.set_defaults(handler=cmd_diff)
