"""The checkpoint telemetry: RL's snapshot transaction (``rl.rollout_snapshot`` and its steps,
the coordinated prepare, commit, resume and retire) and each Gym participant's operations and
admission windows, as live NeMo-RL and NeMo-Gym emit them.

One snapshot attempt runs at a time (the snapshot loop skips an attempt that comes due while one
runs), so the recorder keeps the open spans of the current attempt itself.
"""

from __future__ import annotations

from typing import Any

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
from rolloutscope.replay.participants.coordinator import FanOut, PrepareProgress
from rolloutscope.replay.participants.model import ModelParticipant
from rolloutscope.replay.participants.protocol import Note, NoteKind, Participant, Reply
from rolloutscope.replay.sim import services
from rolloutscope.replay.sim.ports import Timeline
from rolloutscope.replay.telemetry import Telemetry

_COUNT_ATTRS = {
    "inflight": Attr.CK_COUNT_INFLIGHT, "held": Attr.CK_COUNT_HELD, "cut": Attr.CK_COUNT_CUT,
    "cut_failed": Attr.CK_COUNT_CUT_FAILED, "cut_skipped": Attr.CK_COUNT_CUT_SKIPPED,
    "running": Attr.CK_COUNT_RUNNING, "parked_with_boundary": Attr.CK_COUNT_PARKED_WITH_BOUNDARY,
    "parked_without_boundary": Attr.CK_COUNT_PARKED_WITHOUT_BOUNDARY,
    "completed_unacknowledged": Attr.CK_COUNT_COMPLETED_UNACKED,
}
_SERVICES = {ParticipantKind.ENVIRONMENT: services.ENVIRONMENT,
             ParticipantKind.MODEL: services.MODEL, ParticipantKind.AGENT: services.AGENT,
             ParticipantKind.RESOURCES: services.RESOURCES}
_CONTROLLER = services.CONTROLLER


def service_of(p: Participant) -> str:
    return _SERVICES[p.kind]


def _p_attrs(p: Participant, checkpoint_id: str | None) -> dict[str, Any]:
    return {Attr.CHECKPOINT_ID: checkpoint_id or "", Attr.CK_PARTICIPANT_KIND: p.kind.value,
            Attr.CK_INSTANCE: p.instance}


def _reply_attrs(p: Participant, reply: Reply) -> dict[str, Any]:
    attrs: dict[str, Any] = {Attr.CK_OUTCOME: (OpOutcome.OK if reply.ok
                                               else OpOutcome.ERROR).value,
                             Attr.CK_PHASE: p.phase.value}
    if reply.code is not None:
        attrs[Attr.CK_CODE] = reply.code.value
    return attrs


def _outcome(ok: bool) -> str:
    return (OpOutcome.OK if ok else OpOutcome.ERROR).value


class SnapshotRecorder:
    def __init__(self, *, tel: Telemetry, timeline: Timeline) -> None:
        self._tel = tel
        self._timeline = timeline
        self._open: dict[str, Any] = {}  # participant instance -> its gym.checkpoint.open span
        # the current attempt's open spans
        self._ck = ""
        self._span: Any = None
        self._step: Any = None  # the current rl.rollout_snapshot.* child
        self._coord: Any = None
        self._stages: dict[ParticipantKind, Any] = {}
        self._ops: dict[str, tuple[Any, float]] = {}  # instance -> (its prepare span, start)
        self._commit_spans: list[Any] = []

    # -- participant notes ------------------------------------------------------------------------
    def admission_closed(self, p: Participant, note: Note, parent: Any) -> None:
        span = self._open[p.instance] = self._tel.start(
            service_of(p), SpanName.CK_OPEN, note.at, _p_attrs(p, note.checkpoint_id), parent)
        self._tel.event(span, EventName.CK_ADMISSION_CLOSED, note.at)

    def admission_opened(self, p: Participant, note: Note) -> None:
        span = self._open.pop(p.instance, None)
        if span is not None:
            self._tel.event(span, EventName.CK_ADMISSION_OPENED, note.at)
            self._tel.end(span, note.at)

    def participant_noted(self, p: Participant, note: Note) -> None:
        """A lease expiry, a phase change or a refusal inside an admission window."""
        span = self._open.get(p.instance)
        if span is None:
            return
        if note.kind is NoteKind.LEASE_EXPIRED:
            self._tel.event(span, EventName.CK_LEASE_EXPIRED, note.at,
                            {Attr.CK_PHASE: note.detail})
        elif note.kind is NoteKind.PHASE_CHANGED:
            src, _, dst = note.detail.partition("->")
            self._tel.event(span, EventName.CK_PHASE_CHANGED, note.at,
                            {Attr.CK_PHASE_FROM: src, Attr.CK_PHASE_TO: dst})
        elif note.code is not None:
            self._tel.event(span, EventName.CK_REFUSED, note.at,
                            {Attr.CK_CODE: note.code.value})

    # -- the attempt and its steps ----------------------------------------------------------------
    def attempt_started(self, checkpoint_id: str, index: int) -> Any:
        self._ck = checkpoint_id
        self._span = self._tel.start(_CONTROLLER, SpanName.RL_SNAPSHOT, self._timeline.now, {
            Attr.CHECKPOINT_ID: checkpoint_id, Attr.SNAPSHOT_INDEX: index})
        return self._span

    def step(self, name: str) -> Any:
        """The attempt moves to its next ``rl.rollout_snapshot.*`` step."""
        now = self._timeline.now
        if self._step is not None:
            self._tel.end(self._step, now)
        self._step = self._tel.start(_CONTROLLER, name, now, {Attr.CHECKPOINT_ID: self._ck},
                                     self._span)
        return self._step

    def attempt_ended(self, outcome: SnapshotOutcome) -> None:
        if outcome is not SnapshotOutcome.PUBLISHED:
            self._span.set_status(Status(StatusCode.ERROR, f"snapshot {outcome.value}"))
        self._tel.end(self._span, self._timeline.now, {Attr.SNAPSHOT_OUTCOME: outcome.value})
        self._span = None

    # -- prepare ----------------------------------------------------------------------------------
    def prepare_started(self, deadline_ts: float) -> None:
        prep = self.step(SpanName.RL_SNAPSHOT_PREPARE)
        self._coord = self._tel.start(
            _CONTROLLER, SpanName.CK_COORDINATE_PREPARE, self._timeline.now, {
                Attr.CHECKPOINT_ID: self._ck,
                Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value,
                Attr.CK_DEADLINE_TS: deadline_ts}, prep)

    def stage_started(self, kind: ParticipantKind, at: float,
                      group: tuple[Participant, ...]) -> Any:
        stage = self._stages[kind] = self._tel.start(
            _CONTROLLER, f"{SpanName.CK_COORDINATE_PREPARE}.{kind.value}", at, {
                Attr.CHECKPOINT_ID: self._ck,
                Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value}, self._coord)
        for p in group:
            self._ops[p.instance] = (self._tel.start(service_of(p), SpanName.CK_PREPARE, at,
                                                     _p_attrs(p, self._ck), stage), at)
        return stage

    def stage_ended(self, kind: ParticipantKind, at: float, prepared: bool,
                    group: tuple[Participant, ...]) -> None:
        for p in group:
            self._prepare_op_ended(p, prepared, at)
        self._tel.end(self._stages.pop(kind), at, {Attr.CK_PREPARED: prepared})

    def _prepare_op_ended(self, p: Participant, prepared: bool, at: float) -> None:
        span, started = self._ops.pop(p.instance)
        report = p.report()
        attrs = _p_attrs(p, self._ck)
        attrs.update({Attr.CK_OUTCOME: _outcome(prepared), Attr.CK_PHASE: p.phase.value,
                      Attr.CK_BLOCKERS: report.blocker_count,
                      Attr.CK_BLOCKER_COUNT: report.blocker_count})
        if report.blockers:
            attrs[Attr.CK_BLOCKER_KEYS] = list(report.blockers)
        for k, v in report.counts.items():
            if k in _COUNT_ATTRS:
                attrs[_COUNT_ATTRS[k]] = v
        if not prepared:
            attrs[Attr.CK_CODE] = ErrorCode.DEADLINE_EXCEEDED.value
            self._tel.event(span, EventName.CK_PREPARE_NOT_READY, at,
                            {Attr.CK_BLOCKER_KEYS: list(report.blockers)})
            span.set_status(Status(StatusCode.ERROR, "prepare not ready by its deadline"))
        if at > started:
            wait = self._tel.start(service_of(p), SpanName.CK_WAIT_READY, started,
                                   _p_attrs(p, self._ck), span)
            self._tel.end(wait, at, {Attr.CK_OUTCOME: attrs[Attr.CK_OUTCOME]})
        self._tel.end(span, at, attrs)

    def prepare_ended(self, progress: PrepareProgress) -> None:
        attrs = {Attr.CK_PREPARED: progress.prepared, Attr.CK_OUTCOME: _outcome(progress.prepared)}
        if not progress.prepared:
            attrs[Attr.CK_STOPPED_AT] = progress.stopped_at.value if progress.stopped_at else ""
            attrs[Attr.CK_CODE] = ErrorCode.DEADLINE_EXCEEDED.value
            self._coord.set_status(Status(StatusCode.ERROR, "returned an incomplete cut"))
        self._tel.end(self._coord, self._timeline.now, attrs)
        self._coord = None

    # -- commit -----------------------------------------------------------------------------------
    def commit_started(self, *, retry: bool) -> None:
        """A retried commit stays in the commit step."""
        step = self.step(SpanName.RL_SNAPSHOT_COMMIT) if not retry else self._step
        self._coord = self._tel.start(
            _CONTROLLER, SpanName.CK_COORDINATE_COMMIT, self._timeline.now, {
                Attr.CHECKPOINT_ID: self._ck,
                Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value}, step)

    def worker_lost(self, worker: int) -> None:
        self._tel.event(self._coord, EventName.CK_WORKER_LOST, self._timeline.now,
                        {Attr.CK_INSTANCE: f"worker-{worker}"})

    def commit_replied(self, fan: FanOut) -> None:
        now = self._timeline.now
        spans = []
        for p, reply in fan.replies:
            attrs = {**_p_attrs(p, self._ck), **_reply_attrs(p, reply)}
            if isinstance(p, ModelParticipant):
                attrs[Attr.CK_WORKERS_EXPECTED] = p.workers
                attrs[Attr.CK_WORKERS_ACKED] = p.workers_acknowledged()
            span = self._tel.start(service_of(p), SpanName.CK_COMMIT, now, attrs, self._coord)
            if not reply.ok:
                span.set_status(Status(StatusCode.ERROR, reply.detail))
            spans.append(span)
        self._commit_spans = spans

    def commit_ended(self, ok: bool) -> None:
        """The export and write took the attempt's ``commit_s``."""
        now = self._timeline.now
        for span in self._commit_spans:
            self._tel.end(span, now)
        self._commit_spans = []
        if not ok:
            self._coord.set_status(Status(StatusCode.ERROR, "commit failed"))
        self._tel.end(self._coord, now, {Attr.CK_OUTCOME: _outcome(ok)})
        self._coord = None

    def published(self) -> None:
        self._tel.end(self.step(SpanName.RL_SNAPSHOT_PUBLISH), self._timeline.now)
        self._step = None

    # -- resume -----------------------------------------------------------------------------------
    def resume_started(self) -> Any:
        step = self.step(SpanName.RL_SNAPSHOT_RELEASE)
        self._coord = self._tel.start(
            _CONTROLLER, SpanName.CK_COORDINATE_RESUME, self._timeline.now, {
                Attr.CHECKPOINT_ID: self._ck,
                Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value}, step)
        return self._coord

    def resumed(self, fan: FanOut) -> None:
        now = self._timeline.now
        for p, reply in fan.replies:
            self._tel.instant(service_of(p), SpanName.CK_RESUME, now,
                              {**_p_attrs(p, self._ck), **_reply_attrs(p, reply)}, self._coord)

    def resume_ended(self) -> None:
        now = self._timeline.now
        self._tel.end(self._coord, now, {Attr.CK_OUTCOME: OpOutcome.OK.value})
        self._coord = None
        self._tel.end(self._step, now)
        self._step = None

    # -- retire (the controller's retire-then-adopt) ----------------------------------------------
    def retire_started(self, episodes: int) -> Any:
        return self._tel.start(_CONTROLLER, SpanName.CK_COORDINATE_RETIRE, self._timeline.now, {
            Attr.CK_PARTICIPANT_KIND: ParticipantKind.CONTROLLER.value,
            Attr.CK_EPISODES: episodes})

    def retire_replied(self, handle: Any, p: Participant, reply: Reply, episodes: int) -> None:
        attrs = {**_p_attrs(p, None), **_reply_attrs(p, reply), Attr.CK_EPISODES: episodes}
        self._tel.instant(service_of(p), SpanName.CK_RETIRE, self._timeline.now, attrs, handle)

    def retire_ended(self, handle: Any, ok: bool) -> None:
        self._tel.end(handle, self._timeline.now, {Attr.CK_OUTCOME: _outcome(ok)})
