"""The generation fleet of a replay: engines, fleet health, the router, probes, refits.

Glue between the fleet participants and the engine (docs/domain/fleet-health.md). The simulated
engines are ground truth (alive, wedged, slow, the weights they hold); the fleet-health model and
the router only learn what the controller's probe pump, the router's drained failures and the
weight syncs tell them, through the real system's public method names and nothing else, so a
user's own classes can stand in for the reference models (``FleetHealthFactory``,
``RouterFactory``).

The policy calls of Gym runs come here when a scenario has a fleet. With ``fleet-health-enabled``
they go through the router (least-outstanding over the serving backends; a failed backend call
answered 500 or, before the fix, 504) and Gym's status loop retries what its client retries.
Without it Gym round-robins over the fixed backend list, and a refused or dropped connection
enters Gym's transport loop: retried every 0.5 s without limit and with no HTTP timeout, so the
call ends only if the engine comes back.

Telemetry: one ``rl.gen_fleet.shard_state`` span per stay of a shard in a state, with a
``rl.gen_fleet.transition`` event opening each stay; one zero-length ``rl.gen_fleet.probe_tick``
span per probe round carrying the probe, reported-failure, drain and membership-push events (a
probe is an event, never a span); one ``rl.router.request`` span per forwarded request; a
``rolloutscope.fault`` span at each injected fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Status, StatusCode

from rolloutscope.vocabulary import (
    SERVING_STATES,
    Attr,
    EventName,
    RouterOutcome,
    ShardState,
    ShardTrigger,
    SpanName,
)
from rolloutscope.replay.backends.base import EngineUnreachable
from rolloutscope.replay.engine import Priority, Timer
from rolloutscope.replay.participants.fleet_health import (
    FleetHealthConfig,
    GenerationFleetExhausted,
    GenerationFleetHealth,
    Transition,
)
from rolloutscope.replay.participants.gym_client import ModelCallRetries
from rolloutscope.replay.participants.router import GenerationRouter, RouterConfig
from rolloutscope.replay.scenario import KillState, ShardKill, WedgeMode
from rolloutscope.replay.sim import services
from rolloutscope.replay.variants import Variant

if TYPE_CHECKING:
    from rolloutscope.replay.sim.gym import Run
    from rolloutscope.replay.sim.world import World

OK_STATUS = 200
VLLM_ERROR_STATUS = 500  # a wedged engine core answering Gym directly
FAST_FAILURE_S = 0.05  # a refused connection or a dead engine core answers about at once
TRANSPORT_RETRY_S = 0.5
TRANSPORT_RETRIES_PER_LINE = 100  # Gym prints [request_retry ...] once per 100 errors
PROBE_OK_MS = 2.0
PROBE_DEAD_MS = 0.5
ACTOR_DIED = "ActorDiedError: The actor died unexpectedly before finishing this task."


class ClientConnectorError(ConnectionError):
    """aiohttp's refused connection (the engine's process is gone)."""


class ServerDisconnectedError(ConnectionError):
    """aiohttp's dropped connection (the engine died mid-request, or its core is dead)."""


# -- the seam for later plug-ins ----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class FleetHealthSpec:
    """What a fleet-health factory is given. ``observer`` is optional to honour: a model that
    never calls it has its transitions derived from ``snapshot()`` after each call."""

    num_shards: int
    config: FleetHealthConfig
    clock: Callable[[], float]
    base_urls: tuple[str, ...]
    observer: Callable[[Transition], None]


@dataclass(frozen=True, kw_only=True)
class RouterSpec:
    backends: tuple[str, ...]
    config: RouterConfig
    health_managed: bool


FleetHealthFactory = Callable[[FleetHealthSpec], Any]
RouterFactory = Callable[[RouterSpec], Any]


def reference_fleet_health(spec: FleetHealthSpec) -> GenerationFleetHealth:
    return GenerationFleetHealth(num_shards=spec.num_shards, config=spec.config,
                                 clock=spec.clock, base_urls=spec.base_urls,
                                 observer=spec.observer)


def reference_router(spec: RouterSpec) -> GenerationRouter:
    return GenerationRouter(backends=spec.backends, config=spec.config,
                            health_managed=spec.health_managed)


# -- simulated engines and calls ------------------------------------------------------------------
class Engine:
    """One dp shard's vLLM engine, as it really is."""

    __slots__ = ("idx", "url", "alive", "wedge", "slowdown", "calls", "weight_version")

    def __init__(self, idx: int) -> None:
        self.idx = idx
        self.url = f"http://gen-{idx}:{8000 + idx}/v1"
        self.alive = True
        self.wedge: WedgeMode | None = None
        self.slowdown = 1.0
        self.calls: set[FleetCall] = set()
        self.weight_version = 0


class FleetCall:
    """One policy call of a Gym run, across its client's retries."""

    __slots__ = ("run", "duration_s", "retries", "engine", "timer", "span", "transport_errors",
                 "ended", "pending")

    def __init__(self, run: Run, duration_s: float) -> None:
        self.run = run
        self.duration_s = duration_s
        self.retries = ModelCallRetries()
        self.engine: Engine | None = None
        self.timer: Timer | None = None
        self.span: Any = None  # the open rl.router.request span of the current try
        self.transport_errors = 0
        self.ended = False
        self.pending: Any = None  # the current try's call on a real engine


_PROBE_TRIGGER = {True: ShardTrigger.PROBE_SUCCESS, False: ShardTrigger.PROBE_FAILURE}


class FleetSide:
    def __init__(self, world: World, *, fleet_health_factory: FleetHealthFactory | None = None,
                 router_factory: RouterFactory | None = None) -> None:
        self.w = world
        cfg = world.scenario.config
        v = world.variants
        self.engines = [Engine(i) for i in range(cfg.fleet.shards)]
        self._by_url = {e.url: e for e in self.engines}
        self.active = bool(self.engines)
        self.managed = self.active and Variant.FLEET_HEALTH_ENABLED in v
        self.router_fixed = Variant.ROUTER_500_NOT_504 in v
        self.probe_on_interval = Variant.PROBE_AT_PROBE_INTERVAL in v
        self._rr = 0
        self._stays: dict[int, Any] = {}
        self._pending: list[Transition] = []
        self._observed = False
        self.health: Any = None
        self.router: Any = None
        self._router_factory = router_factory or reference_router
        self._last_states: dict[int, ShardState] = {}
        self.exhausted = False
        self._tick_span: Any = None
        if not self.managed:
            return
        urls = tuple(e.url for e in self.engines)
        spec = FleetHealthSpec(
            num_shards=len(self.engines), clock=world.sched.clock.now,
            config=cfg.fleet.health_config(
                separate_reported_failure_streak=Variant.SEPARATE_REPORTED_FAILURE_STREAK in v),
            base_urls=urls, observer=self._on_transition)
        self.health = (fleet_health_factory or reference_fleet_health)(spec)
        self._observed = bool(self._pending)  # the reference model announces each shard
        self._router_spec = RouterSpec(
            backends=urls, config=cfg.router.router_config(router_500_not_504=self.router_fixed),
            # the pre-fix router neither dropped nor counted a failing backend
            health_managed=self.router_fixed)
        self.router = self._router_factory(self._router_spec)
        # the engines start with the trainer's initial weights, version 0
        for e in self.engines:
            self.health.report_refit(e.idx, 0)
        self._pending.clear()
        for shard in self._shards():
            self._open_stay(shard, None, ShardTrigger.INITIAL)

    # -- schedule -------------------------------------------------------------------------------
    def schedule(self) -> None:
        sched, f = self.w.sched, self.w.scenario.faults
        for kill in f.shard_kills:
            sched.at(kill.at_s, self._kill_when_pinned, kill, priority=Priority.CONTROL)
        for wedge in f.shard_wedges:
            sched.at(wedge.at_s, self._wedge, wedge.shard, wedge.mode, priority=Priority.CONTROL)
        for slow in f.slow_shards:
            sched.at(slow.at_s, self._slow, slow.shard, slow.factor, priority=Priority.CONTROL)
        for restart in f.router_restarts:
            sched.at(restart.at_s, self._restart_router, priority=Priority.CONTROL)
        if self.managed and self.probe_on_interval:
            interval = self.w.scenario.config.fleet.probe_interval_s
            sched.at(interval, self._probe_pump, interval, priority=Priority.WATCHDOG)

    # -- faults ---------------------------------------------------------------------------------
    def _fault(self, kind: str, detail: str, shard: int | None = None) -> None:
        attrs: dict[str, Any] = {Attr.FAULT_KIND: kind, Attr.FAULT_DETAIL: detail}
        if shard is not None:
            attrs[Attr.SHARD_IDX] = shard
            attrs[Attr.BACKEND_URL] = self.engines[shard].url
        self.w.tel.instant(services.CONTROLLER, SpanName.FAULT, self.w.now, attrs)

    def _kill_when_pinned(self, kill: ShardKill) -> None:
        engine = self.engines[kill.shard]
        if not engine.alive:
            return
        busy = bool(engine.calls)
        if (kill.state is KillState.IDLE and busy) or (kill.state is KillState.SERVING
                                                        and not busy):
            # the harness waits for the pinned state, re-reading it just before the kill
            self.w.sched.after(FAST_FAILURE_S, self._kill_when_pinned, kill,
                               priority=Priority.CONTROL)
            return
        engine.alive = False
        if self.w.generation is not None:  # the driver makes the shard's endpoint unreachable
            self.w.generation.set_reachable(engine.idx, False)
        self._fault("shard_kill", f"engine killed while {'serving' if busy else 'idle'} "
                    f"({len(engine.calls)} generation(s) in flight)", kill.shard)
        for call in sorted(engine.calls, key=lambda c: c.run.call_id or ""):
            self._upstream_failed(call, ServerDisconnectedError("Server disconnected"))

    def _wedge(self, shard: int, mode: WedgeMode) -> None:
        self.engines[shard].wedge = mode
        self._fault("shard_wedge", f"engine answers probes; its generations {mode.value}", shard)

    def _slow(self, shard: int, factor: float) -> None:
        self.engines[shard].slowdown = factor
        self._fault("slow_shard", f"generations take {factor:g}x as long", shard)

    def _restart_router(self) -> None:
        if self.router is None:
            return
        self.router = self.router.restarted()
        self._fault("router_restart", "the router actor came back with every backend serving")
        # requests in flight lost their connection: Gym's transport loop re-sends each
        for engine in self.engines:
            for call in sorted(engine.calls, key=lambda c: c.run.call_id or ""):
                self._detach(call)
                self._end_request_span(call, None, RouterOutcome.BACKEND_ERROR,
                                       "ServerDisconnectedError")
                call.timer = self.w.sched.after(TRANSPORT_RETRY_S, self._try, call)

    # -- the generation path --------------------------------------------------------------------
    def model_call(self, run: Run, duration_s: float) -> FleetCall:
        call = FleetCall(run, duration_s)
        self._try(call)
        return call

    def cancel(self, call: FleetCall) -> None:
        """The run ended under its call (retired, failed by another fault)."""
        if call.ended:
            return
        call.ended = True
        if call.timer is not None:
            call.timer.cancel()
        if call.engine is not None:
            self._end_try(call)
            if self.router is not None and call.span is not None:
                self._end_request_span(call, None, None, "CancelledError")

    def _try(self, call: FleetCall) -> None:
        call.timer = None
        if call.ended:
            return
        if not self.managed:
            engine = self.engines[self._rr % len(self.engines)]
            self._rr += 1
            self._upstream(call, engine)
            return
        decision = self.router.route()
        if not decision.forwarded:
            self.w.tel.instant(services.ROUTER, SpanName.ROUTER_REQUEST, self.w.now, {
                Attr.HTTP_STATUS: decision.status, Attr.MODEL_CALL_ID: call.run.call_id or "",
                Attr.ROUTER_OUTCOME: RouterOutcome.NO_BACKEND.value})
            self._answered(call, decision.status)
            return
        engine = self._by_url[decision.backend]
        call.span = self.w.tel.start(services.ROUTER, SpanName.ROUTER_REQUEST, self.w.now, {
            Attr.BACKEND_URL: engine.url, Attr.SHARD_IDX: engine.idx,
            Attr.MODEL_CALL_ID: call.run.call_id or ""})
        self._upstream(call, engine)

    def _upstream(self, call: FleetCall, engine: Engine) -> None:
        """The HTTP call to one engine, from the router or from Gym directly."""
        call.engine = engine
        engine.calls.add(call)
        timeout = self.w.scenario.config.router.backend_timeout_s if self.managed else None
        gen = self.w.generation
        if gen is not None and engine.wedge is None:
            # a real engine serves the try (a killed shard's endpoint refuses it for real); the
            # router's timeout is still the replay's, in virtual time
            if timeout is not None:
                call.timer = self.w.sched.after(timeout, self._upstream_failed, call,
                                                TimeoutError(f"no answer in {timeout:g}s"))
            turn = call.run.row.turns[call.run.turn]
            call.pending = gen.submit(call_id=call.run.call_id or "", turn=turn,
                                      shard=engine.idx, captured_s=call.duration_s,
                                      on_done=lambda result, took: self._real_done(call, result,
                                                                                   took))
            return
        if not engine.alive:
            call.timer = self.w.sched.after(FAST_FAILURE_S, self._upstream_failed, call,
                                            ClientConnectorError("Connect call failed"))
        elif engine.wedge is WedgeMode.FAIL:
            call.timer = self.w.sched.after(FAST_FAILURE_S, self._upstream_failed, call,
                                            ServerDisconnectedError("engine core is dead"))
        elif engine.wedge is WedgeMode.HANG:
            if timeout is not None:  # Gym's own client has no HTTP timeout: it waits for ever
                call.timer = self.w.sched.after(timeout, self._upstream_failed, call,
                                                TimeoutError(f"no answer in {timeout:g}s"))
        else:
            took = call.duration_s * engine.slowdown
            if timeout is not None and took > timeout:
                call.timer = self.w.sched.after(timeout, self._upstream_failed, call,
                                                TimeoutError(f"no answer in {timeout:g}s"))
            else:
                call.timer = self.w.sched.after(took, self._upstream_ok, call)

    def _detach(self, call: FleetCall) -> Engine | None:
        engine = call.engine
        if engine is not None:
            engine.calls.discard(call)
            call.engine = None
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        self._drop_pending(call)
        return engine

    def _drop_pending(self, call: FleetCall) -> None:
        if call.pending is not None:
            self.w.generation.cancel(call.pending)
            call.pending = None

    def _real_done(self, call: FleetCall, result: Any, took_s: float) -> None:
        """A real engine answered the try (on the engine's thread, at the wall clock's time)."""
        call.pending = None
        engine = call.engine
        if engine is None:
            return
        if result.error is not None:
            error = result.error
            self._upstream_failed(call, ClientConnectorError(str(error))
                                  if isinstance(error, EngineUnreachable) else error)
            return
        if engine.slowdown > 1.0:  # a slow shard: the rest of its slowdown, in virtual time
            if call.timer is not None:
                call.timer.cancel()
            call.timer = self.w.sched.after(took_s * (engine.slowdown - 1.0),
                                            self._upstream_ok, call)
            return
        self._upstream_ok(call)

    def _end_try(self, call: FleetCall) -> None:
        engine = self._detach(call)
        if engine is not None and self.managed:
            self.router.complete(engine.url, ok=True)  # a dropped client frees its slot

    def _upstream_ok(self, call: FleetCall) -> None:
        if call.timer is not None:
            call.timer.cancel()  # a real engine's answer beat the router's timeout
        call.timer = None
        engine = call.engine
        assert engine is not None
        engine.calls.discard(call)
        call.engine = None
        if self.managed:
            reply = self.router.complete(engine.url, ok=True)
            self._end_request_span(call, reply.status, reply.outcome, None)
        self._answered(call, OK_STATUS)

    def _upstream_failed(self, call: FleetCall, error: BaseException) -> None:
        if call.timer is not None:
            call.timer.cancel()
        call.timer = None
        self._drop_pending(call)  # the router gave up on a real call: drop its answer
        engine = call.engine
        if engine is None:
            return
        engine.calls.discard(call)
        call.engine = None
        if self.managed:
            reply = self.router.complete(engine.url, ok=False, error=error)
            self._end_request_span(call, reply.status, reply.outcome, reply.error_type,
                                   reply.reflex_drop)
            self._answered(call, reply.status)
        elif isinstance(error, ConnectionError):
            self._transport_retry(call, type(error).__name__)
        else:  # an engine's own error status, when a real one answered
            self._answered(call, getattr(error, "status", VLLM_ERROR_STATUS))

    def _end_request_span(self, call: FleetCall, status: int | None,
                          outcome: RouterOutcome | None, error_type: str | None,
                          reflex_drop: bool = False) -> None:
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
        self.w.tel.end(span, self.w.now, attrs)

    def _answered(self, call: FleetCall, status: int) -> None:
        """Gym's status loop sees one answer."""
        run = call.run
        verdict = call.retries.observe(status)
        if verdict.kind is not None:
            # one span per answered try: a call that storms for ever never ends a call span,
            # and an open span's events are not exported
            ids = {Attr.ROLLOUT_ID: run.key.rollout_id, Attr.MODEL_CALL_ID: run.call_id or ""}
            self.w.tel.instant(services.AGENT, SpanName.GYM_MODEL_CHAT, self.w.now, {
                **ids, Attr.HTTP_STATUS: status}, run.span, events=[(EventName.ROUTER_RETRY, {
                    **ids, Attr.HTTP_STATUS: status, Attr.RETRY_TRY: verdict.try_number,
                    Attr.RETRY_MAX_TRIES: verdict.max_tries,
                    Attr.RETRY_KIND: verdict.kind.value})])
        if verdict.retry:
            call.timer = self.w.sched.after(verdict.sleep_s, self._try, call)
            return
        call.ended = True
        if status == OK_STATUS:
            self.w.gym.generated(run)
        else:
            self.w.gym.model_call_failed(run, status)

    def _transport_retry(self, call: FleetCall, error: str) -> None:
        """Gym's transport loop: no cap, no timeout; one line per 100 errors."""
        call.transport_errors += 1
        if call.transport_errors % TRANSPORT_RETRIES_PER_LINE == 1:
            run = call.run
            ids = {Attr.ROLLOUT_ID: run.key.rollout_id, Attr.MODEL_CALL_ID: run.call_id or ""}
            self.w.tel.instant(services.AGENT, SpanName.GYM_MODEL_CHAT, self.w.now,
                               {**ids, Attr.ERROR_TYPE: error}, run.span, events=[
                                   (EventName.GYM_REQUEST_RETRY, {
                                       **ids, Attr.ERROR_TYPE: error,
                                       Attr.RETRY_TRY: call.transport_errors})])
        # the next 99 retries hit the same dead endpoint; jump to the one that prints
        call.timer = self.w.sched.after(
            TRANSPORT_RETRY_S * TRANSPORT_RETRIES_PER_LINE, self._transport_line, call, error)
        call.transport_errors += TRANSPORT_RETRIES_PER_LINE - 1

    def _transport_line(self, call: FleetCall, error: str) -> None:
        call.timer = None
        if not call.ended:
            self._transport_retry(call, error)

    # -- the probe pump (docs/domain/fleet-health.md#probes-and-reported-failures) ---------------
    def _probe_pump(self, interval: float) -> None:
        self.probe_tick()
        if not self.exhausted:
            self.w.sched.after(interval, self._probe_pump, interval, priority=Priority.WATCHDOG)

    def probe_tick(self) -> None:
        """Probe every serving shard at once, drain the router's failures into the fleet, push
        the serving set to the router (unconditionally), then check exhaustion."""
        if not self.managed or self.exhausted:
            return
        w, now = self.w, self.w.now
        span = self._tick_span = w.tel.start(services.CONTROLLER, SpanName.FLEET_PROBE_TICK, now,
                                             {})
        for idx in self.health.serving_shards():
            engine = self.engines[idx]
            ok = engine.alive  # a wedged engine's worker still answers is_alive
            attrs: dict[str, Any] = {Attr.SHARD_IDX: idx, Attr.PROBE_OK: ok,
                                     Attr.PROBE_DURATION_MS: PROBE_OK_MS if ok else PROBE_DEAD_MS}
            if not ok:
                attrs[Attr.PROBE_ERROR] = ACTOR_DIED
            w.tel.event(span, EventName.FLEET_PROBE, now, attrs)
            self._call(_PROBE_TRIGGER[ok], self.health.record_probe, idx, ok,
                       None if ok else ACTOR_DIED)
        if self.router_fixed:
            self._drain(span)
        urls = tuple(self.engines[i].url for i in self.health.serving_shards())
        self.router.set_serving_backends(urls)
        w.tel.event(span, EventName.ROUTER_MEMBERSHIP_PUSH, now, {
            Attr.ROUTER_SERVING_BACKENDS: list(urls), Attr.ROUTER_SERVING_COUNT: len(urls),
            Attr.FLEET_MEMBERSHIP_EPOCH: self.health.membership_epoch})
        try:
            self.health.raise_if_exhausted()
        except GenerationFleetExhausted as exc:
            self.exhausted = True
            counts = self._counts()
            w.tel.event(span, EventName.FLEET_EXHAUSTED, now, {
                Attr.FLEET_SERVING_SHARDS: len(self.health.serving_shards()),
                Attr.FLEET_MIN_HEALTHY_SHARDS: w.scenario.config.fleet.min_healthy_shards,
                Attr.EXCEPTION_MESSAGE: str(exc),
                **{f"nemo.rl.gen_fleet.shards.{s.value}": n for s, n in counts.items()}})
            w.tel.end(span, now)
            self._tick_span = None
            w.controller.terminate("GenerationFleetExhausted")
            return
        w.tel.end(span, now)
        self._tick_span = None

    def _drain(self, span: Any) -> None:
        drained = self.router.drain_failures()
        if not drained:
            return
        now = self.w.now
        self.w.tel.event(span, EventName.ROUTER_FAILURES_DRAINED, now, {
            Attr.ROUTER_FAILURE_COUNT: sum(drained.values()),
            Attr.ROUTER_SERVING_BACKENDS: sorted(drained)})
        for url, count in drained.items():
            idx = self.health.shard_for_base_url(url)
            if idx is None:
                continue
            error = f"RuntimeError: router: {count} failed request(s) to {url}"
            for _ in range(count):
                self.w.tel.event(span, EventName.FLEET_REPORTED_FAILURE, now, {
                    Attr.SHARD_IDX: idx, Attr.BACKEND_URL: url, Attr.FLEET_LAST_ERROR: error})
                self._call(ShardTrigger.REPORTED_FAILURE, self.health.report_failure, idx,
                           error)

    # -- weight syncs ----------------------------------------------------------------------------
    def dead_ranks(self) -> list[int]:
        return [e.idx for e in self.engines if not e.alive]

    def refit(self, version: int, missed: frozenset[int]) -> None:
        """A weight sync completed: every live engine it reached holds ``version`` now."""
        for engine in self.engines:
            if not engine.alive or engine.idx in missed:
                continue
            engine.weight_version = version
            if self.managed:
                moved = self._call(ShardTrigger.REFIT, self.health.report_refit, engine.idx,
                                   version)
                if engine.idx not in moved and engine.idx in self._stays:
                    self._restay(engine.idx)

    # -- the watchdog's gauges (docs/domain/fleet-health.md#metrics) -------------------------------
    def gauges(self) -> dict[str, float]:
        if not self.managed:
            return {}
        counts = self._counts()
        out: dict[str, float] = {f"gen_fleet/shards/{s.value}": n for s, n in counts.items()}
        out["gen_fleet/serving_shards"] = len(self.health.serving_shards())
        out["gen_fleet/membership_epoch"] = self.health.membership_epoch
        for shard in self._shards():
            if shard.weight_version is not None:
                out[f"gen_fleet/shard_weight_version/{shard.dp_shard_idx}"] = shard.weight_version
        m = self.router.metrics()
        out.update({"router/requests_total": m.requests_total,
                    "router/no_healthy_backend_total": m.no_healthy_backend_total,
                    "router/backend_error_total": m.backend_error_total,
                    "router/serving_backends": m.serving_backends})
        return out

    # -- transitions into telemetry ---------------------------------------------------------------
    def _shards(self) -> tuple[Any, ...]:
        return tuple(self.health.snapshot().shards)

    def _counts(self) -> dict[ShardState, int]:
        counts = dict.fromkeys(ShardState, 0)
        for shard in self._shards():
            counts[ShardState(str(shard.state))] += 1
        return counts

    def _on_transition(self, transition: Transition) -> None:
        self._pending.append(transition)

    def _call(self, trigger: ShardTrigger, op: Callable[..., Any], *args: Any) -> set[int]:
        """One fleet-health call; its transitions become stays and events. Returns the shards
        that moved."""
        op(*args)
        moved: set[int] = set()
        if self._observed:
            pending, self._pending = self._pending, []
            for t in pending:
                self._close_and_open(t.shard, t.previous_state, t.trigger)
                moved.add(t.shard)
            return moved
        # a model without an observer hook: diff its snapshot against the last one seen
        for shard in self._shards():
            state = ShardState(str(shard.state))
            previous = self._last_states.get(shard.dp_shard_idx)
            if previous is not state:
                self._close_and_open(shard.dp_shard_idx, previous, trigger)
                moved.add(shard.dp_shard_idx)
        return moved

    def _close_and_open(self, idx: int, previous: ShardState | None,
                        trigger: ShardTrigger) -> None:
        shard = next(s for s in self._shards() if s.dp_shard_idx == idx)
        span = self._stays.pop(idx, None)
        if span is not None:
            self.w.tel.end(span, self.w.now)
        self._open_stay(shard, previous, trigger)

    def _restay(self, idx: int) -> None:
        """A refit that keeps a shard in its state starts a new stay, so each stay carries the
        weights it served with (what the stale-weights check compares)."""
        state = self._last_states[idx]
        self._close_and_open(idx, state, ShardTrigger.REFIT)

    def _open_stay(self, shard: Any, previous: ShardState | None,
                   trigger: ShardTrigger) -> None:
        idx = shard.dp_shard_idx
        state = ShardState(str(shard.state))
        self._last_states[idx] = state
        attrs: dict[str, Any] = {
            Attr.SHARD_IDX: idx, Attr.BACKEND_URL: self.engines[idx].url,
            Attr.FLEET_STATE: state.value, Attr.FLEET_TRIGGER: trigger.value,
            Attr.FLEET_MEMBERSHIP_EPOCH: self.health.membership_epoch,
            Attr.FLEET_PROBE_FAILURES: shard.consecutive_probe_failures,
            Attr.FLEET_REPORTED_FAILURES: shard.consecutive_reported_failures,
            Attr.FLEET_RESTART_ATTEMPTS: shard.restart_attempts}
        if previous is not None:
            attrs[Attr.FLEET_PREVIOUS_STATE] = previous.value
        if shard.weight_version is not None:
            attrs[Attr.FLEET_WEIGHT_VERSION] = shard.weight_version
        if shard.last_error is not None:
            attrs[Attr.FLEET_LAST_ERROR] = shard.last_error
        span = self._stays[idx] = self.w.tel.start(services.CONTROLLER, SpanName.SHARD_STATE,
                                                   self.w.now, attrs)
        if previous is not None and previous is not state:
            self.w.tel.event(span, EventName.FLEET_TRANSITION, self.w.now, attrs)

    def serving(self, idx: int) -> bool:
        return self._last_states.get(idx) in SERVING_STATES
