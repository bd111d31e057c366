"""Virtual-clock replay of the built-in ``scale-16k`` scenario into a run store.

Prints wall time, simulated seconds per wall second, spans per second into the store, and the
ratio against real time (the target is >= 1000x on one core). The baseline measured in the same
run is real time itself: the scenario's simulated duration.

    .venv/bin/python benchmarks/bench_replay.py [--seed N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from rolloutscope.store import RunStore
from rolloutscope.replay import scenarios
from rolloutscope.replay.run_scenario import replay_into_store

TARGET_SPEEDUP = 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scenario = scenarios.get("scale-16k")
    with tempfile.TemporaryDirectory() as tmp:
        with RunStore(os.path.join(tmp, "bench.duckdb"), threads=1) as store:
            t0 = time.perf_counter()
            cpu0 = time.process_time()
            result = replay_into_store(scenario, store, seed=args.seed)
            store.writer().flush()
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            rows = store.query("SELECT count(*) FROM spans")[0][0]
            inflight = store.query(
                "SELECT max(n) FROM (SELECT checkpoint_id, count(*) AS n FROM parked_intervals "
                "GROUP BY checkpoint_id)")[0][0]
    rollouts = 16_000
    speedup = result.simulated_s / wall
    print(f"scale-16k seed {args.seed}: {rollouts:,} rollouts, {result.events:,} events, "
          f"{result.spans:,} spans ({rows:,} rows in the store)")
    print(f"  most rollouts parked at one checkpoint: {inflight:,}; snapshots: "
          f"{', '.join(result.stats['snapshots'])}")
    print(f"  wall {wall:.2f} s (process CPU {cpu:.2f} s)")
    print(f"  simulated {result.simulated_s:,.0f} s -> {speedup:,.0f} simulated s per wall s")
    print(f"  {result.spans / wall:,.0f} spans/s into the store")
    print(f"  ratio vs real time: {speedup:,.0f}x (target {TARGET_SPEEDUP:,.0f}x: "
          f"{'met' if speedup >= TARGET_SPEEDUP else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
