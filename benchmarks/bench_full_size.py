"""The reads of issue #47's table on one large run, against the same reads computed from the
views in the same run: the CLI's ``incidents`` (whole run and ``--since 1h``) and ``info``
(process start included), one hour's and one step's rows from the maintained tables, the
whole run by minute and by step from the kept per-second sums, and the step ledger and a
step's stragglers from the kept steps. Medians of --rounds (≥3); the
load is printed before and after.

    .venv/bin/python benchmarks/synthetic.py RUN.duckdb --spans 100000000 --commits 50
    .venv/bin/python benchmarks/bench_full_size.py RUN.duckdb

The run is opened once for writing first (what a collector's close does: the incidents are
kept for its readers), timed. From-scratch baselines that would take longer than
--baseline-limit-s a round are run once and said so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from rolloutscope.store import RunStore, summaries  # noqa: E402
from rolloutscope.store.ledger import ledger_table, straggler_table  # noqa: E402
from rolloutscope.store.steps import step_table  # noqa: E402

CLI = [sys.executable, "-m", "rolloutscope"]


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(fn, rounds: int, limit_s: float | None = None) -> tuple[float, list[float]]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if limit_s is not None and times[-1] > limit_s:
            break
    return statistics.median(times), times


def cli(*args: str) -> None:
    subprocess.run([*CLI, *args], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-limit-s", type=float, default=60.0)
    ap.add_argument("--only", default="", help="run the cases whose label holds this text")
    args = ap.parse_args()
    rounds = max(3, args.rounds)
    print(f"load at start {load()}")
    t0 = time.perf_counter()
    RunStore(args.run).close()
    print(f"open for writing and close (incidents kept): {time.perf_counter() - t0:.1f} s")
    with RunStore(args.run, read_only=True) as store:
        spans = store.query("SELECT count(*) FROM spans")[0][0]
        run = store.query("SELECT run_id FROM runs ORDER BY last_seen_ns DESC LIMIT 1")[0][0]
        last = store.query("SELECT last_seen_ns FROM runs WHERE run_id = ?", [run])[0][0]
        steps = store.query("SELECT start_ns, end_ns FROM rs_read.train_step_spans "
                            "WHERE run_id = ? AND end_ns IS NOT NULL ORDER BY end_ns", [run])
        print(f"run {run}: {spans:,} spans, kept incidents: {store.relation('incidents')}")
    hour = (last - 3600 * 10**9, last)
    # a step's stretch where the run has steps, else the run's middle ten minutes
    mid = hour[0] - 6 * 3600 * 10**9
    step = steps[len(steps) // 2] if steps else (mid, mid + 600 * 10**9)

    def rows(relations: dict[str, str], lo: int, hi: int) -> None:
        # the rows overlapping [lo, hi): the ended ones by their end (DuckDB prunes the kept
        # rows, appended as their spans end, on it; an OR with the open rows would not be
        # pruned) and the open ones apart
        with RunStore(args.run, read_only=True) as store, store.cursor() as cur:
            for rel in relations.values():
                cur.execute(f"SELECT * FROM {rel} WHERE run_id = $run AND start_ns < $hi "
                            f"AND end_ns >= $lo UNION ALL SELECT * FROM {rel} "
                            "WHERE run_id = $run AND start_ns < $hi AND end_ns IS NULL",
                            {"run": run, "hi": hi, "lo": lo}).fetchall()

    maintained = {v: f"rs_read.{v}" for v in ("rl_attempts", "deadlines", "parked_intervals")}
    views = {v: v for v in ("rl_attempts", "deadlines", "parked_intervals")}

    def read(fn) -> None:
        with RunStore(args.run, read_only=True) as store:
            fn(store)

    def scratch(sql: str) -> None:
        with RunStore(args.run, read_only=True) as store, store.cursor() as cur:
            cur.execute(sql, [run]).fetchall()

    def steps_tab(store) -> None:
        # what the Steps tab reads: the ledger, then the latest steps' stragglers (2,000 rows)
        ledger = ledger_table(store, run)
        if len(ledger):
            from rolloutscope.dashboard.steps_view import latest_steps_from
            straggler_table(store, run, from_step=latest_steps_from(ledger),
                            incidents=store.view("incidents", run_id=run))

    def scratch_incidents() -> None:
        # the detectors over the maintained rows: what a reader of a store that changed since
        # its incidents were kept runs (the views over every span, ``incidents``, did not
        # finish at 10^8 spans: DuckDB parked every thread and ignored interrupt())
        with RunStore(args.run, read_only=True) as store, store.cursor() as cur:
            cur.execute("SELECT * FROM rs_read.incidents").fetchall()

    def staleness(store, macro: bool) -> None:
        # the In flight tab's staleness read of a window (the last 15 minutes): through the
        # window macro, or the view filtered on the window (ASOF joins stop the filter)
        lo = last - 900 * 10**9
        if macro:
            store.query_frame("SELECT * FROM rs_read.rollout_staleness_window(?, ?)", [run, lo])
        else:
            store.query_frame("SELECT * FROM rs_read.rollout_staleness WHERE run_id = ? "
                              "AND coalesce(end_ns, start_ns) >= ?", [run, lo])

    cases = [
        ("a window's staleness (In flight tab, 15 min)", lambda: read(lambda s: staleness(s, False)),
         lambda: read(lambda s: staleness(s, True))),
        ("rolloutscope incidents (CLI)", scratch_incidents, lambda: cli("incidents", str(args.run))),
        ("rolloutscope incidents --since 1h (CLI)", scratch_incidents,
         lambda: cli("incidents", str(args.run), "--since", "1h")),
        ("rolloutscope info (CLI)", None, lambda: cli("info", str(args.run))),
        ("one hour's rows (tries, deadlines, parked)", lambda: rows(views, *hour),
         lambda: rows(maintained, *hour)),
        ("one step's rows (tries, deadlines, parked)", lambda: rows(views, *step),
         lambda: rows(maintained, *step)),
        ("whole run by minute (summaries.buckets)", None,
         lambda: read(lambda s: summaries.buckets(s, run, 60))),
        ("whole run by step (steps.step_table)", None,
         lambda: read(lambda s: step_table(s, run))),
        ("the step ledger (ledger.ledger_table)",
         lambda: scratch("SELECT * FROM step_ledger WHERE run_id = ?"),
         lambda: read(lambda s: ledger_table(s, run))),
        ("one step's stragglers (ledger.straggler_table)",
         lambda: scratch("SELECT * FROM step_stragglers WHERE run_id = ? AND step = 1"),
         lambda: read(lambda s: straggler_table(s, run, step=1))),
        ("the Steps tab's reads (ledger, the latest steps' stragglers)", None,
         lambda: read(steps_tab)),
    ]
    for label, before, after in cases:
        if args.only not in label:
            continue
        a, at = timed(after, rounds)
        line = f"{label}: {a:.3f} s (rounds {', '.join(f'{t:.2f}' for t in at)})"
        if before is not None:
            b, bt = timed(before, rounds, args.baseline_limit_s)
            line += (f"; computed (SQL in process) {b:.3f} s (rounds {', '.join(f'{t:.2f}' for t in bt)})"
                     f", ratio {a / b:.3f}")
        print(line, flush=True)
    print(f"load at end {load()}")


if __name__ == "__main__":
    main()
