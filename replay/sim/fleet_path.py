"""A Gym run's policy call through the generation fleet, across its client's retries.

With fleet health on, the call goes through the router (least-outstanding over the serving
backends; a failed backend call answered 500 or, before the fix, 504) and Gym's status loop
retries what its client retries. Without it Gym round-robins over the fixed backend list, and a
refused or dropped connection enters Gym's transport loop: retried every 0.5 s without limit
and with no HTTP timeout, so the call ends only if the engine comes back.

On a real engine (a wall-clock replay) the engine serves each try; the router's timeout is still
the replay's, in virtual time.
"""

from __future__ import annotations

from typing import Any

from rolloutscope.vocabulary import RouterOutcome
from rolloutscope.replay.backends.base import EngineUnreachable, GenerationSession
from rolloutscope.replay.scenario import WedgeMode
from rolloutscope.replay.sim.engines import (
    FAST_FAILURE_S,
    OK_STATUS,
    TRANSPORT_RETRIES_PER_LINE,
    TRANSPORT_RETRY_S,
    VLLM_ERROR_STATUS,
    ClientConnectorError,
    Engine,
    FleetCall,
    ModelCallAnswers,
    ServerDisconnectedError,
    in_flight,
)
from rolloutscope.replay.sim.fleet_recorder import FleetRecorder
from rolloutscope.replay.sim.ports import RouterModel, Timeline
from rolloutscope.replay.sim.gym_run import Run


class GenerationPath:
    def __init__(self, *, engines: list[Engine], router: RouterModel | None,
                 backend_timeout_s: float, timeline: Timeline,
                 generation: GenerationSession | None, recorder: FleetRecorder) -> None:
        """``router``: None without fleet health (Gym round-robins over the engines)."""
        self._engines = engines
        self._by_url = {e.url: e for e in engines}
        self.router = router
        self._managed = router is not None
        self._backend_timeout_s = backend_timeout_s
        self._timeline = timeline
        self._generation = generation
        self._rec = recorder
        self._rr = 0

    # -- FleetForGym ------------------------------------------------------------------------------
    def model_call(self, run: Run, duration_s: float, answers: ModelCallAnswers) -> FleetCall:
        call = FleetCall(run, duration_s, answers)
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
            if self.router is not None:
                self._rec.request_ended(call, None, None, "CancelledError")

    # -- what the faults do to calls in flight ----------------------------------------------------
    def engine_died(self, engine: Engine) -> None:
        """Every call on a killed engine loses its connection."""
        for call in in_flight(engine):
            self.upstream_failed(call, ServerDisconnectedError("Server disconnected"))

    def router_restarted(self) -> None:
        """Ray recreated the router actor: it comes back with every backend serving, and
        requests in flight lost their connection, which Gym's transport loop re-sends."""
        if self.router is None:
            return
        self.router = self.router.restarted()
        self._rec.fault("router_restart", "the router actor came back with every backend serving")
        for engine in self._engines:
            for call in in_flight(engine):
                self._detach(call)
                self._rec.request_ended(call, None, RouterOutcome.BACKEND_ERROR,
                                        "ServerDisconnectedError")
                call.timer = self._timeline.after(TRANSPORT_RETRY_S, self._try, call)

    # -- one try ----------------------------------------------------------------------------------
    def _try(self, call: FleetCall) -> None:
        call.timer = None
        if call.ended:
            return
        if self.router is None:
            engine = self._engines[self._rr % len(self._engines)]
            self._rr += 1
            self._upstream(call, engine)
            return
        decision = self.router.route()
        if not decision.forwarded:
            self._rec.request_refused(call, decision.status)
            self._answered(call, decision.status)
            return
        engine = self._by_url[decision.backend]
        self._rec.request_forwarded(call, engine)
        self._upstream(call, engine)

    def _upstream(self, call: FleetCall, engine: Engine) -> None:
        """The HTTP call to one engine, from the router or from Gym directly."""
        call.engine = engine
        engine.calls.add(call)
        timeout = self._backend_timeout_s if self._managed else None
        gen = self._generation
        after = self._timeline.after
        if gen is not None and engine.wedge is None:
            # a real engine serves the try (a killed shard's endpoint refuses it for real); the
            # router's timeout is still the replay's, in virtual time
            if timeout is not None:
                call.timer = after(timeout, self.upstream_failed, call,
                                   TimeoutError(f"no answer in {timeout:g}s"))
            turn = call.run.turns[call.run.turn]
            call.pending = gen.submit(call_id=call.run.call_id or "", turn=turn,
                                      shard=engine.idx, captured_s=call.duration_s,
                                      on_done=lambda result, took: self._real_done(call, result,
                                                                                   took))
            return
        if not engine.alive:
            call.timer = after(FAST_FAILURE_S, self.upstream_failed, call,
                               ClientConnectorError("Connect call failed"))
        elif engine.wedge is WedgeMode.FAIL:
            call.timer = after(FAST_FAILURE_S, self.upstream_failed, call,
                               ServerDisconnectedError("engine core is dead"))
        elif engine.wedge is WedgeMode.HANG:
            if timeout is not None:  # Gym's own client has no HTTP timeout: it waits for ever
                call.timer = after(timeout, self.upstream_failed, call,
                                   TimeoutError(f"no answer in {timeout:g}s"))
        else:
            took = call.duration_s * engine.slowdown
            if timeout is not None and took > timeout:
                call.timer = after(timeout, self.upstream_failed, call,
                                   TimeoutError(f"no answer in {timeout:g}s"))
            else:
                call.timer = after(took, self._upstream_ok, call)

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
            assert self._generation is not None
            self._generation.cancel(call.pending)
            call.pending = None

    def _real_done(self, call: FleetCall, result: Any, took_s: float) -> None:
        """A real engine answered the try (on the engine's thread, at the wall clock's time)."""
        call.pending = None
        engine = call.engine
        if engine is None:
            return
        if result.error is not None:
            error = result.error
            self.upstream_failed(call, ClientConnectorError(str(error))
                                 if isinstance(error, EngineUnreachable) else error)
            return
        if engine.slowdown > 1.0:  # a slow shard: the rest of its slowdown, in virtual time
            if call.timer is not None:
                call.timer.cancel()
            call.timer = self._timeline.after(took_s * (engine.slowdown - 1.0),
                                              self._upstream_ok, call)
            return
        self._upstream_ok(call)

    def _end_try(self, call: FleetCall) -> None:
        engine = self._detach(call)
        if engine is not None and self.router is not None:
            self.router.complete(engine.url, ok=True)  # a dropped client frees its slot

    def _upstream_ok(self, call: FleetCall) -> None:
        if call.timer is not None:
            call.timer.cancel()  # a real engine's answer beat the router's timeout
        call.timer = None
        engine = call.engine
        assert engine is not None
        engine.calls.discard(call)
        call.engine = None
        if self.router is not None:
            reply = self.router.complete(engine.url, ok=True)
            self._rec.request_ended(call, reply.status, reply.outcome, None)
        self._answered(call, OK_STATUS)

    def upstream_failed(self, call: FleetCall, error: BaseException) -> None:
        if call.timer is not None:
            call.timer.cancel()
        call.timer = None
        self._drop_pending(call)  # the router gave up on a real call: drop its answer
        engine = call.engine
        if engine is None:
            return
        engine.calls.discard(call)
        call.engine = None
        if self.router is not None:
            reply = self.router.complete(engine.url, ok=False, error=error)
            self._rec.request_ended(call, reply.status, reply.outcome, reply.error_type,
                                    reply.reflex_drop)
            self._answered(call, reply.status)
        elif isinstance(error, ConnectionError):
            self._transport_retry(call, type(error).__name__)
        else:  # an engine's own error status, when a real one answered
            self._answered(call, getattr(error, "status", VLLM_ERROR_STATUS))

    # -- Gym's client ---------------------------------------------------------------------------
    def _answered(self, call: FleetCall, status: int) -> None:
        """Gym's status loop sees one answer."""
        verdict = call.retries.observe(status)
        if verdict.kind is not None:
            self._rec.call_retried(call, status, verdict)
        if verdict.retry:
            call.timer = self._timeline.after(verdict.sleep_s, self._try, call)
            return
        call.ended = True
        if status == OK_STATUS:
            call.answers.generated(call.run)
        else:
            call.answers.model_call_failed(call.run, status)

    def _transport_retry(self, call: FleetCall, error: str) -> None:
        """Gym's transport loop: no cap, no timeout; one line per 100 errors."""
        call.transport_errors += 1
        if call.transport_errors % TRANSPORT_RETRIES_PER_LINE == 1:
            self._rec.transport_retried(call, error)
        # the next 99 retries hit the same dead endpoint; jump to the one that prints
        call.timer = self._timeline.after(
            TRANSPORT_RETRY_S * TRANSPORT_RETRIES_PER_LINE, self._transport_line, call, error)
        call.transport_errors += TRANSPORT_RETRIES_PER_LINE - 1

    def _transport_line(self, call: FleetCall, error: str) -> None:
        call.timer = None
        if not call.ended:
            self._transport_retry(call, error)
