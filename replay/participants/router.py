"""The generation router NeMo-Gym talks to, as a pure model.

See docs/domain/fleet-health.md#router, and P4-P6 in docs/domain/incidents.md.

Gym is handed one fixed URL, the router's, and the router picks a vLLM backend per request. This
model makes the router's decisions and keeps its counters; the replay engine does the I/O. Per
request the engine calls ``route()``, which either names a backend (the engine then simulates
the upstream call) or answers at once with the no-healthy-backend status, and later
``complete(backend, ok=…, error=…)``, which gives the status Gym finally sees.

The rule this module keeps: the router never answers with a status that Gym's client retries
with a rising ceiling. No serving backend is 409 (the config refuses any status in Gym's retry
set), and a failed backend call is a deliberate 500, which Gym retries a bounded number of
times. Before the fix aiohttp answered for the router, so a backend timeout became 504, a
rate-limit status for Gym: an unbounded retry loop at ``backend_timeout_s`` per try.
``RouterConfig.router_500_not_504=False`` reproduces that.

Least-outstanding prefers a backend that fails fast (it is always back at zero in flight), so a
failing backend is dropped from the local serving set until the next membership push, when the
router is ``health_managed``. Without fleet health nothing ever pushes, so the drop would be
permanent and is not armed. Membership pushes replace the set in full, and a router that Ray
restarts comes up with every backend serving, so one push after a restart corrects it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolloutscope.config import ConfigProblem, build, check_types
from rolloutscope.vocabulary import RouterOutcome
from rolloutscope.replay.participants.gym_client import RETRY_ERROR_CODES

OK_STATUS = 200
BACKEND_ERROR_STATUS = 500
# What aiohttp answers when a handler raises a TimeoutError (the pre-fix router).
GATEWAY_TIMEOUT_STATUS = 504
NO_HEALTHY_BACKEND_ERROR = "no healthy generation backend"


class RouterConfigError(ValueError):
    """A router config that would misbehave; ``key`` names the offending key when one does."""

    def __init__(self, message: str, *, key: str | None = None,
                 detail: str | None = None) -> None:
        self.key = key
        self.detail = detail or message  # what is wrong, without the key's name
        super().__init__(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterConfig:
    """``async_rl.generation_router`` (docs/domain/fleet-health.md#config), plus one replay variant
    switch.

    Every real key is accepted so a real config block replays unchanged; the port range is
    validated but plays no part in a replay.
    """

    enabled: bool = False
    port_range_low: int = 6000
    port_range_high: int = 6099
    backend_timeout_s: float = 600.0
    connect_timeout_s: float = 5.0
    no_healthy_backend_status: int = 409
    # Replay variant, not a real key: False answers 504 on a backend timeout, as aiohttp did
    # before the router handled its own errors.
    router_500_not_504: bool = True

    def __post_init__(self) -> None:
        check_types(self, fail=_refused)
        if not 0 < self.port_range_low <= self.port_range_high <= 65535:
            raise RouterConfigError(
                f"port range {self.port_range_low}..{self.port_range_high} is empty or out of "
                f"bounds", key="port_range_low")
        if not 0 < self.connect_timeout_s <= self.backend_timeout_s:
            raise RouterConfigError(
                f"connect_timeout_s={self.connect_timeout_s} must be > 0 and <= "
                f"backend_timeout_s={self.backend_timeout_s}", key="connect_timeout_s")
        status = self.no_healthy_backend_status
        if status in RETRY_ERROR_CODES:
            # Gym would retry it, and for its rate-limit subset raise its own ceiling each
            # time: the hang the router exists to remove.
            raise RouterConfigError(
                f"no_healthy_backend_status={status} is in NeMo-Gym's retry set "
                f"{sorted(RETRY_ERROR_CODES)}; Gym would retry it instead of failing the "
                f"rollout", key="no_healthy_backend_status")
        if not 400 <= status <= 599:
            raise RouterConfigError(
                f"no_healthy_backend_status={status} is not an HTTP error status",
                key="no_healthy_backend_status")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> RouterConfig:
        """Build from a config block, refusing keys it does not know."""
        return build(cls, mapping, path="generation_router", fail=_refused)


def _refused(problem: ConfigProblem) -> RouterConfigError:
    return RouterConfigError(problem.message, key=problem.key, detail=problem.detail)


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """The router's pick for one inbound request: a backend to forward to, or an answer now."""

    backend: str | None
    status: int | None  # set only when the request is answered without a backend
    outcome: RouterOutcome | None  # NO_BACKEND when answered now; None while forwarded
    body: Mapping[str, Any] = field(default_factory=dict)

    @property
    def forwarded(self) -> bool:
        return self.backend is not None


@dataclass(frozen=True, slots=True)
class RouterReply:
    """The answer Gym sees for a forwarded request (the ``rl.router.request`` span's content)."""

    backend: str
    status: int
    outcome: RouterOutcome
    reflex_drop: bool  # the backend left the local serving set because of this request
    error_type: str | None
    body: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RouterMetrics:
    """The ``router/*`` gauges the stall watchdog publishes."""

    requests_total: int
    no_healthy_backend_total: int
    backend_error_total: int
    serving_backends: int


class UnknownBackendError(LookupError):
    """``complete`` named a backend with nothing in flight on this router (a caller bug, or a
    request that began on the router's previous incarnation)."""


class GenerationRouter:
    """Least-outstanding routing over the serving backends, ties to the lowest index."""

    def __init__(self, *, backends: Sequence[str], config: RouterConfig,
                 health_managed: bool) -> None:
        if not backends:
            raise ValueError("a router needs at least one backend")
        if len(set(backends)) != len(backends):
            raise ValueError(f"duplicate backend URLs: {list(backends)}")
        self._backends = tuple(backends)
        self._index = {url: i for i, url in enumerate(self._backends)}
        self._config = config
        self._health_managed = health_managed
        # Everything below is what a restarted actor rebuilds from scratch.
        self._serving = set(self._backends)
        self._outstanding = dict.fromkeys(self._backends, 0)
        self._failures = dict.fromkeys(self._backends, 0)
        self._requests_total = 0
        self._no_healthy_backend_total = 0
        self._backend_error_total = 0

    @property
    def backends(self) -> tuple[str, ...]:
        return self._backends

    @property
    def config(self) -> RouterConfig:
        return self._config

    @property
    def health_managed(self) -> bool:
        return self._health_managed

    def serving_backends(self) -> tuple[str, ...]:
        return tuple(url for url in self._backends if url in self._serving)

    def outstanding(self, backend: str) -> int:
        return self._outstanding[backend]

    def metrics(self) -> RouterMetrics:
        return RouterMetrics(self._requests_total, self._no_healthy_backend_total,
                             self._backend_error_total, len(self._serving))

    def restarted(self) -> GenerationRouter:
        """The router after Ray recreates its actor: same backends and config, every backend
        serving, counters and in-flight requests gone."""
        return GenerationRouter(backends=self._backends, config=self._config,
                                health_managed=self._health_managed)

    # -- requests

    def route(self) -> RouteDecision:
        self._requests_total += 1
        serving = self.serving_backends()
        if not serving:
            return self._no_backend()
        backend = min(serving, key=lambda url: (self._outstanding[url], self._index[url]))
        self._outstanding[backend] += 1
        return RouteDecision(backend, None, None)

    def complete(self, backend: str, *, ok: bool,
                 error: BaseException | None = None) -> RouterReply:
        """The upstream call to ``backend`` ended. ``error`` is the transport exception when it
        failed; a ``TimeoutError`` is the backend timeout."""
        if self._outstanding.get(backend, 0) < 1:
            raise UnknownBackendError(f"no request in flight to {backend!r}")
        self._outstanding[backend] -= 1
        if ok:
            return RouterReply(backend, OK_STATUS, RouterOutcome.OK, False, None)
        self._backend_error_total += 1
        self._failures[backend] += 1
        error_type = type(error).__name__ if error is not None else None
        reflex_drop = self._health_managed and backend in self._serving
        if reflex_drop:
            self._serving.discard(backend)
        if reflex_drop and not self._serving:
            # Gym would only re-send a 500 into an empty set; answer what it would then get.
            self._no_healthy_backend_total += 1
            return RouterReply(backend, self._config.no_healthy_backend_status,
                               RouterOutcome.BACKEND_ERROR, True, error_type,
                               self._no_backend_body())
        if isinstance(error, TimeoutError) and not self._config.router_500_not_504:
            status = GATEWAY_TIMEOUT_STATUS
        else:
            status = BACKEND_ERROR_STATUS
        detail = f"{error_type}: {error}" if error is not None else "unknown error"
        return RouterReply(backend, status, RouterOutcome.BACKEND_ERROR, reflex_drop, error_type,
                           {"error": f"backend failed: {detail}", "backend": backend})

    # -- the controller's side

    def set_serving_backends(self, urls: Iterable[str]) -> tuple[str, ...]:
        """Replace the serving set in full with the pushed URLs this router serves.

        Returns the pushed URLs it does not serve, which it ignores; the caller reports them
        (``policy router: ignoring N pushed URL(s) it does not serve: …``).
        """
        pushed = list(urls)
        self._serving = {url for url in pushed if url in self._index}
        return tuple(url for url in pushed if url not in self._index)

    def drain_failures(self) -> dict[str, int]:
        """Per-backend failure counts since the last drain, zero counts left out; resets them."""
        drained = {url: n for url, n in self._failures.items() if n}
        self._failures = dict.fromkeys(self._backends, 0)
        return drained

    # -- internals

    def _no_backend(self) -> RouteDecision:
        self._no_healthy_backend_total += 1
        return RouteDecision(None, self._config.no_healthy_backend_status,
                             RouterOutcome.NO_BACKEND, self._no_backend_body())

    def _no_backend_body(self) -> dict[str, Any]:
        return {"error": NO_HEALTHY_BACKEND_ERROR, "backends": list(self._backends)}


def ignoring_line(ignored: Sequence[str]) -> str:
    """The router's log line for pushed URLs it does not serve."""
    return (f"policy router: ignoring {len(ignored)} pushed URL(s) it does not serve: "
            f"{', '.join(ignored)}")


__all__ = [
    "BACKEND_ERROR_STATUS", "GATEWAY_TIMEOUT_STATUS", "GenerationRouter", "NO_HEALTHY_BACKEND_ERROR",
    "OK_STATUS", "RouteDecision", "RouterConfig", "RouterConfigError", "RouterMetrics",
    "RouterReply", "UnknownBackendError", "ignoring_line",
]
