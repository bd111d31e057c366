"""The controller's telemetry: what RL's rollout loop, its deadlines, fences, ACKs, training
and watchdog emit, named after what happened. The decision code calls one method per fact; the
span handles live on the records they describe (``PromptGroup.span``, ``RLTry.span``...).

Every span here is the one a live NeMo-RL controller emits (``rolloutscope.vocabulary``); the
order of the calls is the order of the decisions, which is what keeps a replay's span ids, drawn
from one seeded generator, the same run after run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.trace import Status, StatusCode

from rolloutscope.vocabulary import (
    AttemptOutcome,
    Attr,
    DeadlineKind,
    EventName,
    FenceOwner,
    RolloutOutcome,
    SpanName,
)
from rolloutscope.replay.participants.agent import CompletionReceipt
from rolloutscope.replay.participants.deadlines import Deadline, HolderChange
from rolloutscope.replay.participants.rollouts import Decision, Failure, Stall, Verdict
from rolloutscope.replay.sim import services
from rolloutscope.replay.sim.ports import Timeline
from rolloutscope.replay.sim.rollout_state import PromptGroup, RLTry
from rolloutscope.replay.telemetry import Telemetry

# read once per RL try: an enum's ``value`` is a Python-level property on 3.11
_COMMITTED = AttemptOutcome.COMMITTED.value
_ROLLOUT_DEADLINE = DeadlineKind.ROLLOUT.value

ACK_RECEIPTS_PER_SPAN = 128  # the OTel SDK default OTEL_SPAN_EVENT_COUNT_LIMIT
_SERVICE = services.CONTROLLER

# a pending ACK: the receipt, and the prompt and RL try it answers
PendingAck = tuple[CompletionReceipt, int, int]


class ControllerRecorder:
    def __init__(self, *, tel: Telemetry, timeline: Timeline) -> None:
        self._tel = tel
        self._timeline = timeline
        self._gym_fence: Any = None  # the open rl.admission.fence while a snapshot holds it

    # -- prompt groups and tries --------------------------------------------------------------
    def prompt_arrived(self, group: PromptGroup) -> None:
        group.span = self._tel.start(_SERVICE, SpanName.RL_PROMPT, self._timeline.now, {
            Attr.PROMPT_IDX: group.prompt.idx, Attr.ROLLOUT_ID: group.rollout_id})

    def attempt_started(self, t: RLTry, *, target_step: int) -> None:
        t.span = self._tel.start(_SERVICE, SpanName.RL_ATTEMPT, self._timeline.now, {
            **t.attrs(), Attr.GROUP_ID: f"{t.group.rollout_id}-g{t.index}",
            Attr.TARGET_STEP: target_step}, t.group.span)

    def rows_sent(self, t: RLTry, rows: int) -> None:
        t.rows_span = self._tel.start(_SERVICE, SpanName.RL_GYM_ROWS, self._timeline.now, {
            **t.attrs(), Attr.ROW_ATTEMPT: t.rows.row_attempt, Attr.ROWS_PENDING: rows}, t.span)

    def row_received(self, t: RLTry, row_idx: int, receipt: CompletionReceipt) -> None:
        self._tel.event(t.rows_span, EventName.ROW_RECEIVED, self._timeline.now, {
            Attr.ROW_IDX: row_idx, Attr.ROLLOUT_ID: receipt.rollout_id})

    def rows_ended(self, t: RLTry, *, received: int, missing: int) -> None:
        self._tel.end(t.rows_span, self._timeline.now, {Attr.ROWS_RECEIVED: received,
                                                         Attr.ROWS_MISSING: missing})

    def rows_abandoned(self, t: RLTry) -> None:
        """The try failed while its row stream was still open: the stream ends unread."""
        if t.rows_span is not None and t.rows_span.is_recording():
            received = len(t.rows.received)
            self.rows_ended(t, received=received, missing=t.rows.n - received)

    def rows_redispatched(self, t: RLTry, rows: int) -> None:
        self._tel.event(t.span, EventName.ROW_REDISPATCH, self._timeline.now, {
            Attr.ROW_ATTEMPT: t.rows.row_attempt, Attr.ROWS_MISSING: rows})

    def attempt_committed(self, t: RLTry) -> None:
        self._tel.end(t.span, self._timeline.now,
                      {Attr.ROLLOUT_OUTCOME: _COMMITTED})

    def attempt_failed(self, t: RLTry, failure: Failure, decision: Decision) -> None:
        attrs = {Attr.ROLLOUT_OUTCOME: AttemptOutcome.FAILED.value,
                 Attr.FAILURE_CLASS: failure.failure_class.value,
                 Attr.FAILURE_REASON: failure.reason.value, Attr.FAILURE_DETAIL: failure.detail}
        if failure.http_status is not None:
            attrs[Attr.FAILURE_HTTP_STATUS] = failure.http_status
        if decision.verdict is Verdict.RETRY:
            attrs[Attr.BACKOFF_S] = decision.backoff_s
        t.span.set_status(Status(StatusCode.ERROR, failure.detail))
        self._tel.end(t.span, self._timeline.now, attrs)

    def prompt_raised(self, group: PromptGroup, failure: Failure) -> None:
        group.span.set_status(Status(StatusCode.ERROR, failure.detail))

    def prompt_given_up(self, group: PromptGroup, failure: Failure, *, dropped: bool) -> None:
        name = EventName.PROMPT_DROPPED if dropped else EventName.PROMPT_SKIPPED
        self._tel.event(group.span, name, self._timeline.now,
                        {Attr.FAILURE_REASON: failure.reason.value})

    def prompt_ended(self, group: PromptGroup, outcome: RolloutOutcome) -> None:
        self._tel.end(group.span, self._timeline.now, {
            Attr.ROLLOUT_OUTCOME: outcome._value_,
            Attr.ROLLOUT_INFRA_ATTEMPTS: group.budget.infra,
            Attr.ROLLOUT_DATA_ATTEMPTS: group.budget.data})

    # -- rollout deadlines ----------------------------------------------------------------------
    def deadline_started(self, t: RLTry, budget_s: float) -> None:
        now = self._timeline.now
        t.deadline_span = self._tel.start(_SERVICE, SpanName.RL_DEADLINE, now, {
            **t.attrs(), Attr.DEADLINE_ID: f"{t.group.rollout_id}-d{t.index}",
            Attr.DEADLINE_KIND: _ROLLOUT_DEADLINE, Attr.DEADLINE_BUDGET_S: budget_s,
            Attr.DEADLINE_DESCRIPTION: "NeMo-Gym prompt group"}, t.span)
        self._tel.event(t.deadline_span, EventName.DEADLINE_START, now)

    def deadline_held(self, t: RLTry, change: HolderChange, *, suspended: bool) -> None:
        name = EventName.DEADLINE_SUSPEND if suspended else EventName.DEADLINE_RESUME
        self._tel.event(t.deadline_span, name, self._timeline.now, {
            Attr.DEADLINE_HOLDER: change.holder.value,
            Attr.DEADLINE_HOLDERS_COUNT: change.holders_count})

    def deadline_fired(self, t: RLTry, state: str) -> None:
        self._tel.event(t.deadline_span, EventName.DEADLINE_FIRE, self._timeline.now, {
            Attr.DEADLINE_REMAINING_S: 0.0, Attr.DEADLINE_STATE_WHEN_FIRED: state})

    def deadline_ended(self, t: RLTry, d: Deadline, *, state_when_fired: str | None) -> None:
        now = self._timeline.now
        attrs = {Attr.DEADLINE_OUTCOME: d.outcome._value_ if d.outcome else "completed",
                 Attr.DEADLINE_SUSPENDED_S: round(d.suspended_s, 9),
                 Attr.DEADLINE_ACTIVE_S: round(d.budget_s - d.remaining_s(now), 9)}
        if state_when_fired is not None:
            attrs[Attr.DEADLINE_STATE_WHEN_FIRED] = state_when_fired
        self._tel.end(t.deadline_span, now, attrs)
        t.deadline_span = None

    # -- ACKs -----------------------------------------------------------------------------------
    def acks_sent(self, pending: Sequence[PendingAck], parent: Any) -> None:
        # one span per ACK_RECEIPTS_PER_SPAN receipts: the SDK keeps at most 128 events on a
        # span and silently drops the rest, which would read as unacknowledged completions
        now = self._timeline.now
        for at in range(0, len(pending), ACK_RECEIPTS_PER_SPAN):
            chunk = pending[at:at + ACK_RECEIPTS_PER_SPAN]
            self._tel.instant(_SERVICE, SpanName.RL_GYM_ACK, now, {
                Attr.ACK_RECEIPTS: len(chunk), Attr.ACK_OUTCOME: "ok"}, parent, events=[
                (EventName.AGENT_ACKNOWLEDGED, {Attr.ROLLOUT_ID: r.rollout_id,
                                                Attr.RL_ATTEMPT: rl_attempt,
                                                Attr.PROMPT_IDX: prompt_idx,
                                                Attr.RESULT_ID: r.result_id})
                for r, prompt_idx, rl_attempt in chunk])

    # -- training, weight syncs and the Gym fence -----------------------------------------------
    def train_step_started(self, step: int) -> Any:
        return self._tel.start(_SERVICE, SpanName.RL_TRAIN_STEP, self._timeline.now,
                               {Attr.TRAIN_STEP: step})

    def train_step_ended(self, handle: Any) -> None:
        self._tel.end(handle, self._timeline.now)

    def weight_sync_started(self, version: int) -> tuple[Any, Any]:
        """The weight_sync fence and the sync inside it; a hung sync leaves both open."""
        now = self._timeline.now
        fence = self._tel.start(_SERVICE, SpanName.RL_ADMISSION_FENCE, now,
                                {Attr.FENCE_OWNER: FenceOwner.WEIGHT_SYNC.value})
        sync = self._tel.start(_SERVICE, SpanName.RL_WEIGHT_SYNC, now,
                               {Attr.TRAINER_VERSION: version}, fence)
        return fence, sync

    def weight_sync_ended(self, handle: tuple[Any, Any]) -> None:
        fence, sync = handle
        now = self._timeline.now
        self._tel.end(sync, now)
        self._tel.end(fence, now)

    def gym_fence_closed(self, checkpoint_id: str, parent: Any) -> None:
        self._gym_fence = self._tel.start(
            _SERVICE, SpanName.RL_ADMISSION_FENCE, self._timeline.now, {
                Attr.FENCE_OWNER: FenceOwner.GYM_CHECKPOINT.value,
                Attr.CHECKPOINT_ID: checkpoint_id}, parent)

    def gym_fence_opened(self) -> None:
        self._tel.end(self._gym_fence, self._timeline.now)
        self._gym_fence = None

    # -- faults and the watchdog ----------------------------------------------------------------
    def gym_subprocess_died(self, environment: str) -> None:
        self._tel.instant(_SERVICE, SpanName.FAULT, self._timeline.now, {
            Attr.FAULT_KIND: "gym_subprocess_death",
            Attr.FAULT_DETAIL: f"the {environment} server subprocess exited"})

    def environment_unhealthy(self, environment: str) -> None:
        self._tel.instant(_SERVICE, SpanName.RL_STALL_WATCHDOG_TICK, self._timeline.now, {},
                          None, events=[(EventName.ENV_HEALTH_PROBLEM, {
                              Attr.ENV_NAME: environment,
                              Attr.ENV_PROBLEM: f"environment '{environment}' "
                                                f"reported unhealthy: server subprocess exited"})])

    def stalled(self, stall: Stall) -> None:
        self._tel.instant(_SERVICE, SpanName.RL_STALL_WATCHDOG_TICK, self._timeline.now, {},
                          None, events=[(EventName.STALL, {
                              Attr.STALL_IDLE_S: round(stall.idle_s, 3),
                              Attr.STALL_INFLIGHT: stall.inflight,
                              Attr.STALL_COMMITTED: stall.committed,
                              Attr.STALL_TRAIN_STEPS: stall.train_steps,
                              Attr.STALL_MAX_STEPS: stall.max_steps,
                              Attr.STALL_TIMEOUT_S: stall.stall_timeout_s,
                              Attr.STALL_ACTION: stall.action.value})])

    def gauges(self, values: Mapping[str, float], step: int) -> None:
        """The watchdog's gauges (``rollout/*``, ``gen_fleet/*``, ``router/*``), one sample each."""
        now = self._timeline.now
        for name, value in values.items():
            self._tel.gauge(_SERVICE, name, now, value, step)
