"""Gym's telemetry: each /run's ``agent.execution`` and ``gym.rollout`` spans, its parked
intervals, and the policy-call events on it, as a live NeMo-Gym agent server emits them."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Status, StatusCode

from rolloutscope.vocabulary import Attr, EventName, ExecutionState, SpanName
from rolloutscope.replay.participants.agent import CompletionReceipt
from rolloutscope.replay.sim import services
from rolloutscope.replay.sim.ports import Timeline
from rolloutscope.replay.sim.gym_run import Run
from rolloutscope.replay.telemetry import Telemetry

_SERVICE = services.AGENT
# read once per run and per park: an enum's ``value`` is a Python-level property on 3.11, and
# ``_value_`` (what it returns) a plain attribute
_RUNNING = ExecutionState.RUNNING.value


class GymRecorder:
    def __init__(self, *, tel: Telemetry, timeline: Timeline) -> None:
        self._tel = tel
        self._timeline = timeline

    def run_started(self, run: Run, parent: Any) -> None:
        now, key = self._timeline.now, run.key
        run.span = self._tel.start(_SERVICE, SpanName.AGENT_EXECUTION, now, {
            **run.ids(), Attr.ROW_IDX: run.row_idx, Attr.EPISODE_ATTEMPT: key.attempt,
            Attr.EXECUTION_GENERATION: key.generation,
            Attr.EXECUTION_STATE: _RUNNING}, parent)
        run.rollout_span = self._tel.start(_SERVICE, SpanName.GYM_ROLLOUT, now, {
            Attr.ROLLOUT_ID: key.episode.capture_key, Attr.PROMPT_IDX: run.prompt_idx,
            Attr.RL_ATTEMPT: run.rl_attempt, Attr.ROW_IDX: run.row_idx}, run.span)

    def run_ended(self, run: Run, state: ExecutionState, error: str | None) -> None:
        now = self._timeline.now
        self._end_parked(run, now)
        for span in (run.rollout_span, run.span):
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
        self._tel.end(run.rollout_span, now)
        self._tel.end(run.span, now, {Attr.EXECUTION_STATE: state._value_})

    def run_completed(self, run: Run, receipt: CompletionReceipt) -> None:
        self._tel.event(run.span, EventName.AGENT_COMPLETED, self._timeline.now, {
            **run.ids(), Attr.RESULT_ID: receipt.result_id,
            Attr.RESULT_DIGEST: receipt.result_digest[:16]})

    def run_retired(self, run: Run) -> None:
        self._tel.event(run.span, EventName.AGENT_RETIRED, self._timeline.now,
                        {Attr.RETIRE_REASON: "retire"})

    def call_waiting(self, run: Run, call_id: str) -> None:
        self._tel.event(run.span, EventName.MODEL_ADMISSION_WAIT, self._timeline.now,
                        {Attr.MODEL_CALL_ID: call_id})

    def response_started(self, run: Run) -> None:
        self._tel.event(run.span, EventName.MODEL_RESPONSE_STARTED, self._timeline.now,
                        {Attr.MODEL_CALL_ID: run.call_id})

    def park_requested(self, run: Run) -> None:
        self._tel.event(run.span, EventName.AGENT_PARK_REQUESTED, self._timeline.now)

    def run_parked(self, run: Run, *, checkpoint_id: str | None, boundary_state: Any,
                   boundary_index: int) -> None:
        run.parked_span = self._tel.start(_SERVICE, SpanName.AGENT_PARKED, self._timeline.now, {
            **run.ids(), Attr.CHECKPOINT_ID: checkpoint_id or "",
            Attr.PARKED_BOUNDARY_STATE: boundary_state._value_,
            Attr.BOUNDARY_INDEX: boundary_index}, run.span)

    def run_released(self, run: Run) -> None:
        """Its parked interval ends at the release: no separate event."""
        self._end_parked(run, self._timeline.now)

    def _end_parked(self, run: Run, now: float) -> None:
        if run.parked_span is not None:
            self._tel.end(run.parked_span, now)
            run.parked_span = None
