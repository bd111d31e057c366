"""The built-in scenarios. Times are seconds from the start of the run."""

from __future__ import annotations

from rolloutscope.replay.scenario import (
    CheckpointConfig,
    Config,
    Control,
    ControllerSilence,
    Faults,
    GeneratedPrompts,
    Prompt,
    RolloutConfig,
    Row,
    RowRef,
    Scenario,
    SnapshotAttempt,
    TrainingConfig,
    Turn,
    WatchdogConfig,
    WeightSync,
    Workload,
)


def _rows(n: int, *turns: Turn) -> tuple[Row, ...]:
    return tuple(Row(turns=tuple(turns)) for _ in range(n))


def snapshot_outlasts_deadline() -> Scenario:
    """P1: a snapshot parks a rollout past its deadline; the finished try is never ACKed.

    Source: the incident write-up for NVIDIA-NeMo/RL #4266 ("a snapshot that outlasts a rollout's
    deadline"; P1 in docs/domain/incidents.md). Numbers: rollout_timeout_s=180 (#4266's functional
    test); the row parks at its turn boundary at 150 s when snapshot 1 starts; the snapshot's
    commit takes 60 s (commits and resumes at 210 s); the deadline fires at 180 s with try 0
    parked; try 1 starts when the fence reopens at 210 s; try 0 finishes at 240 s and nobody ACKs
    it; snapshot 2 at 450 s waits out prepare_timeout_s=300 (#4266's default) and fails at 750 s,
    and so do snapshots 3 and 4 (800 s and 1150 s).
    With ``pause-deadlines-during-snapshot`` the deadline is suspended 150-210 s, try 0 finishes
    at 240 s within its 180 s budget, is ACKed, and every later snapshot commits.
    """
    return Scenario(
        name="snapshot-outlasts-deadline", description=snapshot_outlasts_deadline.__doc__ or "",
        horizon_s=1500.0,
        config=Config(rollout=RolloutConfig(rollout_timeout_s=180.0),
                      checkpoint=CheckpointConfig(prepare_timeout_s=300.0),
                      watchdog=WatchdogConfig(interval_s=30.0, stall_timeout_s=600.0),
                      training=TrainingConfig(prompts_per_step=1, max_num_steps=1)),
        workload=Workload(prompts=(Prompt(idx=0, arrival_s=0.0, rows=_rows(
            1, Turn(model_s=120.0, tool_s=30.0, input_tokens=2048, output_tokens=1024),
            Turn(model_s=25.0, tool_s=5.0, input_tokens=3200, output_tokens=256))),)),
        control=Control(snapshots=(SnapshotAttempt(at_s=150.0, commit_s=60.0),
                                   SnapshotAttempt(at_s=450.0), SnapshotAttempt(at_s=800.0),
                                   SnapshotAttempt(at_s=1150.0))))


def lost_reply() -> Scenario:
    """P2: a row's finished reply never reaches RL; the un-ACKed result blocks every prepare.

    Source: NVIDIA-NeMo/RL #4266's incident write-up ("the lost-reply stall: RL never uses a
    finished reply"; P2 in docs/domain/incidents.md). Numbers: two rows per prompt (150 s each);
    row 1's reply is lost at 150 s, the stream ends short and RL re-dispatches the row
    (max_row_attempts=3); snapshots at 200, 550 and 900 s wait out prepare_timeout_s=300 and fail
    while the lost completion stays un-ACKed. With ``retire-then-adopt`` RL retires the missing
    row's attempt at 150 s, Gym refuses (the run completed), RL adopts and ACKs it, and every
    snapshot commits.
    """
    turn = Turn(model_s=40.0, tool_s=10.0, input_tokens=1024, output_tokens=512)
    return Scenario(
        name="lost-reply", description=lost_reply.__doc__ or "", horizon_s=1300.0,
        config=Config(rollout=RolloutConfig(num_generations_per_prompt=2),
                      checkpoint=CheckpointConfig(prepare_timeout_s=300.0),
                      training=TrainingConfig(prompts_per_step=1, max_num_steps=1)),
        workload=Workload(prompts=(Prompt(idx=0, arrival_s=0.0, rows=_rows(2, turn, turn, turn)),)),
        control=Control(snapshots=(SnapshotAttempt(at_s=200.0), SnapshotAttempt(at_s=550.0),
                                   SnapshotAttempt(at_s=900.0))),
        faults=Faults(lost_replies=(RowRef(prompt_idx=0, row_idx=1),)))


def prepare_blocked_by_streaming() -> Scenario:
    """P7: a response already streaming holds the model stage of prepare until its deadline.

    Source: NVIDIA-NeMo/Gym #3883 ("only a response already streaming blocks readiness"; P7 in
    docs/domain/incidents.md). Numbers: prepare_timeout_s=180 (the functional tests' value); row 0
    streams a 400 s response from 105 s (first chunk at 110 s); snapshot 1 at 150 s stops at stage
    ``model`` at 330 s. Meanwhile row 1 issues a call at 150 s into closed admission: the older
    gate answers 409 admission_closed (a 4xx: a data failure for RL), the newer gate
    (``calls-wait-at-closed-admission``) lets it wait until resume at 330 s. Snapshot 2 at 800 s.
    """
    stream = Turn(model_s=400.0, streaming=True, first_chunk_s=5.0, input_tokens=4096,
                  output_tokens=8192)
    short = Turn(model_s=20.0, tool_s=30.0, input_tokens=1024, output_tokens=512)
    rows = (Row(turns=(Turn(model_s=90.0, tool_s=15.0), stream)), Row(turns=(short,) * 8))
    return Scenario(
        name="prepare-blocked-by-streaming", description=prepare_blocked_by_streaming.__doc__ or "",
        horizon_s=1200.0,
        config=Config(rollout=RolloutConfig(num_generations_per_prompt=2),
                      checkpoint=CheckpointConfig(prepare_timeout_s=180.0),
                      training=TrainingConfig(prompts_per_step=1, max_num_steps=1)),
        workload=Workload(prompts=(Prompt(idx=0, arrival_s=0.0, rows=rows),)),
        control=Control(snapshots=(SnapshotAttempt(at_s=150.0), SnapshotAttempt(at_s=800.0))))


def worker_lost_in_commit() -> Scenario:
    """P8: a policy worker lost after readiness makes the commit fail with export_failed.

    Source: NVIDIA-NeMo/Gym #3883 (multi-worker policy server: "a worker that disconnects after the
    commit checked readiness and before the snapshot fails the commit, and a retried commit fails
    the same way"; P8 in docs/domain/incidents.md). Numbers: 2 policy workers (as in #3883's scale
    runs); snapshot 1 at 50 s is ready at 60 s, loses worker 1 in its commit and fails, and its
    retried commit gets the same final answer; snapshot 2 at 200 s commits with the remaining
    worker (restore stays refused on that server until it restarts).
    """
    turn = Turn(model_s=40.0, tool_s=20.0, input_tokens=1024, output_tokens=512)
    return Scenario(
        name="worker-lost-in-commit", description=worker_lost_in_commit.__doc__ or "",
        horizon_s=600.0,
        config=Config(rollout=RolloutConfig(num_generations_per_prompt=4, rollout_timeout_s=500.0),
                      checkpoint=CheckpointConfig(policy_workers=2, generation_cuts=True),
                      training=TrainingConfig(prompts_per_step=1, max_num_steps=1)),
        workload=Workload(prompts=(Prompt(idx=0, arrival_s=0.0, rows=_rows(4, *(turn,) * 5)),)),
        control=Control(snapshots=(SnapshotAttempt(at_s=50.0, commit_s=0.6),
                                   SnapshotAttempt(at_s=200.0, commit_s=0.6))),
        faults=Faults(worker_lost_in_commit=(1,)))


def lease_expiry() -> Scenario:
    """P9: the controller goes silent mid-checkpoint; participants self-resume at lease expiry.

    Source: the draft checkpoint stack NVIDIA-NeMo/Gym #3882 ... #4197 (lease = deadline_ts +
    lease_grace_seconds, default 600 s; if the controller goes silent, the participant resumes on
    its own; P9 in docs/domain/incidents.md). Numbers: snapshot 1 at 100 s prepares at once
    (deadline_ts = 100 + prepare_timeout_s 300 = 400 s); the controller then stays silent for 1000
    s; every participant's lease expires at 1000 s and it resumes on its own; the controller's
    commit at 1100 s is refused (stale_checkpoint). The
    stall watchdog (stall_timeout_s=600) reports the stall from 630 s while work remains.
    """
    turn = Turn(model_s=60.0, tool_s=20.0, input_tokens=1024, output_tokens=512)
    return Scenario(
        name="lease-expiry", description=lease_expiry.__doc__ or "", horizon_s=1900.0,
        config=Config(rollout=RolloutConfig(num_generations_per_prompt=2),
                      checkpoint=CheckpointConfig(prepare_timeout_s=300.0, lease_grace_s=600.0),
                      training=TrainingConfig(prompts_per_step=1, max_num_steps=1)),
        workload=Workload(prompts=(Prompt(idx=0, arrival_s=0.0, rows=_rows(2, *(turn,) * 10)),)),
        control=Control(snapshots=(SnapshotAttempt(at_s=100.0),)),
        faults=Faults(controller_silences=(ControllerSilence(snapshot_index=1,
                                                             duration_s=1000.0),)))


def healthy_baseline() -> Scenario:
    """A healthy run: snapshots commit, a colocated refit pauses deadlines, nothing incident-like.

    Source: docs/domain/checkpoint-protocol.md (the protocol working as designed) and
    docs/domain/rollouts-and-deadlines.md#the-deadline-registry (the colocated training switch is
    the one holder RL's registry already had). Numbers: 6 prompts of 2 rows, rollout_timeout_s=600,
    snapshots at 100, 400 and 700 s committing in 2 s, a 20 s colocated weight sync at 250 s, 3
    train steps of 2 prompt groups each.
    """
    def row(model_s: float, turns: int) -> Row:
        return Row(turns=tuple(Turn(model_s=model_s + 5 * k, tool_s=10.0, input_tokens=1024,
                                    output_tokens=512) for k in range(turns)))
    prompts = tuple(Prompt(idx=i, arrival_s=at, rows=(row(30.0 + 5 * i, 3), row(40.0, 4)))
                    for i, at in enumerate((0.0, 20.0, 40.0, 60.0, 300.0, 320.0)))
    return Scenario(
        name="healthy-baseline", description=healthy_baseline.__doc__ or "", horizon_s=900.0,
        config=Config(rollout=RolloutConfig(num_generations_per_prompt=2, rollout_timeout_s=600.0),
                      checkpoint=CheckpointConfig(prepare_timeout_s=300.0),
                      watchdog=WatchdogConfig(interval_s=30.0, stall_timeout_s=700.0),
                      training=TrainingConfig(prompts_per_step=2, train_step_s=15.0,
                                              max_num_steps=3)),
        workload=Workload(prompts=prompts),
        control=Control(snapshots=tuple(SnapshotAttempt(at_s=t, commit_s=2.0)
                                        for t in (100.0, 400.0, 700.0)),
                        weight_syncs=(WeightSync(at_s=250.0, duration_s=20.0),)))


def scale_16k() -> Scenario:
    """16,000 rollouts, most of them in flight at each checkpoint.

    Source: NVIDIA-NeMo/Gym #3883's scale table (16,000 rollouts on 2 policy workers, 14,320 and
    12,228 in flight at the checkpoint; commit 4.64 s; P7 in docs/domain/incidents.md) and the
    scale of a real run (16k concurrent rollouts, several model calls each, checkpoints every few
    minutes). Numbers: 2,000 prompts x 8 rows arriving over 300 s, 4-8 turns of 60-240 s
    generations and 10-90 s tool steps,
    generation cuts on, snapshots every 600 s committing in 4.64 s, rollout_timeout_s=5400.
    """
    return Scenario(
        name="scale-16k", description=scale_16k.__doc__ or "", horizon_s=3600.0,
        config=Config(rollout=RolloutConfig(num_generations_per_prompt=8,
                                            rollout_timeout_s=5400.0),
                      checkpoint=CheckpointConfig(prepare_timeout_s=300.0, policy_workers=2,
                                                  generation_cuts=True),
                      watchdog=WatchdogConfig(interval_s=30.0, stall_timeout_s=7200.0),
                      training=TrainingConfig(prompts_per_step=250, train_step_s=60.0,
                                              max_num_steps=8)),
        workload=Workload(generated=GeneratedPrompts(
            count=2000, arrival_window_s=300.0, turns_min=4, turns_max=8, model_s_min=60.0,
            model_s_max=240.0, tool_s_min=10.0, tool_s_max=90.0, input_tokens=2048,
            output_tokens=1024)),
        control=Control(snapshots=tuple(SnapshotAttempt(at_s=600.0 * k, commit_s=4.64)
                                        for k in range(1, 6))))
