"""NeMo-RL's ``GenerationRouterImpl``, its request handler driven from the engine.

The real router is an aiohttp server; the replay drives its request path, not its socket. Each
request the engine routes runs the real ``_handle`` coroutine: it counts the request, picks the
backend (``_pick_backend``, least-outstanding), holds the in-flight count, and, when the
engine's simulated upstream call fails, turns the transport error into its answer through the
real ``_on_backend_error`` (500, or the no-healthy status once nothing serves; the reflex drop
when ``health_managed``). What is replaced is the I/O half only: the instance's ``_forward``
awaits the engine's verdict on the upstream call instead of opening an HTTP connection, and a
connection failure reaches ``_handle`` as the aiohttp ``ClientError`` it would be.

``_handle`` awaits nothing but ``_forward``, so each request is driven as a coroutine directly
(``send``/``throw``), at the engine's instant, with no event loop; a handler that awaited
anything else would be refused by name (``RouterAwaitError``).

Not expressible through the real API: the serving set and the per-backend in-flight counts are
private (``_serving``, ``_inflight``; read here for the reflex-drop flag and
``outstanding``); the pre-fix 504 (``router-500-not-504`` off) cannot happen -- the real
router always answers a failed backend itself.
"""

from __future__ import annotations

import contextlib
import io
from collections import deque
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any

from rolloutscope.replay.errors import ReplayError
from rolloutscope.replay.participants.router import (
    OK_STATUS,
    RouteDecision,
    RouterMetrics,
    RouterReply,
)
from rolloutscope.vocabulary import RouterOutcome


class RouterAwaitError(ReplayError):
    """The router's handler awaited something other than the forwarded call."""


class _Upstream:
    """What the handler's ``_forward`` awaits: the engine's verdict on one upstream call."""

    __slots__ = ("backend",)

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def __await__(self) -> Any:
        return (yield self)


class _Answer:
    """The upstream response ``_forward`` hands back on success."""

    status = OK_STATUS


def _transport_error(error: BaseException | None) -> BaseException:
    """The exception the real handler catches for a failed upstream call."""
    if isinstance(error, TimeoutError):
        return error
    import aiohttp

    if isinstance(error, aiohttp.ClientError):
        return error
    return aiohttp.ClientConnectionError(f"{type(error).__name__}: {error}"
                                         if error is not None else "connection failed")


class RealRouter:
    """The reference router surface over a real ``GenerationRouterImpl``."""

    def __init__(self, impl: Any, *, backends: Sequence[str], config: Any,
                 health_managed: bool, rebuild: Any = None) -> None:
        self.impl = impl
        self._backends = tuple(backends)
        self._config = config
        self._health_managed = health_managed
        self._rebuild = rebuild
        self._waiting: dict[str, deque[Coroutine[Any, Any, Any]]] = {
            b: deque() for b in self._backends}
        self.printed: list[str] = []
        impl._forward = self._forward  # the I/O half: the engine answers the upstream call

    async def _forward(self, request: Any, backend: str) -> Any:
        return await _Upstream(backend)

    # -- requests -------------------------------------------------------------------------------
    def route(self) -> RouteDecision:
        handler = self.impl._handle(object())
        try:
            waiting = handler.send(None)
        except StopIteration as done:  # answered without a backend
            return RouteDecision(None, done.value.status, RouterOutcome.NO_BACKEND)
        if not isinstance(waiting, _Upstream):
            handler.close()
            raise RouterAwaitError(f"GenerationRouterImpl._handle awaited {waiting!r}; the "
                                   f"replay drives only a handler that awaits _forward")
        self._waiting[waiting.backend].append(handler)
        return RouteDecision(waiting.backend, None, None)

    def complete(self, backend: str, *, ok: bool,
                 error: BaseException | None = None) -> RouterReply:
        handler = self._waiting[backend].popleft()
        serving_before = backend in self.impl._serving
        try:
            if ok:
                handler.send(_Answer())
            else:
                handler.throw(_transport_error(error))
        except StopIteration as done:
            response = done.value
        else:  # pragma: no cover - a handler that awaits twice
            handler.close()
            raise RouterAwaitError("GenerationRouterImpl._handle awaited again after _forward")
        status = int(response.status)
        if ok:
            return RouterReply(backend, status, RouterOutcome.OK, False, None)
        dropped = serving_before and backend not in self.impl._serving
        return RouterReply(backend, status, RouterOutcome.BACKEND_ERROR, dropped,
                           type(error).__name__ if error is not None else None)

    # -- the controller's side ------------------------------------------------------------------
    def set_serving_backends(self, urls: Iterable[str]) -> tuple[str, ...]:
        pushed = list(urls)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.impl.set_serving_backends(pushed)
        self.printed.extend(line for line in out.getvalue().splitlines() if line)
        return tuple(u for u in pushed if u not in self._backends)

    def drain_failures(self) -> dict[str, int]:
        return dict(self.impl.drain_backend_failures())

    def serving_backends(self) -> tuple[str, ...]:
        return tuple(u for u in self._backends if u in self.impl._serving)

    def outstanding(self, backend: str) -> int:
        return int(self.impl._inflight.get(backend, 0))

    def metrics(self) -> RouterMetrics:
        m = self.impl.metrics()
        return RouterMetrics(int(m["router/requests_total"]),
                             int(m["router/no_healthy_backend_total"]),
                             int(m["router/backend_error_total"]),
                             int(m["router/serving_backends"]))

    def restarted(self) -> RealRouter:
        """Ray recreating the actor: a new instance; requests in flight lose their handler."""
        for handlers in self._waiting.values():
            while handlers:
                handlers.popleft().close()
        impl = self._rebuild() if self._rebuild is not None else self.impl
        return RealRouter(impl, backends=self._backends, config=self._config,
                          health_managed=self._health_managed, rebuild=self._rebuild)


def router_from_class(cls: type) -> Any:
    """An engine factory building ``cls`` with the real keyword-only constructor."""

    def build(*, backends: Sequence[str], config: Any, health_managed: bool) -> RealRouter:
        def make() -> Any:
            return cls(backend_urls=list(backends), host="127.0.0.1",
                       port=int(getattr(config, "port_range_low", 6000)),
                       backend_timeout_s=float(config.backend_timeout_s),
                       connect_timeout_s=float(config.connect_timeout_s),
                       no_healthy_backend_status=int(config.no_healthy_backend_status),
                       health_managed=bool(health_managed))

        return RealRouter(make(), backends=backends, config=config,
                          health_managed=health_managed, rebuild=make)

    return build
