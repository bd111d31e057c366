"""A 20-point sweep of snapshot-outlasts-deadline, serially vs as Ray tasks on 2 local workers.

Prints the wall time of each and the speedup. The Ray figure is the sweep on a local Ray
started as ``rolloutscope sweep --ray local`` starts it (``start_ray``), whose workers have
imported rolloutscope (cluster start and worker warm-up are printed separately: a sweep pays
them once, however many points it has). Each point replays the scenario into its own run file
and reads its outcome counts and incidents back.

The two executors alternate, ``--rounds`` times each in the same run; the figures are the
medians, and the load average is printed before and after. Read the ratio on an otherwise idle
machine: where the kernel groups CPU time by session (Linux autogroup, on by default in Debian's
kernels), the driver and both Ray workers share one session's share, so while other sessions
keep the cores busy two workers get little more CPU than one process, whatever the executor.

    .venv/bin/python benchmarks/bench_sweep.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rolloutscope.replay.scenarios import get
from rolloutscope.replay.sweep import parse_grid, run_point, run_sweep, start_ray

GRID = ["rollout_timeout_s=120,150,180,210,240", "snapshot_duration_s=30,60,90,120"]


def _warm() -> bool:
    import rolloutscope.replay.run_scenario  # noqa: F401  the import a task pays on a fresh worker

    return True


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import ray

    scenario = get("snapshot-outlasts-deadline")
    grid = parse_grid(GRID)
    print(f"before: {_load()}")
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        # one point first, so both executors start with this process's imports done
        run_point(scenario.to_dict(), {}, 0, (), str(Path(tmp) / "warm.duckdb"))
        t0 = time.perf_counter()
        start_ray("local", num_cpus=args.workers)
        started = time.perf_counter() - t0
        warm = ray.remote(num_cpus=1)(_warm)
        t0 = time.perf_counter()
        ray.get([warm.remote() for _ in range(args.workers)])
        warmed = time.perf_counter() - t0
        serial, parallel = [], []
        try:
            for i in range(args.rounds):
                serial.append(run_sweep(scenario, grid, out_dir=Path(tmp) / f"serial-{i}",
                                        ray="none"))
                parallel.append(run_sweep(scenario, grid, out_dir=Path(tmp) / f"ray-{i}",
                                          ray="local"))
        finally:
            ray.shutdown()
    for result in serial + parallel:
        assert len(result.table) == 20 and result.failures.empty
    same = all(s.table.drop(columns=["run_file", "seconds"])
               .equals(p.table.drop(columns=["run_file", "seconds"]))
               for s, p in zip(serial, parallel, strict=True))
    serial_s = statistics.median(r.wall_s for r in serial)
    parallel_s = statistics.median(r.wall_s for r in parallel)
    print(f"points                      {len(serial[0].table)} (x {args.rounds} rounds each)")
    print(f"serial (this process)       {serial_s:8.2f} s   "
          f"(rounds: {', '.join(f'{r.wall_s:.2f}' for r in serial)})")
    print(f"ray, {args.workers} local workers       {parallel_s:8.2f} s   "
          f"(rounds: {', '.join(f'{r.wall_s:.2f}' for r in parallel)})")
    print(f"  + ray.init {started:.2f} s, worker warm-up {warmed:.2f} s, once per sweep")
    print(f"speedup (median / median)   {serial_s / parallel_s:8.2f}x")
    print(f"same table                  {same}")
    print(f"after: {_load()}")


if __name__ == "__main__":
    main()
