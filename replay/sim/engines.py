"""The simulated generation engines, as they really are, and the policy calls on them.

The engines are ground truth (alive, wedged, slow, the weights they hold); the fleet-health
model and the router only learn of them through what the probe pump, the router's drained
failures and the weight syncs tell them.
"""

from __future__ import annotations

from typing import Any, Protocol

from rolloutscope.replay.event_engine import Timer
from rolloutscope.replay.participants.gym_client import ModelCallRetries
from rolloutscope.replay.scenario import WedgeMode
from rolloutscope.replay.sim.gym_run import Run

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


class ModelCallAnswers(Protocol):
    """Whom a policy call answers once Gym's client stops retrying it: the Gym side."""

    def generated(self, run: Run) -> None: ...
    def model_call_failed(self, run: Run, status: int) -> None: ...


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

    __slots__ = ("run", "answers", "duration_s", "retries", "engine", "timer", "span",
                 "transport_errors", "ended", "pending")

    def __init__(self, run: Run, duration_s: float, answers: ModelCallAnswers) -> None:
        self.run = run
        self.answers = answers
        self.duration_s = duration_s
        self.retries = ModelCallRetries()
        self.engine: Engine | None = None
        self.timer: Timer | None = None
        self.span: Any = None  # the open rl.router.request span of the current try
        self.transport_errors = 0
        self.ended = False
        self.pending: Any = None  # the current try's call on a real engine


def in_flight(engine: Engine) -> list[FleetCall]:
    """The engine's calls in a stable order (by model-call id)."""
    return sorted(engine.calls, key=lambda c: c.run.call_id or "")
