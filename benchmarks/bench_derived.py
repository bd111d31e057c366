"""Maintained model rows (rolloutscope/store/derived.py) against the views computed from scratch,
on one synthetic run (benchmarks/synthetic.py), medians of --rounds, in one process each:

- derive: one pass over every span of the run (what opening a store written before the rows were
  maintained costs once, and the upper bound of what a collector's passes add per span);
- incidents: ``SELECT * FROM incidents`` (every view over every span) against
  ``rs_read.incidents`` (the incident views over the maintained rows), and the CLI's
  ``rolloutscope incidents`` (process start included) on the file with and without them;
- info: ``rolloutscope info`` (process start included) with and without the summaries;
- one hour: the deadlines and parked stays of the run's last hour, from the view against the
  maintained tables;
- whole run by minute and by step: ``summaries.buckets`` and ``steps.step_table`` over the kept
  per-second sums against the same measures computed from the views.

    .venv/bin/python benchmarks/bench_derived.py --spans 1000000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import duckdb  # noqa: E402

import synthetic  # noqa: E402
from rolloutscope.store import RunStore, derived, summaries  # noqa: E402
from rolloutscope.store.steps import step_table  # noqa: E402

CLI = [sys.executable, "-m", "rolloutscope"]


def load() -> str:
    return os.getloadavg().__repr__()


def strip_derived(path: Path) -> None:
    """``path`` as a store written before its rows were maintained."""
    con = duckdb.connect(str(path))
    for name in derived.MAINTAINED:
        con.execute(f"DROP TABLE IF EXISTS d_{name}")
    for table in (*derived.SUMMARY_TABLES, "derive_state"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    for schema in derived.SCHEMAS:
        con.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    con.execute("CHECKPOINT")
    con.close()


def timed(fn, rounds: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def cli(*args: str) -> None:
    subprocess.run([*CLI, *args], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="keep the run file here")
    args = ap.parse_args()
    rounds = max(3, args.rounds)
    tmp = Path(tempfile.mkdtemp(prefix="bench-derived-"))
    maintained, plain = tmp / "maintained.duckdb", tmp / "plain.duckdb"
    print(f"load at start {load()}")
    t0 = time.perf_counter()
    synthetic.generate(maintained, spans=args.spans)
    print(f"synthetic run of {args.spans:,} spans written in {time.perf_counter() - t0:.1f} s")
    strip_derived(maintained)
    shutil.copy(maintained, plain)

    # derive: the whole run in one pass, as a first write of an older store does
    with RunStore(maintained) as store, store.cursor() as cur:
        n = cur.execute("SELECT count(*) FROM spans").fetchall()[0][0]
        assert derived.pending(cur)[0] == n, "the open derived it already"
    print(f"derive: {n:,} spans on first write (RunStore open, CHECKPOINT at close included)")
    derive_s = []
    for _ in range(rounds):
        strip_derived(maintained)
        t0 = time.perf_counter()
        RunStore(maintained).close()
        derive_s.append(time.perf_counter() - t0)
    med = statistics.median(derive_s)
    print(f"  median {med:.2f} s = {med / n * 1e6:.2f} us a span; rounds "
          f"{', '.join(f'{t:.2f}' for t in derive_s)}")

    def query(path: Path, sql: str) -> None:
        with RunStore(path, read_only=True) as store, store.cursor() as cur:
            cur.execute(sql).fetchall()

    rows = []
    with RunStore(maintained, read_only=True) as store, store.cursor() as cur:
        last = cur.execute("SELECT max(last_seen_ns) FROM runs").fetchall()[0][0]
        run_id = cur.execute("SELECT run_id FROM runs ORDER BY last_seen_ns DESC "
                             "LIMIT 1").fetchall()[0][0]

    def read(path: Path, fn) -> None:
        with RunStore(path, read_only=True) as store:
            fn(store)

    hour = f"start_ns >= {last - 3600 * 10**9}"
    cases = [
        ("incidents (SQL, in process)", lambda: query(plain, "SELECT * FROM incidents"),
         lambda: query(maintained, "SELECT * FROM rs_read.incidents")),
        ("rolloutscope incidents (CLI)", lambda: cli("incidents", str(plain)),
         lambda: cli("incidents", str(maintained))),
        ("rolloutscope incidents --since 1h", lambda: cli("incidents", str(plain), "--since", "1h"),
         lambda: cli("incidents", str(maintained), "--since", "1h")),
        ("rolloutscope info (CLI)", lambda: cli("info", str(plain)),
         lambda: cli("info", str(maintained))),
        ("last hour's deadlines + parked stays",
         lambda: (query(plain, f"SELECT * FROM deadlines WHERE {hour}"),
                  query(plain, f"SELECT * FROM parked_intervals WHERE {hour}")),
         lambda: (query(maintained, f"SELECT * FROM rs_read.deadlines WHERE {hour}"),
                  query(maintained, f"SELECT * FROM rs_read.parked_intervals WHERE {hour}"))),
        ("whole run by minute (summaries.buckets)",
         lambda: read(plain, lambda s: summaries.buckets(s, run_id, 60)),
         lambda: read(maintained, lambda s: summaries.buckets(s, run_id, 60))),
        ("whole run by step (steps.step_table)",
         lambda: read(plain, lambda s: step_table(s, run_id)),
         lambda: read(maintained, lambda s: step_table(s, run_id))),
    ]
    for label, before, after in cases:
        b, bt = timed(before, rounds)
        a, at = timed(after, rounds)
        rows.append((label, b, a))
        print(f"{label}: from scratch {b:.3f} s, maintained {a:.3f} s, ratio {a / b:.2f} "
              f"(rounds {', '.join(f'{t:.2f}' for t in bt)} | {', '.join(f'{t:.2f}' for t in at)})")
    print(f"load at end {load()}")
    if args.keep:
        shutil.move(maintained, args.keep)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
