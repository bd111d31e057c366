"""NeMo-RL's ``GenerationFleetHealth``, driven from the engine with its real calling conventions.

The engine's fleet side speaks the reference model's surface (``replay.participants.
fleet_health``): transitions through an observer, a frozen ``FleetSnapshot``, a typed
``GenerationFleetExhausted``. The real class has none of that -- by design it is a pure state
machine whose transitions are only a ``print`` and a ``membership_epoch`` counter -- so
``RealFleetHealth`` bridges the two:

- it builds the class from the scenario's fleet config exactly as ``SingleController`` does:
  ``cls(shard_count=..., policy=FleetHealthPolicy(...), base_urls=[...], clock=...)``, all
  keyword-only, the clock the replay's virtual one;
- it calls the real conventions: ``record_probe(i, ok=..., error=...)``, ``report_failure(i,
  exc)`` with an exception rebuilt from the captured ``"Type: message"`` (as
  ``_drain_router_failures`` builds ``RuntimeError("router: N failed request(s) to URL")``),
  ``report_refit(i, weight_version=v)``, ``retire(i, reason=...)``;
- it recovers each transition by copying ``snapshot()`` before and after every call (the
  records it returns are the live objects) and tells the engine's observer, the trigger named
  by the call; the printed lines are captured, not echoed.

Not expressible through the real API, and so decided here: the real ``ShardHealth.last_error``
is ``""`` when there is none (the engine reads ``None``), and is never cleared, so a later
transition carries the previous error; the real ``weight_version`` starts at 0 before any refit.
"""

from __future__ import annotations

import builtins
import contextlib
import io
from collections.abc import Callable, Sequence
from typing import Any

from rolloutscope.replay.participants.fleet_health import (
    FleetSnapshot,
    GenerationFleetExhausted,
    ShardHealth,
    Transition,
)
from rolloutscope.vocabulary import ShardState, ShardTrigger

_TRIGGERS = {"record_probe_ok": ShardTrigger.PROBE_SUCCESS,
             "record_probe_failed": ShardTrigger.PROBE_FAILURE,
             "report_failure": ShardTrigger.REPORTED_FAILURE,
             "report_success": ShardTrigger.PROBE_SUCCESS,
             "mark_restarting": ShardTrigger.RESTART, "mark_loaded": ShardTrigger.LOADED,
             "report_refit": ShardTrigger.REFIT, "retire": ShardTrigger.RETIRE}


def exception_from(error: Any) -> BaseException:
    """The exception a captured failure string stood for: ``"RuntimeError: router: ..."`` is
    ``RuntimeError("router: ...")``; an unknown type name gets a class of that name."""
    if isinstance(error, BaseException):
        return error
    text = "" if error is None else str(error)
    name, sep, message = text.partition(": ")
    if not sep or not name.isidentifier():
        return RuntimeError(text)
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        cls = type(name, (RuntimeError,), {"__module__": "captured"})
    return cls(message)


def build_policy(policy_cls: type, config: Any) -> Any:
    """``FleetHealthPolicy`` from the scenario's ``FleetHealthConfig``: the four real keys."""
    return policy_cls(unhealthy_threshold=config.unhealthy_threshold,
                      healthy_threshold=config.healthy_threshold,
                      max_restart_attempts_per_shard=config.max_restart_attempts_per_shard,
                      min_healthy_shards=config.min_healthy_shards)


def _state(value: Any) -> ShardState:
    return ShardState(getattr(value, "value", value))


class RealFleetHealth:
    """The reference fleet-health surface over a real ``GenerationFleetHealth`` instance."""

    def __init__(self, inner: Any, *, num_shards: int, clock: Callable[[], float],
                 config: Any = None, observer: Callable[[Transition], None] | None = None,
                 exhausted_type: type[BaseException] = Exception) -> None:
        self.inner = inner
        self._n = num_shards
        self._clock = clock
        self._config = config
        self._observer = observer
        self._exhausted_type = exhausted_type
        self.printed: list[str] = []  # what the real class printed for its transitions
        for idx, shard in enumerate(self._read()):
            self._notify(idx, None, shard, ShardTrigger.INITIAL)

    # -- readers --------------------------------------------------------------------------------
    @property
    def config(self) -> Any:
        return self._config

    @property
    def membership_epoch(self) -> int:
        return int(self.inner.membership_epoch)

    def _read(self) -> list[ShardHealth]:
        # snapshot() hands out the live records: copy each field now
        return [ShardHealth(int(s.dp_shard_idx), s.base_url, _state(s.state),
                            int(s.consecutive_probe_failures),
                            int(s.consecutive_probe_successes),
                            int(s.consecutive_reported_failures), int(s.restart_attempts),
                            s.weight_version, s.last_ok_at, s.last_error or None)
                for s in self.inner.snapshot()]

    def serving_shards(self) -> tuple[int, ...]:
        return tuple(int(i) for i in self.inner.serving_shards())

    def serving_base_urls(self) -> tuple[str, ...]:
        return tuple(self.inner.serving_base_urls())

    def shard_for_base_url(self, url: str) -> int | None:
        return self.inner.shard_for_base_url(url)

    def snapshot(self) -> FleetSnapshot:
        return FleetSnapshot(self._clock(), self.membership_epoch,
                             getattr(self._config, "min_healthy_shards", 1), tuple(self._read()))

    def raise_if_exhausted(self) -> None:
        try:
            self._quiet(self.inner.raise_if_exhausted)
        except self._exhausted_type as exc:
            snap = self.snapshot()
            raise GenerationFleetExhausted(
                serving=len(snap.serving_shards), min_healthy_shards=snap.min_healthy_shards,
                counts=snap.counts) from exc

    # -- writers, in the real conventions -------------------------------------------------------
    def record_probe(self, idx: int, ok: bool, error: Any = None) -> None:
        self._call("record_probe_ok" if ok else "record_probe_failed",
                   lambda: self.inner.record_probe(idx, ok=ok, error="" if ok else
                                                   str(error or "")))

    def report_failure(self, idx: int, error: Any = None) -> None:
        exc = exception_from(error)
        self._call("report_failure", lambda: self.inner.report_failure(idx, exc))

    def report_success(self, idx: int) -> None:
        self._call("report_success", lambda: self.inner.report_success(idx))

    def mark_restarting(self, idx: int) -> None:
        self._call("mark_restarting", lambda: self.inner.mark_restarting(idx))

    def mark_loaded(self, idx: int) -> None:
        self._call("mark_loaded", lambda: self.inner.mark_loaded(idx))

    def report_refit(self, idx: int, weight_version: int) -> None:
        self._call("report_refit",
                   lambda: self.inner.report_refit(idx, weight_version=int(weight_version)))

    def retire(self, idx: int, reason: str) -> None:
        self._call("retire", lambda: self.inner.retire(idx, reason=reason))

    def _quiet(self, call: Callable[[], Any]) -> Any:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                return call()
        finally:
            self.printed.extend(line for line in out.getvalue().splitlines() if line)

    def _call(self, op: str, call: Callable[[], Any]) -> None:
        before = self._read() if self._observer is not None else None
        self._quiet(call)
        if before is None:
            return
        for idx, (old, new) in enumerate(zip(before, self._read())):
            if new.state is not old.state:
                trigger = ShardTrigger.RETIRE if new.state is ShardState.RETIRED \
                    else _TRIGGERS[op]
                self._notify(idx, old.state, new, trigger)

    def _notify(self, idx: int, previous: ShardState | None, now: ShardHealth,
                trigger: ShardTrigger) -> None:
        if self._observer is None:
            return
        self._observer(Transition(
            shard=idx, base_url=now.base_url, previous_state=previous, state=now.state,
            trigger=trigger, membership_epoch=self.membership_epoch,
            probe_failures=now.consecutive_probe_failures,
            reported_failures=now.consecutive_reported_failures,
            restart_attempts=now.restart_attempts, weight_version=now.weight_version,
            last_error=now.last_error, at=self._clock()))


def fleet_health_from_class(cls: type, module: Any) -> Callable[..., RealFleetHealth]:
    """An engine factory building ``cls`` (the real constructor) from the engine's spec."""
    policy_cls = getattr(module, "FleetHealthPolicy", None)
    if policy_cls is None:
        raise TypeError(f"{module.__name__} has no FleetHealthPolicy for {cls.__name__}")
    exhausted = getattr(module, "GenerationFleetExhausted", Exception)

    def build(*, num_shards: int, config: Any, clock: Callable[[], float],
              base_urls: Sequence[str], observer: Callable[[Transition], None] | None = None
              ) -> RealFleetHealth:
        inner = cls(shard_count=num_shards, policy=build_policy(policy_cls, config),
                    base_urls=list(base_urls), clock=clock)
        return RealFleetHealth(inner, num_shards=num_shards, clock=clock, config=config,
                               observer=observer, exhausted_type=exhausted)

    return build


def fleet_health_from_factory(make: Callable[..., Any],
                              check: Callable[[Any], Any]) -> Callable[..., RealFleetHealth]:
    """A user's factory (``make(num_shards=, config=, clock=, base_urls=)``, called with the
    ones it names) returning an object with the real API, which ``check`` vets."""

    def build(*, num_shards: int, config: Any, clock: Callable[[], float],
              base_urls: Sequence[str], observer: Callable[[Transition], None] | None = None
              ) -> RealFleetHealth:
        inner = check(make(num_shards=num_shards, config=config, clock=clock,
                           base_urls=tuple(base_urls)))
        return RealFleetHealth(inner, num_shards=num_shards, clock=clock, config=config,
                               observer=observer)

    return build
