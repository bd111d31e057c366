"""Virtual-clock replay of ``scale-16k`` at 1k, 4k and 16k rollouts: simulated seconds per wall
second and µs per span, into a run store and into an exporter that discards.

Each size is ``scale-16k`` with its generated workload cut to 1/16 or 1/4 of the prompts (same
arrival window, turns, durations, checkpoints and horizon), so the sizes differ only in how many
rollouts are in flight. Each figure is the median of ``--repeats`` runs. The baselines measured
in the same run are real time (the target is >= 1000 simulated s per wall s at 16k rollouts)
and the 1k-rollout replay (a linear replay spends the same µs per span at 16k as at 1k). The
discarding exporter shows what the simulation and its spans cost without the store: the rest
is encoding the rows and the store's writer. ``store-py`` is the store with every span encoded by
the exporter's Python loop (as without its compiled encoder), at the largest size.

    .venv/bin/python benchmarks/bench_replay_scale.py [--repeats 3] [--sizes 1000,4000,16000]

It prints ``uptime``'s load before and after: on a busy machine read the ratios, not the
absolute figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from rolloutscope.collectors import exporter as exporter_module
from rolloutscope.replay import scenarios
from rolloutscope.replay.run_scenario import ReplayResult, replay, replay_into_store
from rolloutscope.replay.scenario import Scenario
from rolloutscope.store import RunStore

TARGET_SPEEDUP = 1000.0
FULL_ROLLOUTS = 16_000


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@dataclass(frozen=True)
class Sample:
    wall_s: float
    cpu_s: float  # the process's, all threads (the store's writer included)
    result: ReplayResult


def sized(rollouts: int) -> Scenario:
    """``scale-16k`` with ``rollouts`` rollouts (a multiple of its rows per prompt)."""
    base = scenarios.get("scale-16k")
    rows = base.config.rollout.num_generations_per_prompt
    gen = base.workload.generated
    assert gen is not None and rollouts % rows == 0
    workload = dataclasses.replace(base.workload,
                                   generated=dataclasses.replace(gen, count=rollouts // rows))
    return dataclasses.replace(base, workload=workload)


def run_once(scenario: Scenario, *, into_store: bool, seed: int,
             python_encoder: bool = False) -> Sample:
    compiled = exporter_module._compiled
    if python_encoder:
        exporter_module._compiled = None  # exporters made now encode in Python
    try:
        return _run_once(scenario, into_store=into_store, seed=seed)
    finally:
        exporter_module._compiled = compiled


def _run_once(scenario: Scenario, *, into_store: bool, seed: int) -> Sample:
    with tempfile.TemporaryDirectory() as tmp:
        if into_store:
            with RunStore(os.path.join(tmp, "bench.duckdb"), threads=1) as store:
                t0, c0 = time.perf_counter(), time.process_time()
                result = replay_into_store(scenario, store, seed=seed)
                store.writer().flush()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        else:
            scenario = dataclasses.replace(scenario, seed=seed)
            t0, c0 = time.perf_counter(), time.process_time()
            result = replay(scenario, _Discard(), run_id="bench")
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return Sample(wall, cpu, result)


def median_sample(scenario: Scenario, *, into_store: bool, seed: int, repeats: int,
                  python_encoder: bool = False) -> tuple[float, float, ReplayResult]:
    samples = [run_once(scenario, into_store=into_store, seed=seed,
                        python_encoder=python_encoder) for _ in range(repeats)]
    return (statistics.median(s.wall_s for s in samples),
            statistics.median(s.cpu_s for s in samples), samples[0].result)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", default="1000,4000,16000",
                        help="rollouts per replay, comma-separated (multiples of 8)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"before: {load()}")
    print(f"scale-16k at {', '.join(f'{n:,}' for n in sizes)} rollouts, seed {args.seed}, "
          f"median of {args.repeats}")
    rows: list[tuple[int, str, float, float, ReplayResult]] = []
    for n in sizes:
        scenario = sized(n)
        modes = [("store", True, False), ("discard", False, False)]
        if n == max(sizes):
            modes.append(("store-py", True, True))
        for mode, into_store, python_encoder in modes:
            wall, cpu, result = median_sample(scenario, into_store=into_store, seed=args.seed,
                                              repeats=args.repeats,
                                              python_encoder=python_encoder)
            rows.append((n, mode, wall, cpu, result))
    print(f"{'rollouts':>9} {'exporter':>8} {'spans':>8} {'events':>8} {'wall s':>7} "
          f"{'cpu s':>7} {'sim s/wall s':>12} {'us/span wall':>12} {'us/span cpu':>11}")
    per_span: dict[tuple[int, str], float] = {}
    for n, mode, wall, cpu, r in rows:
        per_span[(n, mode)] = wall / r.spans * 1e6
        print(f"{n:>9,} {mode:>8} {r.spans:>8,} {r.events:>8,} {wall:>7.2f} {cpu:>7.2f} "
              f"{r.simulated_s / wall:>12,.0f} {wall / r.spans * 1e6:>12.1f} "
              f"{cpu / r.spans * 1e6:>11.1f}")
    small, large = min(sizes), max(sizes)
    for mode in ("store", "discard"):
        ratio = per_span[(large, mode)] / per_span[(small, mode)]
        print(f"{mode}: µs per span at {large:,} vs {small:,} rollouts: {ratio:.2f}x "
              f"(1.00x is linear)")
    full = [(wall, r) for n, mode, wall, _, r in rows if n == large and mode == "store"][0]
    speedup = full[1].simulated_s / full[0]
    py = [(wall, r) for n, mode, wall, _, r in rows if n == large and mode == "store-py"][0]
    print(f"into the store at {large:,} rollouts, compiled vs Python span encoder: "
          f"{py[0] / full[0]:.2f}x faster ({py[1].simulated_s / py[0]:,.0f}x real time "
          f"with the Python encoder)")
    print(f"ratio vs real time at {large:,} rollouts into the store: {speedup:,.0f}x "
          f"(target {TARGET_SPEEDUP:,.0f}x: {'met' if speedup >= TARGET_SPEEDUP else 'NOT met'})")
    print(f"after: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
