"""The generation fleet's telemetry, as NeMo-RL's fleet health, its router and Gym's client
emit it.

One ``rl.gen_fleet.shard_state`` span per stay of a shard in a state, with a
``rl.gen_fleet.transition`` event opening each stay; one zero-length ``rl.gen_fleet.probe_tick``
span per probe round carrying the probe, reported-failure, drain and membership-push events (a
probe is an event, never a span); one ``rl.router.request`` span per forwarded request; a
``rolloutscope.fault`` span at each injected fault.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.trace import Status, StatusCode

from rolloutscope.vocabulary import (
    Attr,
    EventName,
    RouterOutcome,
    ShardState,
    ShardTrigger,
    SpanName,
)
from rolloutscope.replay.sim import services
from rolloutscope.replay.sim.engines import (
    ACTOR_DIED,
    PROBE_DEAD_MS,
    PROBE_OK_MS,
    Engine,
    FleetCall,
)
from rolloutscope.replay.sim.ports import Timeline
from rolloutscope.replay.telemetry import Telemetry


class FleetRecorder:
    def __init__(self, *, tel: Telemetry, timeline: Timeline) -> None:
        self._tel = tel
        self._timeline = timeline
        self._round: Any = None  # the probe round being recorded
        self._stays: dict[int, Any] = {}  # shard -> its open shard_state span

    # -- faults ---------------------------------------------------------------------------------
    def fault(self, kind: str, detail: str, engine: Engine | None = None) -> None:
        attrs: dict[str, Any] = {Attr.FAULT_KIND: kind, Attr.FAULT_DETAIL: detail}
        if engine is not None:
            attrs[Attr.SHARD_IDX] = engine.idx
            attrs[Attr.BACKEND_URL] = engine.url
        self._tel.instant(services.CONTROLLER, SpanName.FAULT, self._timeline.now, attrs)

    # -- the router and Gym's client --------------------------------------------------------------
    def request_refused(self, call: FleetCall, status: int) -> None:
        """The router had no backend: it answered at once."""
        self._tel.instant(services.ROUTER, SpanName.ROUTER_REQUEST, self._timeline.now, {
            Attr.HTTP_STATUS: status, Attr.MODEL_CALL_ID: call.run.call_id or "",
            Attr.ROUTER_OUTCOME: RouterOutcome.NO_BACKEND.value})

    def request_forwarded(self, call: FleetCall, engine: Engine) -> None:
        call.span = self._tel.start(services.ROUTER, SpanName.ROUTER_REQUEST, self._timeline.now,
                                    {Attr.BACKEND_URL: engine.url, Attr.SHARD_IDX: engine.idx,
                                     Attr.MODEL_CALL_ID: call.run.call_id or ""})

    def request_ended(self, call: FleetCall, status: int | None, outcome: RouterOutcome | None,
                      error_type: str | None, reflex_drop: bool = False) -> None:
        span, call.span = call.span, None
        if span is None:
            return
        attrs: dict[str, Any] = {Attr.ROUTER_REFLEX_DROP: reflex_drop}
        if status is not None:
            attrs[Attr.HTTP_STATUS] = status
        if outcome is not None:
            attrs[Attr.ROUTER_OUTCOME] = outcome.value
        if error_type is not None:
            attrs[Attr.ERROR_TYPE] = error_type
            span.set_status(Status(StatusCode.ERROR, error_type))
        self._tel.end(span, self._timeline.now, attrs)

    def call_retried(self, call: FleetCall, status: int, verdict: Any) -> None:
        """Gym's status loop retries an answer: one span per answered try (a call that storms
        for ever never ends a call span, and an open span's events are not exported)."""
        run = call.run
        ids = {Attr.ROLLOUT_ID: run.key.rollout_id, Attr.MODEL_CALL_ID: run.call_id or ""}
        self._tel.instant(services.AGENT, SpanName.GYM_MODEL_CHAT, self._timeline.now, {
            **ids, Attr.HTTP_STATUS: status}, run.span, events=[(EventName.ROUTER_RETRY, {
                **ids, Attr.HTTP_STATUS: status, Attr.RETRY_TRY: verdict.try_number,
                Attr.RETRY_MAX_TRIES: verdict.max_tries,
                Attr.RETRY_KIND: verdict.kind.value})])

    def transport_retried(self, call: FleetCall, error: str) -> None:
        """Gym's transport loop prints its ``[request_retry ...]`` line."""
        run = call.run
        ids = {Attr.ROLLOUT_ID: run.key.rollout_id, Attr.MODEL_CALL_ID: run.call_id or ""}
        self._tel.instant(services.AGENT, SpanName.GYM_MODEL_CHAT, self._timeline.now,
                          {**ids, Attr.ERROR_TYPE: error}, run.span, events=[
                              (EventName.GYM_REQUEST_RETRY, {
                                  **ids, Attr.ERROR_TYPE: error,
                                  Attr.RETRY_TRY: call.transport_errors})])

    # -- probe rounds ---------------------------------------------------------------------------
    def round_started(self) -> None:
        self._round = self._tel.start(services.CONTROLLER, SpanName.FLEET_PROBE_TICK,
                                      self._timeline.now, {})

    def probed(self, idx: int, ok: bool) -> None:
        attrs: dict[str, Any] = {Attr.SHARD_IDX: idx, Attr.PROBE_OK: ok,
                                 Attr.PROBE_DURATION_MS: PROBE_OK_MS if ok else PROBE_DEAD_MS}
        if not ok:
            attrs[Attr.PROBE_ERROR] = ACTOR_DIED
        self._tel.event(self._round, EventName.FLEET_PROBE, self._timeline.now, attrs)

    def failures_drained(self, drained: Mapping[str, int]) -> None:
        self._tel.event(self._round, EventName.ROUTER_FAILURES_DRAINED, self._timeline.now, {
            Attr.ROUTER_FAILURE_COUNT: sum(drained.values()),
            Attr.ROUTER_SERVING_BACKENDS: sorted(drained)})

    def failure_reported(self, idx: int, url: str, error: str) -> None:
        self._tel.event(self._round, EventName.FLEET_REPORTED_FAILURE, self._timeline.now, {
            Attr.SHARD_IDX: idx, Attr.BACKEND_URL: url, Attr.FLEET_LAST_ERROR: error})

    def membership_pushed(self, urls: Sequence[str], epoch: int) -> None:
        self._tel.event(self._round, EventName.ROUTER_MEMBERSHIP_PUSH, self._timeline.now, {
            Attr.ROUTER_SERVING_BACKENDS: list(urls), Attr.ROUTER_SERVING_COUNT: len(urls),
            Attr.FLEET_MEMBERSHIP_EPOCH: epoch})

    def exhausted(self, *, serving: int, min_healthy: int, message: str,
                  counts: Mapping[ShardState, int]) -> None:
        self._tel.event(self._round, EventName.FLEET_EXHAUSTED, self._timeline.now, {
            Attr.FLEET_SERVING_SHARDS: serving, Attr.FLEET_MIN_HEALTHY_SHARDS: min_healthy,
            Attr.EXCEPTION_MESSAGE: message,
            **{f"nemo.rl.gen_fleet.shards.{s.value}": n for s, n in counts.items()}})

    def round_ended(self) -> None:
        self._tel.end(self._round, self._timeline.now)
        self._round = None

    # -- shard stays ----------------------------------------------------------------------------
    def stay_ended(self, idx: int) -> None:
        span = self._stays.pop(idx, None)
        if span is not None:
            self._tel.end(span, self._timeline.now)

    def stay_opened(self, shard: Any, state: ShardState, previous: ShardState | None,
                    trigger: ShardTrigger, *, url: str, epoch: int) -> None:
        """A shard's new stay in ``state``; ``shard`` is the model's record of it."""
        now = self._timeline.now
        attrs: dict[str, Any] = {
            Attr.SHARD_IDX: shard.dp_shard_idx, Attr.BACKEND_URL: url,
            Attr.FLEET_STATE: state.value, Attr.FLEET_TRIGGER: trigger.value,
            Attr.FLEET_MEMBERSHIP_EPOCH: epoch,
            Attr.FLEET_PROBE_FAILURES: shard.consecutive_probe_failures,
            Attr.FLEET_REPORTED_FAILURES: shard.consecutive_reported_failures,
            Attr.FLEET_RESTART_ATTEMPTS: shard.restart_attempts}
        if previous is not None:
            attrs[Attr.FLEET_PREVIOUS_STATE] = previous.value
        if shard.weight_version is not None:
            attrs[Attr.FLEET_WEIGHT_VERSION] = shard.weight_version
        if shard.last_error is not None:
            attrs[Attr.FLEET_LAST_ERROR] = shard.last_error
        span = self._stays[shard.dp_shard_idx] = self._tel.start(
            services.CONTROLLER, SpanName.SHARD_STATE, now, attrs)
        if previous is not None and previous is not state:
            self._tel.event(span, EventName.FLEET_TRANSITION, now, attrs)
