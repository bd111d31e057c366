"""Virtual-clock replay with real async participants: simulated seconds per wall second.

Replays a built-in scenario (default ``snapshot-outlasts-deadline``) into a run store three ways
in the same process, each ``--repeat`` times (median reported): the reference models (the
baseline), RL's ``_Deadline`` and Gym's ``AgentSessionParticipant`` + ``ParticipantControlPlane``
as this project's stand-ins (the same async shape, on the virtual-time runtime), and the real
upstream code when ``ROLLOUTSCOPE_NEMO_RL_SRC`` and ``ROLLOUTSCOPE_NEMO_GYM_SRC`` point at
checkouts. The target is >= 100x real time with real async participants. Loading the real code
(RL's rollout_manager.py pulls in torch before it fails over to extracting ``_Deadline``) is a
one-off cost, reported apart.

    .venv/bin/python benchmarks/bench_replay_real.py [--scenario NAME] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rolloutscope.replay import scenarios
from rolloutscope.replay.plugins import ENGINE_SLOT, PluginKind, participant_factories
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.store import RunStore

TARGET_SPEEDUP = 100.0
PLUGGED = ["deadline=nemo_rl", "agent_participant=nemo_gym"]


def _slots(paths: dict[str, str]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    plugged = participant_factories(PLUGGED, paths=paths)
    return ({ENGINE_SLOT[PluginKind(k)]: f for k, f in plugged.factories.items()},
            time.perf_counter() - t0)


def _measure(scenario, factories: dict, repeat: int, tmp: Path, label: str) -> list[float]:
    walls = []
    for i in range(repeat):
        with RunStore(tmp / f"{label}-{i}.duckdb", threads=1) as store:
            t0 = time.perf_counter()
            result = replay_into_store(scenario, store, run_id=f"{label}-{i}", **factories)
            store.writer().flush()
            walls.append(time.perf_counter() - t0)
    print(f"  {label}: snapshots {', '.join(result.stats['snapshots'])}, "
          f"{result.events:,} events, {result.spans:,} spans")
    return walls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="snapshot-outlasts-deadline")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    scenario = scenarios.get(args.scenario)
    print(f"{args.scenario}: {scenario.horizon_s:,.0f} simulated s; load: "
          f"{os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    runs: dict[str, tuple[list[float], float]] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        runs["reference models"] = (_measure(scenario, {}, args.repeat, tmp, "reference"), 0.0)
        slots, load = _slots({"nemo_rl": "doubles", "nemo_gym": "doubles"})
        runs["stand-ins (async)"] = (_measure(scenario, slots, args.repeat, tmp, "doubles"),
                                     load)
        rl, gym = os.environ.get("ROLLOUTSCOPE_NEMO_RL_SRC"), os.environ.get(
            "ROLLOUTSCOPE_NEMO_GYM_SRC")
        if rl and gym:
            slots, load = _slots({"nemo_rl": rl, "nemo_gym": gym})
            runs["real NeMo-RL + NeMo-Gym"] = (_measure(scenario, slots, args.repeat, tmp,
                                                        "real"), load)
        else:
            print("  real code: skipped (set ROLLOUTSCOPE_NEMO_RL_SRC and "
                  "ROLLOUTSCOPE_NEMO_GYM_SRC to checkouts)")
    base = statistics.median(runs["reference models"][0])
    for label, (walls, load) in runs.items():
        wall = statistics.median(walls)
        speed = scenario.horizon_s / wall
        extra = f"; loading the code {load:.2f} s once" if load else ""
        verdict = "" if label == "reference models" else (
            f"; target {TARGET_SPEEDUP:,.0f}x: {'met' if speed >= TARGET_SPEEDUP else 'NOT met'}")
        print(f"{label:>26}: median wall {wall * 1000:8.1f} ms over {len(walls)} -> "
              f"{speed:10,.0f} simulated s per wall s ({wall / base:.2f}x the reference "
              f"models' wall time){verdict}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
