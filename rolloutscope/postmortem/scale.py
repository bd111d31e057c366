"""Checkpoint prepare / commit / restore at 8k and 16k rollouts, replayed and as published.

NVIDIA-NeMo/Gym #3883 published one checkpoint per run at 8,000 and 16,000 rollouts on one
workstation with a fake inference backend; ``PUBLISHED_SCALE_TABLE`` holds that table verbatim.
The replays are the built-in ``scale-16k`` scenario and an 8k variant of it
(``scale_scenario``), each read back from the ``checkpoint_ops`` view at its busiest snapshot
(the one that parked the most rollouts, as #3883's harness held most rollouts in flight at its
checkpoint).

What a replay measures and what it is given: the rollouts in flight and the prepare duration
come out of the simulation (a park-requested agent waiting on a model call parks at once; one in
a tool step parks when the step ends, so prepare is bounded by the longest tool step); the
commit duration is the scenario's ``commit_s``, an input; the scenarios never crash, so nothing
is restored and the replayed restore is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rolloutscope.store import RunStore
from rolloutscope.postmortem.run_tables import PostmortemError, RunRef, replay_scenario
from rolloutscope.replay import scenarios
from rolloutscope.replay.scenario import Scenario

BASE_SCENARIO = "scale-16k"
SIZES = (8_000, 16_000)


@dataclass(frozen=True, kw_only=True)
class PublishedCheckpoint:
    """One row of NVIDIA-NeMo/Gym #3883's scale table (times in seconds)."""

    rollouts: int
    policy_workers: int
    in_flight: int  # in flight at the checkpoint, exported
    prepare_s: float
    model_prepare_s: float | None  # the model stage of prepare, where #3883 gives it
    commit_s: float
    restore_s: float
    run: str = ""


PUBLISHED_SCALE_TABLE: tuple[PublishedCheckpoint, ...] = (
    PublishedCheckpoint(rollouts=8_000, policy_workers=1, in_flight=4_201, prepare_s=0.67,
                        model_prepare_s=None, commit_s=0.60, restore_s=0.60),
    PublishedCheckpoint(rollouts=8_000, policy_workers=2, in_flight=4_083, prepare_s=0.56,
                        model_prepare_s=None, commit_s=0.69, restore_s=0.56),
    PublishedCheckpoint(rollouts=16_000, policy_workers=2, in_flight=14_320, prepare_s=7.57,
                        model_prepare_s=7.38, commit_s=4.64, restore_s=4.97),
    PublishedCheckpoint(rollouts=16_000, policy_workers=2, in_flight=12_228, prepare_s=3.60,
                        model_prepare_s=3.53, commit_s=1.83, restore_s=3.23, run="rerun"),
)

# The replay takes a commit's duration as given. scale-16k gives Gym #3883's first 16k commit
# (4.64 s, two workers); its 8k variant gives #3883's 8k commit on the same two workers.
COMMIT_S = {8_000: 0.69, 16_000: 4.64}


def scale_scenario(rollouts: int, *, scale: float = 1.0) -> Scenario:
    """``scale-16k`` at ``rollouts`` (8,000 or 16,000) nominal rollouts, times ``scale``.

    The prompt count is resized (each prompt is a group of ``num_generations_per_prompt``
    rollouts) and every snapshot commits in Gym #3883's commit time for that size; everything
    else (arrivals, turns, tool steps, two policy workers, generation cuts) is ``scale-16k``'s.
    ``scale`` < 1 makes a smaller run with the same shape, for a quick look.
    """
    if rollouts not in COMMIT_S:
        raise PostmortemError(f"Gym #3883 published {', '.join(map(str, COMMIT_S))} rollouts, "
                              f"not {rollouts}")
    if not 0 < scale <= 1:
        raise PostmortemError(f"scale must be in (0, 1], not {scale}")
    base = scenarios.get(BASE_SCENARIO)
    generated = base.workload.generated
    assert generated is not None  # scale-16k draws its prompts
    per_prompt = base.config.rollout.num_generations_per_prompt
    count = max(1, round(rollouts * scale / per_prompt))
    name = f"scale-{rollouts // 1000}k" + ("" if scale == 1 else f"-x{scale:g}")
    snapshots = tuple(dataclasses.replace(s, commit_s=COMMIT_S[rollouts])
                      for s in base.control.snapshots)
    return dataclasses.replace(
        base, name=name,
        description=(f"{BASE_SCENARIO} resized to {count * per_prompt:,} rollouts "
                     f"({count:,} prompts x {per_prompt}), commits in {COMMIT_S[rollouts]} s "
                     f"(Gym #3883 at {rollouts:,} rollouts on two workers)"),
        workload=dataclasses.replace(base.workload,
                                     generated=dataclasses.replace(generated, count=count)),
        control=dataclasses.replace(base.control, snapshots=snapshots))


def longest_tool_step_s(scenario: Scenario) -> float:
    """What bounds a replayed prepare: the longest tool step an agent may be in when parked."""
    generated = scenario.workload.generated
    tools = [t.tool_s for p in scenario.workload.prompts for r in p.rows for t in r.turns]
    return max([*tools, generated.tool_s_max if generated else 0.0], default=0.0)


def replay_sizes(out_dir: str | Path, *, scale: float = 1.0,
                 sizes: Iterable[int] = SIZES) -> dict[int, RunRef]:
    """Replay ``scale_scenario`` at each size into its own store under ``out_dir``."""
    out = Path(out_dir)
    runs = {}
    for size in sizes:
        sc = scale_scenario(size, scale=scale)
        runs[size] = replay_scenario(sc, out / f"{sc.name}.duckdb")
    return runs


@dataclass(frozen=True, kw_only=True)
class ReplayedCheckpoint:
    """The busiest snapshot of a replayed run, read from ``checkpoint_ops``."""

    run_id: str
    rollouts: int
    policy_workers: int
    checkpoint_id: str
    in_flight: int  # rollouts the snapshot parked
    prepare_s: float | None  # the controller's coordinated prepare
    model_prepare_s: float | None
    commit_s: float | None  # the controller's coordinated commit (the scenario's commit_s)
    restore_s: float | None  # None: the run restored nothing


def busiest_checkpoint(store: RunStore, run_id: str) -> ReplayedCheckpoint:
    parked = store.query(
        "SELECT checkpoint_id, count(DISTINCT rollout_id) AS n FROM parked_intervals "
        "WHERE run_id = ? GROUP BY checkpoint_id ORDER BY n DESC, checkpoint_id LIMIT 1",
        [run_id])
    if not parked:
        raise PostmortemError(f"run {run_id} parked no rollout at any snapshot")
    checkpoint_id, in_flight = parked[0]
    ops = store.view("checkpoint_ops", run_id=run_id)

    def duration(op: str, kind: str, checkpoint: str | None = checkpoint_id) -> float | None:
        sel = ops[(ops.op == op) & (ops.participant_kind == kind)]
        if checkpoint is not None:
            sel = sel[sel.checkpoint_id == checkpoint]
        sel = sel[sel.duration_s.notna()]
        return round(float(sel.duration_s.max()), 3) if len(sel) else None

    config = store.run_config(run_id)
    prompts = store.query("SELECT count(DISTINCT prompt_idx) FROM rollout_attempts "
                          "WHERE run_id = ?", [run_id])[0][0]
    per_prompt = int(config.get("rollout", {}).get("num_generations_per_prompt", 1))
    return ReplayedCheckpoint(
        run_id=run_id, rollouts=int(prompts) * per_prompt,
        policy_workers=int(config.get("checkpoint", {}).get("policy_workers", 1)),
        checkpoint_id=str(checkpoint_id), in_flight=int(in_flight),
        prepare_s=duration("prepare", "controller"),
        model_prepare_s=duration("prepare", "model"),
        commit_s=duration("commit", "controller"),
        restore_s=duration("restore", "controller", checkpoint=None))


def replayed(runs: Mapping[int, RunRef]) -> dict[int, ReplayedCheckpoint]:
    out = {}
    for size, run in runs.items():
        with run.open() as store:
            out[size] = busiest_checkpoint(store, run.run_id)
    return out


def comparison_table(checkpoints: Mapping[int, ReplayedCheckpoint]) -> pd.DataFrame:
    """Gym #3883's rows and the replays' busiest snapshots side by side, size by size."""
    rows = []
    for size in sorted({*COMMIT_S, *checkpoints}):
        for p in (p for p in PUBLISHED_SCALE_TABLE if p.rollouts == size):
            rows.append({"size": f"{size // 1000}k",
                         "source": "Gym #3883" + (f" ({p.run})" if p.run else ""),
                         "rollouts": p.rollouts, "policy_workers": p.policy_workers,
                         "in_flight": p.in_flight, "prepare_s": p.prepare_s,
                         "model_prepare_s": p.model_prepare_s, "commit_s": p.commit_s,
                         "restore_s": p.restore_s})
        if size in checkpoints:
            c = checkpoints[size]
            rows.append({"size": f"{size // 1000}k", "source": f"replay {c.run_id}",
                         "rollouts": c.rollouts, "policy_workers": c.policy_workers,
                         "in_flight": c.in_flight, "prepare_s": c.prepare_s,
                         "model_prepare_s": c.model_prepare_s, "commit_s": c.commit_s,
                         "restore_s": c.restore_s})
    df = pd.DataFrame(rows)
    df.insert(df.columns.get_loc("in_flight") + 1, "in_flight_share",
              (df.in_flight / df.rollouts).round(3))
    return df


def measured_prepare_growth() -> tuple[float, float]:
    """The least and the most that Gym #3883's prepare grew from 8k to 16k rollouts."""
    small = [p.prepare_s for p in PUBLISHED_SCALE_TABLE if p.rollouts == min(COMMIT_S)]
    large = [p.prepare_s for p in PUBLISHED_SCALE_TABLE if p.rollouts == max(COMMIT_S)]
    return round(min(large) / max(small), 2), round(max(large) / min(small), 2)


def replayed_prepare_growth(checkpoints: Mapping[int, ReplayedCheckpoint]) -> float:
    """How much the replayed prepare grew from the 8k run to the 16k run."""
    small, large = checkpoints[min(COMMIT_S)].prepare_s, checkpoints[max(COMMIT_S)].prepare_s
    if not small or large is None:
        raise PostmortemError("a replayed prepare took no time; growth is undefined")
    return round(large / small, 2)


@dataclass(frozen=True, kw_only=True)
class ScaleFindings:
    """What the replays say against the published figures, in the numbers that decide it."""

    replayed_in_flight_share: float  # the lowest share of rollouts parked, across the replays
    published_in_flight_share: float  # the lowest share in flight in Gym #3883's 16k runs
    replayed_prepare_s: float  # the longest replayed prepare
    prepare_bound_s: float  # the longest tool step of the replayed scenarios
    replayed_growth: float  # replayed prepare, 16k over 8k
    measured_growth: tuple[float, float]  # Gym #3883's prepare, 16k over 8k, least and most


def findings(checkpoints: Mapping[int, ReplayedCheckpoint], *,
             scale: float = 1.0) -> ScaleFindings:
    shares = [c.in_flight / c.rollouts for c in checkpoints.values() if c.rollouts]
    published = [p.in_flight / p.rollouts for p in PUBLISHED_SCALE_TABLE
                 if p.rollouts == max(COMMIT_S)]
    prepares = [c.prepare_s for c in checkpoints.values() if c.prepare_s is not None]
    if not shares or not prepares:
        raise PostmortemError("the replays recorded no checkpoint to judge")
    return ScaleFindings(
        replayed_in_flight_share=round(min(shares), 3),
        published_in_flight_share=round(min(published), 3),
        replayed_prepare_s=max(prepares),
        prepare_bound_s=max(longest_tool_step_s(scale_scenario(size, scale=scale))
                            for size in checkpoints),
        replayed_growth=replayed_prepare_growth(checkpoints),
        measured_growth=measured_prepare_growth())
