"""The RL snapshot transaction (``_prepare_and_commit_gym_checkpoint``, DOMAIN.md §2.8).

Close the Gym admission fence, flush ACKs, prepare stage by stage with a deadline, commit (the
export and write take the attempt's ``commit_s``), publish, then resume (or abort) and reopen
the fence. Attempts that come due while one runs wait for it. Participant notes (admission
closed or reopened, lease expired, refusals) become spans here, whoever caused them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Status, StatusCode

from rolloutscope.vocabulary import (
    Attr,
    ErrorCode,
    EventName,
    OpOutcome,
    ParticipantKind,
    SnapshotOutcome,
    SpanName,
)
from rolloutscope.replay.engine import Priority, Timer
from rolloutscope.replay.participants.agent import CompletionReceipt
from rolloutscope.replay.participants.coordinator import PrepareProgress
from rolloutscope.replay.participants.environment import ResourcesParticipant
from rolloutscope.replay.participants.model import ModelParticipant
from rolloutscope.replay.participants.protocol import (
    EpisodeId,
    NoteKind,
    Participant,
    Reply,
)
from rolloutscope.replay.scenario import SnapshotAttempt
from rolloutscope.replay.sim import services

if TYPE_CHECKING:
    from rolloutscope.replay.sim.world import World

_COUNT_ATTRS = {
    "inflight": Attr.CK_COUNT_INFLIGHT, "held": Attr.CK_COUNT_HELD, "cut": Attr.CK_COUNT_CUT,
    "cut_failed": Attr.CK_COUNT_CUT_FAILED, "cut_skipped": Attr.CK_COUNT_CUT_SKIPPED,
    "running": Attr.CK_COUNT_RUNNING, "parked_with_boundary": Attr.CK_COUNT_PARKED_WITH_BOUNDARY,
    "parked_without_boundary": Attr.CK_COUNT_PARKED_WITHOUT_BOUNDARY,
    "completed_unacknowledged": Attr.CK_COUNT_COMPLETED_UNACKED,
}


def service_of(p: Participant) -> str:
    return {ParticipantKind.ENVIRONMENT: services.ENVIRONMENT, ParticipantKind.MODEL:
            services.MODEL, ParticipantKind.AGENT: services.AGENT,
            ParticipantKind.RESOURCES: services.RESOURCES}[p.kind]


class _Attempt:
    __slots__ = ("index", "spec", "checkpoint_id", "span", "step_span", "coord_span",
                 "stage_spans", "op_spans", "deadline_ts", "deadline_timer", "outcome")

    def __init__(self, index: int, spec: SnapshotAttempt, checkpoint_id: str) -> None:
        self.index, self.spec, self.checkpoint_id = index, spec, checkpoint_id
        self.span: Any = None
        self.step_span: Any = None  # the current rl.rollout_snapshot.* child
        self.coord_span: Any = None
        self.stage_spans: dict[ParticipantKind, Any] = {}
        self.op_spans: dict[str, tuple[Any, float]] = {}
        self.deadline_ts = 0.0
        self.deadline_timer: Timer | None = None
        self.outcome = SnapshotOutcome.FAILED


class SnapshotProcess:
    def __init__(self, world: World) -> None:
        self.w = world
        self.current: _Attempt | None = None
        self.preparing = False
        self.skipped = 0
        self._open: dict[str, Any] = {}  # participant instance -> its gym.checkpoint.open span
        self._lease_timers: dict[str, tuple[float, Timer]] = {}
        faults = world.scenario.faults
        self._worker_lost = set(faults.worker_lost_in_commit)
        self._silences = {s.snapshot_index: s.duration_s for s in faults.controller_silences}
        self.outcomes: list[SnapshotOutcome] = []

    def schedule(self) -> None:
        for i, spec in enumerate(self.w.scenario.control.snapshots, 1):
            self.w.sched.at(spec.at_s, self.request, i, spec, priority=Priority.CONTROL)

    def request(self, index: int, spec: SnapshotAttempt) -> None:
        # RL's snapshot loop is one task: an attempt that comes due while another runs is
        # skipped, not queued (starting it the instant the other released would close admission
        # again before any released run could take a step)
        if self.current is not None:
            self.skipped += 1
        else:
            self._start(index, spec)

    # -- participant notes -> spans -------------------------------------------------------------
    def drain_notes(self, parent: Any = None) -> None:
        w = self.w
        for p in w.coordinator.all():
            for note in p.drain_notes():
                span = self._open.get(p.instance)
                if note.kind is NoteKind.ADMISSION_CLOSED:
                    self._open[p.instance] = w.tel.start(service_of(p), SpanName.CK_OPEN,
                                                         note.at, self._p_attrs(p, note.checkpoint_id),
                                                         parent)
                    w.tel.event(self._open[p.instance], EventName.CK_ADMISSION_CLOSED, note.at)
                    if p.kind is ParticipantKind.AGENT:
                        w.gym.on_park_requested()
                elif note.kind is NoteKind.ADMISSION_OPENED:
                    if span is not None:
                        w.tel.event(span, EventName.CK_ADMISSION_OPENED, note.at)
                        w.tel.end(span, note.at)
                        del self._open[p.instance]
                    if p.kind is ParticipantKind.AGENT:
                        w.gym.on_agent_released(p.released)
                    elif isinstance(p, ModelParticipant):
                        w.gym.on_model_reopened(p.delivered, p.admitted)
                    elif isinstance(p, ResourcesParticipant):
                        w.gym.on_tools_reopened()
                elif span is not None:
                    if note.kind is NoteKind.LEASE_EXPIRED:
                        w.tel.event(span, EventName.CK_LEASE_EXPIRED, note.at,
                                    {Attr.CK_PHASE: note.detail})
                    elif note.kind is NoteKind.PHASE_CHANGED:
                        src, _, dst = note.detail.partition("->")
                        w.tel.event(span, EventName.CK_PHASE_CHANGED, note.at,
                                    {Attr.CK_PHASE_FROM: src, Attr.CK_PHASE_TO: dst})
                    elif note.code is not None:
                        w.tel.event(span, EventName.CK_REFUSED, note.at,
                                    {Attr.CK_CODE: note.code.value})
        self._arm_leases()

    def _arm_leases(self) -> None:
        for p in self.w.coordinator.all():
            armed = self._lease_timers.get(p.instance)
            if p.lease_expires_at is None:
                if armed is not None:
                    armed[1].cancel()
                    del self._lease_timers[p.instance]
                continue
            if armed is not None and armed[0] == p.lease_expires_at:
                continue
            if armed is not None:
                armed[1].cancel()
            timer = self.w.sched.at(p.lease_expires_at, self._lease_check, p,
                                    priority=Priority.CONTROL)
            self._lease_timers[p.instance] = (p.lease_expires_at, timer)

    def _lease_check(self, p: Participant) -> None:
        self._lease_timers.pop(p.instance, None)
        if p.tick():
            self.drain_notes()

    @staticmethod
    def _p_attrs(p: Participant, checkpoint_id: str | None) -> dict[str, Any]:
        return {Attr.CHECKPOINT_ID: checkpoint_id or "", Attr.CK_PARTICIPANT_KIND: p.kind.value,
                Attr.CK_INSTANCE: p.instance}

    def _reply_attrs(self, p: Participant, reply: Reply) -> dict[str, Any]:
        attrs: dict[str, Any] = {Attr.CK_OUTCOME: (OpOutcome.OK if reply.ok
                                                   else OpOutcome.ERROR).value,
                                 Attr.CK_PHASE: p.phase.value}
        if reply.code is not None:
            attrs[Attr.CK_CODE] = reply.code.value
        return attrs

    # -- the transaction ------------------------------------------------------------------------
    def _step(self, a: _Attempt, name: str) -> Any:
        w = self.w
        if a.step_span is not None:
            w.tel.end(a.step_span, w.now)
        a.step_span = w.tel.start(services.CONTROLLER, name, w.now,
                                  {Attr.CHECKPOINT_ID: a.checkpoint_id}, a.span)
        return a.step_span

    def _start(self, index: int, spec: SnapshotAttempt) -> None:
        w = self.w
        ck = f"rollout-step-{w.controller.train_steps}-snapshot-{index}"
        a = self.current = _Attempt(index, spec, ck)
        a.span = w.tel.start(services.CONTROLLER, SpanName.RL_SNAPSHOT, w.now, {
            Attr.CHECKPOINT_ID: ck, Attr.SNAPSHOT_INDEX: index})
        w.controller.close_gym_fence(ck, a.span)
        w.controller.flush_acks(self._step(a, SpanName.RL_SNAPSHOT_FLUSH_ACKS))
        prep = self._step(a, SpanName.RL_SNAPSHOT_PREPARE)
        a.deadline_ts = w.now + w.scenario.config.checkpoint.prepare_timeout_s
        a.coord_span = w.tel.start(services.CONTROLLER, SpanName.CK_COORDINATE_PREPARE, w.now, {
            Attr.CHECKPOINT_ID: ck, Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value,
            Attr.CK_DEADLINE_TS: a.deadline_ts}, prep)
        self.preparing = True
        a.deadline_timer = w.sched.at(a.deadline_ts, self.poke, priority=Priority.CONTROL)
        self._progress(a, w.coordinator.begin_prepare(ck, a.deadline_ts))

    def poke(self) -> None:
        """Something a prepare may be waiting on changed (or its deadline came)."""
        a = self.current
        if self.preparing and a is not None:
            self._progress(a, self.w.coordinator.advance_prepare())

    def _progress(self, a: _Attempt, progress: PrepareProgress) -> None:
        w = self.w
        for ev in progress.events:
            group = w.coordinator.participants[ev.kind]
            if ev.started:
                stage = a.stage_spans[ev.kind] = w.tel.start(
                    services.CONTROLLER, f"{SpanName.CK_COORDINATE_PREPARE}.{ev.kind.value}",
                    ev.at, {Attr.CHECKPOINT_ID: a.checkpoint_id,
                            Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value}, a.coord_span)
                for p in group:
                    a.op_spans[p.instance] = (w.tel.start(
                        service_of(p), SpanName.CK_PREPARE, ev.at,
                        self._p_attrs(p, a.checkpoint_id), stage), ev.at)
                self.drain_notes(stage)
            else:
                for p in group:
                    self._end_prepare_op(a, p, ev.prepared, ev.at)
                w.tel.end(a.stage_spans.pop(ev.kind), ev.at, {Attr.CK_PREPARED: ev.prepared})
        self.drain_notes()
        if not progress.done:
            if any(ev.started for ev in progress.events):
                # the stage that just began may be ready already: parking its runs happened
                # while its notes were drained, after the coordinator last polled it
                self._progress(a, self.w.coordinator.advance_prepare())
            return
        self.preparing = False
        if a.deadline_timer is not None:
            a.deadline_timer.cancel()
        stopped = progress.stopped_at.value if progress.stopped_at else ""
        attrs = {Attr.CK_PREPARED: progress.prepared, Attr.CK_OUTCOME:
                 (OpOutcome.OK if progress.prepared else OpOutcome.ERROR).value}
        if not progress.prepared:
            attrs[Attr.CK_STOPPED_AT] = stopped
            attrs[Attr.CK_CODE] = ErrorCode.DEADLINE_EXCEEDED.value
            a.coord_span.set_status(Status(StatusCode.ERROR, "returned an incomplete cut"))
        w.tel.end(a.coord_span, w.now, attrs)
        if progress.prepared:
            silence = self._silences.get(a.index)
            if silence:  # the controller goes quiet; participants' leases keep counting
                w.sched.after(silence, self._commit, a, priority=Priority.CONTROL)
            else:
                self._commit(a)
        else:
            a.outcome = SnapshotOutcome.FAILED
            self._release(a)

    def _end_prepare_op(self, a: _Attempt, p: Participant, prepared: bool, at: float) -> None:
        w = self.w
        span, started = a.op_spans.pop(p.instance)
        report = p.report()
        attrs = self._p_attrs(p, a.checkpoint_id)
        attrs.update({Attr.CK_OUTCOME: (OpOutcome.OK if prepared else OpOutcome.ERROR).value,
                      Attr.CK_PHASE: p.phase.value, Attr.CK_BLOCKERS: report.blocker_count,
                      Attr.CK_BLOCKER_COUNT: report.blocker_count})
        if report.blockers:
            attrs[Attr.CK_BLOCKER_KEYS] = list(report.blockers)
        for k, v in report.counts.items():
            if k in _COUNT_ATTRS:
                attrs[_COUNT_ATTRS[k]] = v
        if not prepared:
            attrs[Attr.CK_CODE] = ErrorCode.DEADLINE_EXCEEDED.value
            w.tel.event(span, EventName.CK_PREPARE_NOT_READY, at,
                        {Attr.CK_BLOCKER_KEYS: list(report.blockers)})
            span.set_status(Status(StatusCode.ERROR, "prepare not ready by its deadline"))
        if at > started:
            wait = w.tel.start(service_of(p), SpanName.CK_WAIT_READY, started,
                               self._p_attrs(p, a.checkpoint_id), span)
            w.tel.end(wait, at, {Attr.CK_OUTCOME: attrs[Attr.CK_OUTCOME]})
        w.tel.end(span, at, attrs)

    def _commit(self, a: _Attempt, retry: bool = False) -> None:
        w = self.w
        step = self._step(a, SpanName.RL_SNAPSHOT_COMMIT) if not retry else a.step_span
        coord = w.tel.start(services.CONTROLLER, SpanName.CK_COORDINATE_COMMIT, w.now, {
            Attr.CHECKPOINT_ID: a.checkpoint_id,
            Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value}, step)
        model = w.model
        if a.index in self._worker_lost and not retry and model.live_workers:
            # lost after the commit checked readiness, before the snapshots are collected
            worker = max(model.live_workers)
            w.gym.fail_calls(model.lose_worker(worker), 502)
            w.tel.event(coord, EventName.CK_WORKER_LOST, w.now, {Attr.CK_INSTANCE: f"worker-{worker}"})
        deadline_ts = w.now + w.scenario.config.checkpoint.prepare_timeout_s
        fan = w.coordinator.commit(a.checkpoint_id, deadline_ts)
        duration = 0.0 if retry else a.spec.commit_s
        spans = []
        for p, reply in fan.replies:
            attrs = {**self._p_attrs(p, a.checkpoint_id), **self._reply_attrs(p, reply)}
            if isinstance(p, ModelParticipant):
                attrs[Attr.CK_WORKERS_EXPECTED] = p.workers
                attrs[Attr.CK_WORKERS_ACKED] = p.workers_acknowledged()
            span = w.tel.start(service_of(p), SpanName.CK_COMMIT, w.now, attrs, coord)
            if not reply.ok:
                span.set_status(Status(StatusCode.ERROR, reply.detail))
            spans.append(span)
        self.drain_notes()
        w.sched.after(duration, self._committed, a, fan.ok, coord, spans, retry,
                      priority=Priority.CONTROL)

    def _committed(self, a: _Attempt, ok: bool, coord: Any, spans: list[Any],
                   retry: bool) -> None:
        w = self.w
        for span in spans:
            w.tel.end(span, w.now)
        if not ok:
            coord.set_status(Status(StatusCode.ERROR, "commit failed"))
        w.tel.end(coord, w.now, {Attr.CK_OUTCOME: (OpOutcome.OK if ok else OpOutcome.ERROR).value})
        if ok:
            w.tel.end(self._step(a, SpanName.RL_SNAPSHOT_PUBLISH), w.now)
            a.step_span = None
            a.outcome = SnapshotOutcome.PUBLISHED
            self._release(a)
        elif not retry:  # a retried commit gets the same (idempotent) answer
            self._commit(a, retry=True)
        else:
            a.outcome = SnapshotOutcome.FAILED
            self._release(a)

    def _release(self, a: _Attempt) -> None:
        w = self.w
        step = self._step(a, SpanName.RL_SNAPSHOT_RELEASE)
        coord = w.tel.start(services.CONTROLLER, SpanName.CK_COORDINATE_RESUME, w.now, {
            Attr.CHECKPOINT_ID: a.checkpoint_id,
            Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value}, step)
        fan = w.coordinator.resume(a.checkpoint_id)
        for p, reply in fan.replies:
            w.tel.instant(service_of(p), SpanName.CK_RESUME, w.now,
                          {**self._p_attrs(p, a.checkpoint_id), **self._reply_attrs(p, reply)},
                          coord)
        self.drain_notes(coord)
        w.tel.end(coord, w.now, {Attr.CK_OUTCOME: OpOutcome.OK.value})
        w.tel.end(step, w.now)
        a.step_span = None
        w.controller.open_gym_fence()
        if a.outcome is not SnapshotOutcome.PUBLISHED:
            a.span.set_status(Status(StatusCode.ERROR, f"snapshot {a.outcome.value}"))
        w.tel.end(a.span, w.now, {Attr.SNAPSHOT_OUTCOME: a.outcome.value})
        self.outcomes.append(a.outcome)
        self.current = None

    # -- retire (for the controller's retire-then-adopt) -----------------------------------------
    def coordinate_retire(self, episodes: tuple[EpisodeId, ...]
                          ) -> list[CompletionReceipt] | None:
        """Retire ``episodes`` everywhere; None if a checkpoint holds the participants.
        Returns the receipts of runs that had already completed (a finished run is refused)."""
        w = self.w
        if w.agent.phase.value not in ("idle", "restored"):
            return None
        coord = w.tel.start(services.CONTROLLER, SpanName.CK_COORDINATE_RETIRE, w.now, {
            Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value,
            Attr.CK_EPISODES: len(episodes)})
        fan = w.coordinator.retire(episodes)
        receipts: list[CompletionReceipt] = []
        for p, reply in fan.replies:
            attrs = {**self._p_attrs(p, None), **self._reply_attrs(p, reply),
                     Attr.CK_EPISODES: len(episodes)}
            w.tel.instant(service_of(p), SpanName.CK_RETIRE, w.now, attrs, coord)
            if p.kind is ParticipantKind.AGENT and reply.ok:
                w.gym.retired(reply.extra.get("retired", ()))
                receipts.extend(reply.extra.get("receipts", ()))
        self.drain_notes()
        w.tel.end(coord, w.now, {Attr.CK_OUTCOME: (OpOutcome.OK if fan.ok
                                                   else OpOutcome.ERROR).value})
        return receipts

