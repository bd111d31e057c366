"""The RL snapshot transaction (``_prepare_and_commit_gym_checkpoint``).

Close the Gym admission fence, flush ACKs, prepare stage by stage with a deadline, commit (the
export and write take the attempt's ``commit_s``), publish, then resume (or abort) and reopen
the fence. An attempt that comes due while one runs is skipped. Participant notes become spans
and Gym hooks through ``ParticipantNotes``, whoever caused them.
"""

from __future__ import annotations

from rolloutscope.vocabulary import SnapshotOutcome, SpanName
from rolloutscope.replay.event_engine import Priority, Timer
from rolloutscope.replay.participants.coordinator import PrepareProgress
from rolloutscope.replay.scenario import CheckpointConfig, Faults, SnapshotAttempt
from rolloutscope.replay.sim.ports import (
    ControllerForSnapshot,
    Coordinator,
    GymForCheckpoint,
    NoteDrain,
    PolicyWorkers,
    Timeline,
)
from rolloutscope.replay.sim.signals import PrepareWatch
from rolloutscope.replay.sim.snapshot_recorder import SnapshotRecorder

# what a policy call that died with its worker answers
WORKER_LOST_STATUS = 502


class _Attempt:
    __slots__ = ("index", "spec", "checkpoint_id", "deadline_ts", "deadline_timer", "outcome")

    def __init__(self, index: int, spec: SnapshotAttempt, checkpoint_id: str) -> None:
        self.index, self.spec, self.checkpoint_id = index, spec, checkpoint_id
        self.deadline_ts = 0.0
        self.deadline_timer: Timer | None = None
        self.outcome = SnapshotOutcome.FAILED


class SnapshotProcess:
    def __init__(self, *, attempts: tuple[SnapshotAttempt, ...], checkpoint: CheckpointConfig,
                 faults: Faults, timeline: Timeline, coordinator: Coordinator,
                 workers: PolicyWorkers, gym: GymForCheckpoint,
                 controller: ControllerForSnapshot, notes: NoteDrain, prepare: PrepareWatch,
                 recorder: SnapshotRecorder) -> None:
        self._attempts = attempts
        self._prepare_timeout_s = checkpoint.prepare_timeout_s
        self._timeline = timeline
        self._coordinator = coordinator
        self._workers = workers
        self._gym = gym
        self._controller = controller
        self._notes = notes
        self._prepare = prepare
        self._rec = recorder
        prepare.watched_by(self.poke)
        self.current: _Attempt | None = None
        self.skipped = 0
        self._worker_lost = set(faults.worker_lost_in_commit)
        self._silences = {s.snapshot_index: s.duration_s for s in faults.controller_silences}
        self.outcomes: list[SnapshotOutcome] = []

    @property
    def preparing(self) -> bool:
        return self._prepare.preparing

    def schedule(self) -> None:
        for i, spec in enumerate(self._attempts, 1):
            self._timeline.at(spec.at_s, self.request, i, spec, priority=Priority.CONTROL)

    def request(self, index: int, spec: SnapshotAttempt) -> None:
        # RL's snapshot loop is one task: an attempt that comes due while another runs is
        # skipped, not queued (starting it the instant the other released would close admission
        # again before any released run could take a step)
        if self.current is not None:
            self.skipped += 1
        else:
            self._start(index, spec)

    # -- the transaction ------------------------------------------------------------------------
    def _start(self, index: int, spec: SnapshotAttempt) -> None:
        ck = f"rollout-step-{self._controller.train_steps}-snapshot-{index}"
        a = self.current = _Attempt(index, spec, ck)
        span = self._rec.attempt_started(ck, index)
        self._controller.close_gym_fence(ck, span)
        self._controller.flush_acks(self._rec.step(SpanName.RL_SNAPSHOT_FLUSH_ACKS))
        a.deadline_ts = self._timeline.now + self._prepare_timeout_s
        self._rec.prepare_started(a.deadline_ts)
        self._prepare.preparing = True
        a.deadline_timer = self._timeline.at(a.deadline_ts, self.poke, priority=Priority.CONTROL)
        self._progress(a, self._coordinator.begin_prepare(ck, a.deadline_ts))

    def poke(self) -> None:
        """Something a prepare may be waiting on changed (or its deadline came)."""
        a = self.current
        if self._prepare.preparing and a is not None:
            self._progress(a, self._coordinator.advance_prepare())

    def _progress(self, a: _Attempt, progress: PrepareProgress) -> None:
        for ev in progress.events:
            group = self._coordinator.participants[ev.kind]
            if ev.started:
                self._notes.drain(self._rec.stage_started(ev.kind, ev.at, group))
            else:
                self._rec.stage_ended(ev.kind, ev.at, ev.prepared, group)
        self._notes.drain()
        if not progress.done:
            if any(ev.started for ev in progress.events):
                # the stage that just began may be ready already: parking its runs happened
                # while its notes were drained, after the coordinator last polled it
                self._progress(a, self._coordinator.advance_prepare())
            return
        self._prepare.preparing = False
        if a.deadline_timer is not None:
            a.deadline_timer.cancel()
        self._rec.prepare_ended(progress)
        if progress.prepared:
            silence = self._silences.get(a.index)
            if silence:  # the controller goes quiet; participants' leases keep counting
                self._timeline.after(silence, self._commit, a, priority=Priority.CONTROL)
            else:
                self._commit(a)
        else:
            a.outcome = SnapshotOutcome.FAILED
            self._release(a)

    def _commit(self, a: _Attempt, retry: bool = False) -> None:
        self._rec.commit_started(retry=retry)
        workers = self._workers
        if a.index in self._worker_lost and not retry and workers.live_workers:
            # lost after the commit checked readiness, before the snapshots are collected
            worker = max(workers.live_workers)
            self._gym.fail_calls(workers.lose_worker(worker), WORKER_LOST_STATUS)
            self._rec.worker_lost(worker)
        deadline_ts = self._timeline.now + self._prepare_timeout_s
        fan = self._coordinator.commit(a.checkpoint_id, deadline_ts)
        duration = 0.0 if retry else a.spec.commit_s
        self._rec.commit_replied(fan)
        self._notes.drain()
        self._timeline.after(duration, self._committed, a, fan.ok, retry,
                             priority=Priority.CONTROL)

    def _committed(self, a: _Attempt, ok: bool, retry: bool) -> None:
        self._rec.commit_ended(ok)
        if ok:
            self._rec.published()
            a.outcome = SnapshotOutcome.PUBLISHED
            self._release(a)
        elif not retry:  # a retried commit gets the same (idempotent) answer
            self._commit(a, retry=True)
        else:
            a.outcome = SnapshotOutcome.FAILED
            self._release(a)

    def _release(self, a: _Attempt) -> None:
        handle = self._rec.resume_started()
        fan = self._coordinator.resume(a.checkpoint_id)
        self._rec.resumed(fan)
        self._notes.drain(handle)
        self._rec.resume_ended()
        self._controller.open_gym_fence()
        self._rec.attempt_ended(a.outcome)
        self.outcomes.append(a.outcome)
        self.current = None
