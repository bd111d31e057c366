"""The wait board's per-tick cost (dashboard/in_flight.py) on a small and a large synthetic run
(benchmarks/synthetic.py), the same rollouts in flight in both: the board reads the open markers
and a recent window, so its cost follows what is in flight, not the run.

Each run gets ``--in-flight`` rollouts in flight at its end (start markers of an RL prompt group,
its try, its rollout deadline and its agent execution, as a live process sends them), then one
board tick is timed: the read (``read_board``), the board's order and its table. Medians of
``--rounds`` (at least 3) per run, the load average printed with them, and the ratio large/small.
The spans outside the window are those of the run: the large run has ``--scale`` times them.
The generator starts prompts faster in a larger run, up to 8 a second (from about 0.4M spans):
below that the large run's window also holds more recent spans than the small one's.

    .venv/bin/python benchmarks/bench_wait_board.py --spans 400000 --scale 10 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import synthetic  # noqa: E402
from rolloutscope.dashboard.in_flight import (  # noqa: E402
    BoardOrder,
    board_rows,
    read_board,
)
from rolloutscope.store import RunStore  # noqa: E402
from rolloutscope.vocabulary import Attr, SpanName  # noqa: E402

MARKERS = (SpanName.RL_PROMPT, SpanName.RL_ATTEMPT, SpanName.RL_DEADLINE,
           SpanName.AGENT_EXECUTION)


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def add_in_flight(path: Path, n: int) -> int:
    """``n`` rollouts in flight at the end of the synthetic run in ``path``, one every 7 s
    back from its last span: the start markers a live process sends. Returns 'now'."""
    with RunStore(path) as store, store.cursor() as con:
        now = con.execute("SELECT last_seen_ns FROM runs WHERE run_id = ?",
                          [synthetic.RUN]).fetchall()[0][0]
        deadline = f'{{"{Attr.DEADLINE_KIND}":"rollout","{Attr.DEADLINE_BUDGET_S}":600.0}}'
        con.execute(f"""
            INSERT INTO open_spans BY NAME
            SELECT ? AS run_id, md5('trace' || i) AS trace_id, md5(n || i)[:16] AS span_id,
                   n AS name, 'INTERNAL' AS kind, 'controller' AS service,
                   ?::BIGINT - (i * 7)::BIGINT * 1000000000 AS start_ns,
                   90000000 + i AS prompt_idx,
                   CASE WHEN n = '{SpanName.AGENT_EXECUTION}' THEN 'p' || (90000000 + i) || '-0'
                        ELSE 'p' || (90000000 + i) END AS rollout_id,
                   CASE WHEN n = '{SpanName.RL_PROMPT}' THEN NULL ELSE 0 END AS attempt,
                   CASE WHEN n = '{SpanName.RL_DEADLINE}' THEN '{deadline}' ELSE '{{}}' END
                       AS attributes
            FROM range(?) t(i), (SELECT unnest(?::VARCHAR[]) AS n)""",
                    [synthetic.RUN, now, n, list(MARKERS)])
    return now


def tick(store: RunStore, now: int, order: BoardOrder) -> int:
    rows, total = read_board(store, synthetic.RUN, now)
    board_rows(order.arrange(rows), now)
    return total


def measure(path: Path, now: int, rounds: int) -> tuple[float, list[float], int]:
    with RunStore(path, read_only=True) as store:
        order = BoardOrder()
        total = tick(store, now, order)  # the first read opens the file's pages
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            tick(store, now, order)
            times.append(time.perf_counter() - t0)
    return statistics.median(times), times, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=400_000, help="the small run's spans")
    ap.add_argument("--scale", type=int, default=10, help="the large run is this many times it")
    ap.add_argument("--in-flight", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rounds = max(3, args.rounds)
    tmp = Path(tempfile.mkdtemp(prefix="bench-wait-board-"))
    try:
        print(f"load at start {load()}")
        results = {}
        for label, spans in (("small", args.spans), ("large", args.spans * args.scale)):
            path = tmp / f"{label}.duckdb"
            t0 = time.perf_counter()
            counts = synthetic.generate(path, spans=spans)
            now = add_in_flight(path, args.in_flight)
            print(f"{label}: {counts['spans']:,} spans, {counts['span_events']:,} events, "
                  f"{args.in_flight} rollouts in flight (written in "
                  f"{time.perf_counter() - t0:.1f} s)")
            med, times, total = measure(path, now, rounds)
            assert total == args.in_flight, f"the board saw {total} in flight"
            results[label] = med
            print(f"  one board tick: median {med * 1e3:.1f} ms (rounds "
                  f"{', '.join(f'{t * 1e3:.1f}' for t in times)}); load {load()}")
        print(f"ratio large/small: {results['large'] / results['small']:.2f} "
              f"(the run {args.scale}x larger); load at end {load()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
