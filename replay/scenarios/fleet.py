"""The built-in generation-fleet scenarios (NVIDIA-NeMo/RL #3590; P3-P6, P11, P13 in
docs/domain/incidents.md).

Times are seconds from the start of the run. Each scenario lists the fixes its system had
(``fixes``); RL #3590's merged system has all four (``MERGED_FLEET_FIXES``). A scenario that
reproduces a pre-fix behaviour leaves that one fix out, and the variant puts it back.
"""

from __future__ import annotations

from rolloutscope.replay.scenario import (
    CheckpointConfig,
    Config,
    Control,
    Faults,
    FleetConfig,
    GeneratedPrompts,
    GenerationRouterConfig,
    KillState,
    Prompt,
    RefitMiss,
    RolloutConfig,
    Row,
    Scenario,
    ShardKill,
    ShardWedge,
    SnapshotAttempt,
    TrainingConfig,
    Turn,
    WatchdogConfig,
    WedgeMode,
    WeightSync,
    Workload,
)
from rolloutscope.replay.variants import MERGED_FLEET_FIXES, Variant, ordered

MERGED = tuple(Variant(v) for v in ordered(MERGED_FLEET_FIXES))


def _merged_without(fix: Variant) -> tuple[Variant, ...]:
    return tuple(v for v in MERGED if v is not fix)


def _steady(*, start: float, every_s: float, count: int, turns: tuple[Turn, ...], rows: int = 1,
            first_idx: int = 0) -> tuple[Prompt, ...]:
    return tuple(Prompt(idx=first_idx + i, arrival_s=start + i * every_s,
                        rows=tuple(Row(turns=turns) for _ in range(rows)))
                 for i in range(count))


_TURN = Turn(model_s=10.0, tool_s=3.0, input_tokens=1024, output_tokens=512)


def chaos_kill_idle() -> Scenario:
    """P4/P11: the only generation shard is killed while idle; a bounded, attributable failure.

    Source: NVIDIA-NeMo/RL #3590 ("Part 1 fails in 222s; this PR fails in 62s"; chaos harness "idle
    (default) ... the loss must be DETECTED, by health probe or by the stall detector"; P4 in
    docs/domain/incidents.md). Numbers: one shard; 4 prompts commit by 60 s; the shard is killed at
    88 s with nothing in flight; the next prompt arrives at 145 s.
    As replayed (no fixes, Part 1's system): Gym round-robins to the dead endpoint, whose refused
    connection enters its uncapped 0.5 s transport loop with no HTTP timeout, so only the 30 s
    rollout deadline ends each try; five tries with 1, 2, 4, 8 s of backoff raise
    RolloutRedispatchExhausted at 310 s, 222 s after the kill.
    With ``fleet-health-enabled`` (probes on the 30 s watchdog tick, as in #3590's run) the
    third failed probe, at 150 s, condemns the shard and GenerationFleetExhausted ends the run
    62 s after the kill, ~4x sooner, naming the cause. With ``probe-at-probe-interval`` too,
    5 s probes condemn it at 100 s (12 s; "~15 s" with the defaults).
    """
    prompts = _steady(start=0.0, every_s=10.0, count=4, turns=(_TURN, _TURN))
    late = Prompt(idx=4, arrival_s=145.0, rows=(Row(turns=(_TURN, _TURN)),))
    return Scenario(
        name="chaos-kill-idle", description=chaos_kill_idle.__doc__ or "", horizon_s=400.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=30.0),
                      training=TrainingConfig(prompts_per_step=2, max_num_steps=10),
                      fleet=FleetConfig(shards=1),
                      router=GenerationRouterConfig(backend_timeout_s=20.0)),
        workload=Workload(prompts=prompts + (late,)),
        faults=Faults(shard_kills=(ShardKill(shard=0, at_s=88.0, state=KillState.IDLE),)))


def chaos_kill_serving() -> Scenario:
    """P4: the only shard is killed while serving; the failure surfaces within seconds.

    Source: NVIDIA-NeMo/RL #3590 (chaos harness: "serving .generate_async. An in-flight rollout RPC
    dies with the worker and surfaces immediately"; "serving -> ..., 12s, GenerationUnavailable +
    RolloutRedispatchExhausted"; P4 in docs/domain/incidents.md). Numbers: one shard, #3590's
    merged system; a prompt every 10 s; the shard is killed at 88 s with a generation in flight.
    The router drops the failing backend and answers 409 while the set is empty; the failures it
    drains at the 90 and 95 s probe ticks reach unhealthy_threshold=3 before the probes do, and
    GenerationFleetExhausted ends the run at 95 s, 7 s after the kill (#3590: "the job stopped
    10 s after the kill ... the threshold was crossed largely by adapter-reported failures").
    """
    return Scenario(
        name="chaos-kill-serving", description=chaos_kill_serving.__doc__ or "", horizon_s=400.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=30.0),
                      training=TrainingConfig(prompts_per_step=2, max_num_steps=20),
                      fleet=FleetConfig(shards=1),
                      router=GenerationRouterConfig(backend_timeout_s=20.0)),
        workload=Workload(prompts=_steady(start=0.0, every_s=10.0, count=20,
                                          turns=(_TURN, _TURN))),
        faults=Faults(shard_kills=(ShardKill(shard=0, at_s=88.0, state=KillState.SERVING),)),
        fixes=MERGED)


def two_shard_failover() -> Scenario:
    """P4: one of two shards killed mid-run; the router goes 2 -> 1 and rollouts carry on.

    Source: NVIDIA-NeMo/RL #3590 (grpo_sc_gym_router_failover.sh, job 6263801 on 3xGB200, 13m34s:
    ``min(router/serving_backends) == 1``, ``max(gen_fleet/shards/dead) >= 1``; "the next weight
    refit still broadcasts to the rank that died and hangs inside NCCL"; P4 in
    docs/domain/incidents.md).
    Numbers: two shards, the merged system; a prompt every 5 s for 600 s; shard 1 is killed at
    300 s while serving; a refit at 200 s succeeds; the next, at 500 s, hangs on the dead rank
    and holds admission shut; the run is stopped at 814 s (13m34s) after the quarantine was
    verified, before the stall watchdog (stall_timeout_s=600) would speak.
    """
    turn = Turn(model_s=8.0, tool_s=2.0, input_tokens=1024, output_tokens=512)
    return Scenario(
        name="two-shard-failover", description=two_shard_failover.__doc__ or "", horizon_s=814.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=120.0),
                      training=TrainingConfig(prompts_per_step=10, max_num_steps=20),
                      fleet=FleetConfig(shards=2),
                      router=GenerationRouterConfig(backend_timeout_s=60.0)),
        workload=Workload(prompts=_steady(start=0.0, every_s=5.0, count=120,
                                          turns=(turn, turn))),
        control=Control(weight_syncs=(WeightSync(at_s=200.0, duration_s=10.0),
                                      WeightSync(at_s=500.0, duration_s=10.0))),
        faults=Faults(shard_kills=(ShardKill(shard=1, at_s=300.0, state=KillState.SERVING),)),
        fixes=MERGED)


def hung_weight_sync() -> Scenario:
    """P3: a refit hangs on a dead rank; nothing in flight, committed frozen, the stall line.

    Source: NVIDIA-NeMo/RL #3590 (the wedge "lasted 6 minutes before the fix; rollout/idle_s:
    371.8, rollout/committed_total: 10 frozen"; job 6258553 "rollout stall -- ... (0 rollouts in
    flight, 12 groups committed, step 3/150)"; P3 in docs/domain/incidents.md). Numbers: two
    shards, the merged system; a prompt every 10 s; shard 1 is killed at 100 s and quarantined at
    ~110 s; the refit at 120 s broadcasts to the dead rank and never returns, so admission stays
    shut: later prompts wait, nothing is in flight, rollout/committed_total stays at 12 (as in job
    6258553), and the watchdog reports the stall once idle passes stall_timeout_s=360.
    """
    return Scenario(
        name="hung-weight-sync", description=hung_weight_sync.__doc__ or "", horizon_s=800.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=120.0),
                      watchdog=WatchdogConfig(interval_s=30.0, stall_timeout_s=360.0),
                      training=TrainingConfig(prompts_per_step=5, max_num_steps=150),
                      fleet=FleetConfig(shards=2),
                      router=GenerationRouterConfig(backend_timeout_s=60.0)),
        workload=Workload(prompts=_steady(start=0.0, every_s=10.0, count=20,
                                          turns=(_TURN, _TURN))),
        control=Control(weight_syncs=(WeightSync(at_s=120.0, duration_s=10.0),)),
        faults=Faults(shard_kills=(ShardKill(shard=1, at_s=100.0),)),
        fixes=MERGED)


def wedged_engine() -> Scenario:
    """P5: a wedged engine answers every probe while its generations fail.

    Source: NVIDIA-NeMo/RL #3590 ("a shard answering probes while failing every generation is still
    condemned"; before the fix "each good probe would wipe the evidence and the shard would swing
    healthy <-> suspect for ever"; P5 in docs/domain/incidents.md). Numbers: two shards, the merged
    system without ``separate-reported-failure-streak``; each prompt's two rows call together, one
    lands on shard 1, which is wedged from 60 s (fast failures); the router answers 500, drops it
    until the next 5 s push, and Gym's retry lands on shard 0. One failure every 12 s
    is drained into a streak the next good probe zeroes, so shard 1 swings healthy <-> suspect
    and is never quarantined. With ``separate-reported-failure-streak`` the third drained failure
    condemns it.
    """
    turn = Turn(model_s=4.0, tool_s=2.0, input_tokens=512, output_tokens=256)
    return Scenario(
        name="wedged-engine", description=wedged_engine.__doc__ or "", horizon_s=700.0,
        config=Config(rollout=RolloutConfig(num_generations_per_prompt=2,
                                            rollout_timeout_s=120.0),
                      training=TrainingConfig(prompts_per_step=5, max_num_steps=10),
                      fleet=FleetConfig(shards=2),
                      router=GenerationRouterConfig(backend_timeout_s=60.0)),
        workload=Workload(prompts=_steady(start=0.0, every_s=12.0, count=50, turns=(turn,),
                                          rows=2)),
        faults=Faults(shard_wedges=(ShardWedge(shard=1, at_s=60.0, mode=WedgeMode.FAIL),)),
        fixes=_merged_without(Variant.SEPARATE_REPORTED_FAILURE_STREAK))


def retry_504_storm() -> Scenario:
    """P6: a hung backend answered 504 makes Gym retry one call for ever, the ceiling rising.

    Source: NVIDIA-NeMo/RL #3590 ("a wedged backend produces 504, which is in Gym's rate-limit
    retry subset where its ceiling rises on every attempt. That is an unbounded retry loop at
    backend_timeout_s per turn"; "least-outstanding prefers the corpse"; P6 in
    docs/domain/incidents.md). Numbers: two shards, the merged system without
    ``router-500-not-504``; backend_timeout_s=600 (the default); shard 0 hangs every generation
    from 30 s; a prompt every 20 s. The call that lands on shard 0 at 40 s gets 504 at 640 s, is
    retried at once onto the same backend (back at zero in flight, ties go to the lowest index),
    and again at 1241 s and 1841 s, max_tries rising 4, 5, 6; its group can end only at its 3000 s
    deadline. With ``router-500-not-504`` the 500 is retried onto shard 1 and the call completes.
    """
    turn = Turn(model_s=5.0, tool_s=2.0, input_tokens=512, output_tokens=256)
    return Scenario(
        name="retry-504-storm", description=retry_504_storm.__doc__ or "", horizon_s=2400.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=3000.0),
                      watchdog=WatchdogConfig(interval_s=30.0, stall_timeout_s=3600.0),
                      training=TrainingConfig(prompts_per_step=1, max_num_steps=15),
                      fleet=FleetConfig(shards=2),
                      router=GenerationRouterConfig(backend_timeout_s=600.0)),
        workload=Workload(prompts=_steady(start=0.0, every_s=20.0, count=21, turns=(turn,))),
        faults=Faults(shard_wedges=(ShardWedge(shard=0, at_s=30.0, mode=WedgeMode.HANG),)),
        fixes=_merged_without(Variant.ROUTER_500_NOT_504))


def stale_weights_serving() -> Scenario:
    """P13: a refit that misses a serving shard leaves it serving weights the trainer left.

    Source: fleet health in NVIDIA-NeMo/RL main ("gen_fleet/shard_weight_version/{i}: if a serving
    shard's version trails the trainer, that is a correctness bug") and NVIDIA-NeMo/RL #3590 (a
    refit is the only way weights reach a shard); P13 in docs/domain/incidents.md. Numbers: two
    shards, the merged system; a prompt every 10 s; refits at 100 s and 250 s (10 s each); the
    second never reaches shard 1, which stays healthy on the older version while the trainer moves
    on.
    """
    return Scenario(
        name="stale-weights-serving", description=stale_weights_serving.__doc__ or "",
        horizon_s=450.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=120.0),
                      training=TrainingConfig(prompts_per_step=5, max_num_steps=100),
                      fleet=FleetConfig(shards=2),
                      router=GenerationRouterConfig(backend_timeout_s=60.0)),
        workload=Workload(prompts=_steady(start=0.0, every_s=10.0, count=40,
                                          turns=(_TURN, _TURN))),
        control=Control(weight_syncs=(WeightSync(at_s=100.0, duration_s=10.0),
                                      WeightSync(at_s=250.0, duration_s=10.0))),
        faults=Faults(refit_misses=(RefitMiss(shard=1, sync_index=2),)),
        fixes=MERGED)


def fleet_exhausted() -> Scenario:
    """P4: shards die one by one until fewer serve than min_healthy_shards.

    Source: NVIDIA-NeMo/RL #3590 (``raise_if_exhausted()`` -> "GenerationFleetExhausted (only N
    generation shard(s) serving, below min_healthy_shards=M ...)"; P4 in docs/domain/incidents.md).
    Numbers: four shards, min_healthy_shards=2, the merged system; a prompt every 5 s; shards 3, 2
    and 1 are killed at 100, 200 and 300 s; each is quarantined within ~15 s, and the third
    quarantine leaves one serving shard: GenerationFleetExhausted.
    """
    turn = Turn(model_s=8.0, tool_s=2.0, input_tokens=1024, output_tokens=512)
    return Scenario(
        name="fleet-exhausted", description=fleet_exhausted.__doc__ or "", horizon_s=500.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=120.0),
                      training=TrainingConfig(prompts_per_step=10, max_num_steps=100),
                      fleet=FleetConfig(shards=4, min_healthy_shards=2),
                      router=GenerationRouterConfig(backend_timeout_s=60.0)),
        workload=Workload(prompts=_steady(start=0.0, every_s=5.0, count=90,
                                          turns=(turn, turn))),
        faults=Faults(shard_kills=tuple(ShardKill(shard=s, at_s=t)
                                        for s, t in ((3, 100.0), (2, 200.0), (1, 300.0)))),
        fixes=MERGED)


def demo() -> Scenario:
    """A composite run for ``rolloutscope demo``: healthy stretches, then three incidents.

    Source: NVIDIA-NeMo/RL #3590 and #4266 together (P1, P3, P4 in docs/domain/incidents.md).
    Numbers (20 minutes, 240 generated prompts plus one long one, four shards on #3590's merged
    system, rollout_timeout_s=180 as in #4266): healthy until shard 3 is killed while serving at
    198 s and quarantined at the next probe tick (serving backends 4 -> 3); a long rollout arriving
    at 330 s parks at its turn boundary when snapshot 1 starts at 480 s, its deadline fires at
    510 s while parked, the snapshot commits at 540 s and the try finishes un-ACKed; the refit at 660 s
    broadcasts to the dead rank and hangs, admission stays shut, and the watchdog reports a stall
    with nothing in flight once stall_timeout_s=300 has passed. At 10x, each incident appears
    within a minute or two of wall time.
    """
    long_row = Row(turns=(Turn(model_s=120.0, tool_s=30.0, input_tokens=2048,
                               output_tokens=1024),
                          Turn(model_s=25.0, tool_s=5.0, input_tokens=3200, output_tokens=256)))
    return Scenario(
        name="demo", description=demo.__doc__ or "", horizon_s=1200.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=180.0),
                      checkpoint=CheckpointConfig(prepare_timeout_s=120.0),
                      watchdog=WatchdogConfig(interval_s=30.0, stall_timeout_s=300.0),
                      training=TrainingConfig(prompts_per_step=20, train_step_s=15.0,
                                              max_num_steps=50),
                      fleet=FleetConfig(shards=4),
                      router=GenerationRouterConfig(backend_timeout_s=120.0)),
        workload=Workload(
            prompts=(Prompt(idx=10_000, arrival_s=330.0, rows=(long_row,)),),
            generated=GeneratedPrompts(count=240, arrival_window_s=640.0, turns_min=2,
                                       turns_max=4, model_s_min=8.0, model_s_max=25.0,
                                       tool_s_min=2.0, tool_s_max=8.0, input_tokens=1024,
                                       output_tokens=512)),
        control=Control(snapshots=(SnapshotAttempt(at_s=480.0, commit_s=60.0),
                                   SnapshotAttempt(at_s=600.0, commit_s=2.0)),
                        weight_syncs=(WeightSync(at_s=150.0, duration_s=10.0),
                                      WeightSync(at_s=660.0, duration_s=10.0))),
        faults=Faults(shard_kills=(ShardKill(shard=3, at_s=198.0, state=KillState.SERVING),)),
        fixes=MERGED)
