"""A 20-point sweep of snapshot-outlasts-deadline, serially vs as Ray tasks on 2 local workers.

Prints the wall time of each and the speedup. The Ray figure is the sweep on a started local
Ray whose two workers have imported rolloutscope (cluster start and worker warm-up are printed
separately: a sweep pays them once, however many points it has). Each point replays the
scenario into its own run file and reads its outcome counts and incidents back.

    .venv/bin/python benchmarks/bench_sweep.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rolloutscope.replay.scenarios import get
from rolloutscope.replay.sweep import parse_grid, run_point, run_sweep

GRID = ["rollout_timeout_s=120,150,180,210,240", "snapshot_duration_s=30,60,90,120"]


def _warm() -> bool:
    import rolloutscope.replay.runner  # noqa: F401  the import a task pays on a fresh worker

    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    import ray

    scenario = get("snapshot-outlasts-deadline")
    grid = parse_grid(GRID)
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        # one point first, so both executors start with this process's imports done
        run_point(scenario.to_dict(), {}, 0, (), str(Path(tmp) / "warm.duckdb"))
        serial = run_sweep(scenario, grid, out_dir=Path(tmp) / "serial", ray="none")
        t0 = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        started = time.perf_counter() - t0
        warm = ray.remote(num_cpus=1)(_warm)
        t0 = time.perf_counter()
        ray.get([warm.remote() for _ in range(args.workers)])
        warmed = time.perf_counter() - t0
        try:
            parallel = run_sweep(scenario, grid, out_dir=Path(tmp) / "ray", ray="local")
        finally:
            ray.shutdown()
    assert len(serial.table) == len(parallel.table) == 20
    assert serial.failures.empty and parallel.failures.empty
    same = (serial.table.drop(columns=["run_file", "seconds"])
            .equals(parallel.table.drop(columns=["run_file", "seconds"])))
    print(f"points                      {len(serial.table)}")
    print(f"serial (this process)       {serial.wall_s:8.2f} s")
    print(f"ray, {args.workers} local workers       {parallel.wall_s:8.2f} s"
          f"   (+ ray.init {started:.2f} s, worker warm-up {warmed:.2f} s, once per sweep)")
    print(f"speedup                     {serial.wall_s / parallel.wall_s:8.2f}x")
    print(f"same table                  {same}")


if __name__ == "__main__":
    main()
