"""Rollout deadlines that record themselves (docs/domain/rollouts-and-deadlines.md#deadlines).

``Deadline`` is a drop-in for the controller's ``_Deadline``::

    async with Deadline(timeouts.rollout_s, "NeMo-Gym prompt group", tracer=tracer):
        ...

Same semantics: ``seconds=None`` is no deadline at all (no timer, no span); expiry cancels the
guarded work and raises ``RolloutTimeout("{description} exceeded {seconds}s")`` (or the
controller's own type, passed as ``timeout_error``); a ``TimeoutError`` raised by the guarded
code itself is not relabelled. Like ``asyncio.timeout``, it fires by cancelling the task that
entered it and turns only its own cancellation into the timeout.

Each live deadline is an ``rl.deadline`` span, parented to the span current when it was
entered and shown open in live views once it has lasted ``OPEN_MARKER_AFTER_S``, with
``rl.deadline.start``, ``.suspend``, ``.resume``, ``.fire`` (carrying ``state_when_fired`` when the caller says how to read it) and ``.cancel`` events; its
end carries the outcome, the budget consumed and the time spent suspended.

``DeadlineRegistry`` is the ``RequestDeadlineRegistry`` with the fix NVIDIA-NeMo/RL #4266's
incident write-up calls for (P1, docs/domain/incidents.md): holders are
counted, so a second ``suspend`` is recorded and a ``resume`` restarts the clocks only when the
last holder lets go. The rule it keeps: a suspended deadline consumes no budget and cannot fire.
Handed the controller's own registry as ``inner``, it forwards ``add``/``discard`` and only the
first ``suspend`` and the last ``resume``, which turns the single-flag registry into a counted
one without editing it.

Time comes only from the injected clock (``LoopClock`` by default, ``ManualClock`` in tests);
span timestamps are the wall time at entry plus clock time since.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, StatusCode, Tracer

from rolloutscope.clock import DeadlineClock, LoopClock, TimerHandle
from rolloutscope.collectors.instrument.guard import InstrumentFailures
from rolloutscope.collectors.instrument.markers import OPEN_MARKER_AFTER_S, emit_open_marker
from rolloutscope.vocabulary import (
    Attr,
    DeadlineHolder,
    DeadlineKind,
    DeadlineOutcome,
    EventName,
    SpanName,
    StateWhenFired,
)

TRACER_NAME = "rolloutscope.instrument.deadlines"
# The controller's descriptions (docs/domain/rollouts-and-deadlines.md#deadlines) name the kind
# when the caller does not.
KIND_BY_DESCRIPTION = {
    "NeMo-Gym prompt group": DeadlineKind.ROLLOUT,
    "generation turn": DeadlineKind.GENERATION,
    "environment step": DeadlineKind.ENV,
}
# a timer may run a hair early on a float clock; a deadline this close to due has fired
_DUE_EPSILON_S = 1e-9

StateReader = Callable[[], "StateWhenFired | str"]


class RolloutTimeout(TimeoutError):
    """A deadline expired: an INFRA failure in the controller's taxonomy."""

    def __init__(self, description: str, seconds: float) -> None:
        self.description = description
        self.seconds = seconds
        super().__init__(f"{description} exceeded {seconds}s")


class Deadline:
    """One ``_Deadline``: a budget over the guarded work, minus the time spent suspended."""

    def __init__(self, seconds: float | None, description: str, *,
                 tracer: Tracer | None = None, clock: DeadlineClock | None = None,
                 registry: DeadlineRegistry | None = None, kind: DeadlineKind | str | None = None,
                 deadline_id: str | None = None, attributes: Mapping[str, Any] | None = None,
                 state_when_fired: StateReader | StateWhenFired | str | None = None,
                 timeout_error: Callable[[str, float], BaseException] = RolloutTimeout,
                 time_ns: Callable[[], int] = time.time_ns) -> None:
        self.seconds = seconds
        self.description = description
        self._tracer = tracer
        self._clock = clock
        self._registry = registry
        self._kind = kind if kind is not None else KIND_BY_DESCRIPTION.get(description)
        self._deadline_id = deadline_id
        self._attributes = attributes
        self._state_when_fired = state_when_fired
        self._timeout_error = timeout_error
        self._time_ns = time_ns
        self._task: asyncio.Task | None = None
        self._cancelling = 0
        self._timer: TimerHandle | None = None
        self._marker: TimerHandle | None = None
        self._span: Span | None = None
        self._wall0 = 0
        self._t0 = 0.0
        self._used_s = 0.0  # budget consumed before the current running stretch
        self._since = 0.0  # start of the current running or suspended stretch
        self.running = False
        self.suspended_s = 0.0
        self.fired = False
        self.fired_state: str | None = None
        self.outcome: DeadlineOutcome | None = None
        self.failures = InstrumentFailures("deadline")

    # -- readers

    @property
    def clock(self) -> DeadlineClock:
        if self._clock is None:
            self._clock = LoopClock()
        return self._clock

    @property
    def remaining_s(self) -> float | None:
        if self.seconds is None:
            return None
        used = self._used_s + (self.clock.now() - self._since if self.running else 0.0)
        return self.seconds - used

    @property
    def suspended(self) -> bool:
        return self.outcome is None and self._task is not None and not self.running

    # -- the context manager

    async def __aenter__(self) -> Deadline:
        if self.seconds is None:
            return self
        self._task = asyncio.current_task()
        if self._task is None:
            raise RuntimeError("Deadline must be entered inside an asyncio task")
        self._cancelling = self._task.cancelling()
        now = self.clock.now()
        self._t0 = self._since = now
        self.running = True
        self._begin_span(now)
        if self._span is not None:
            self._marker = self.clock.call_at(now + OPEN_MARKER_AFTER_S, self._mark_open)
        if self._registry is not None:
            self._registry.add(self)  # suspends it at once if the registry is held
        if self.running:
            self._arm()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: Any) -> bool:
        if self.seconds is None:
            return False
        for timer in (self._timer, self._marker):
            if timer is not None:
                timer.cancel()
        self._timer = self._marker = None
        if self._registry is not None:
            self._registry.discard(self)
        if self.fired:
            # Our own cancellation becomes the timeout; anything else the body did stands.
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                self._finish(DeadlineOutcome.FIRED)
                raise self._timeout_error(self.description, self.seconds) from exc
            self._finish(DeadlineOutcome.FIRED if exc_type is None else DeadlineOutcome.ERROR,
                         exc)
            return False
        if exc_type is None:
            self._finish(DeadlineOutcome.COMPLETED)
        elif issubclass(exc_type, asyncio.CancelledError):
            self._event(EventName.DEADLINE_CANCEL, {})
            self._finish(DeadlineOutcome.CANCELLED)
        else:  # a TimeoutError from the guarded code included: not relabelled
            self._finish(DeadlineOutcome.ERROR, exc)
        return False

    # -- suspend / resume (driven by DeadlineRegistry, or by an inner registry directly)

    def suspend(self) -> None:
        """Stop consuming budget. Idempotent."""
        if not self.running or self.outcome is not None:
            return
        now = self.clock.now()
        self._used_s += now - self._since
        self._since = now
        self.running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def resume(self) -> None:
        """Consume budget again from now. Idempotent."""
        if self.running or self.outcome is not None or self._task is None:
            return
        now = self.clock.now()
        self.suspended_s += now - self._since
        self._since = now
        self.running = True
        self._arm()

    def _held(self, *, holder: DeadlineHolder | str, holders_count: int, suspend: bool,
              change: bool) -> None:
        """A holder came or went: record it, and stop or restart the clock if ``change``."""
        if change:
            self.suspend() if suspend else self.resume()
        self._event(EventName.DEADLINE_SUSPEND if suspend else EventName.DEADLINE_RESUME,
                    {Attr.DEADLINE_HOLDER: str(getattr(holder, "value", holder)),
                     Attr.DEADLINE_HOLDERS_COUNT: holders_count})

    # -- internals

    def _arm(self) -> None:
        due = self._since + (self.seconds - self._used_s)
        self._timer = self.clock.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self.running or self.outcome is not None or self.fired:
            return
        remaining = self.remaining_s
        if remaining is not None and remaining > _DUE_EPSILON_S:
            self._arm()  # woken early: wait out the rest
            return
        self.fired = True
        self.fired_state = self._read_state()
        attrs: dict[str, Any] = {Attr.DEADLINE_REMAINING_S: 0.0}
        if self.fired_state is not None:
            attrs[Attr.DEADLINE_STATE_WHEN_FIRED] = self.fired_state
        self._event(EventName.DEADLINE_FIRE, attrs)
        self._task.cancel()

    def _read_state(self) -> str | None:
        reader = self._state_when_fired
        if reader is None:
            return None
        try:
            state = reader() if callable(reader) else reader
            return str(getattr(state, "value", state))
        except Exception as exc:  # noqa: BLE001 - the caller's reader must not break the fire
            self.failures.record(exc)
            return StateWhenFired.UNKNOWN.value

    def _ts(self, now: float) -> int:
        return self._wall0 + round((now - self._t0) * 1e9)

    def _begin_span(self, now: float) -> None:
        try:
            self._wall0 = self._time_ns()
            tracer = self._tracer if self._tracer is not None else trace.get_tracer(TRACER_NAME)
            self._tracer = tracer
            attrs: dict[str, Any] = dict(self._attributes or {})
            if self._deadline_id is not None:
                attrs[Attr.DEADLINE_ID] = self._deadline_id
            if self._kind is not None:
                attrs[Attr.DEADLINE_KIND] = str(getattr(self._kind, "value", self._kind))
            attrs[Attr.DEADLINE_BUDGET_S] = float(self.seconds)
            attrs[Attr.DEADLINE_DESCRIPTION] = self.description
            attrs[Attr.DEADLINE_STARTED_AT] = self._wall0 / 1e9
            self._span = tracer.start_span(SpanName.RL_DEADLINE, attributes=attrs,
                                           start_time=self._wall0)
            self._span.add_event(EventName.DEADLINE_START, timestamp=self._wall0)
        except Exception as exc:  # noqa: BLE001 - never raise into the observed process
            self._span = None
            self.failures.record(exc)

    def _mark_open(self) -> None:
        """Still live after OPEN_MARKER_AFTER_S: show it in the live views."""
        self._marker = None
        if self._span is None or self.outcome is not None or not self._span.is_recording():
            return  # ended, or a span that records nothing (sampled out, or no SDK)
        try:
            emit_open_marker(self._tracer, self._span)
        except Exception as exc:  # noqa: BLE001
            self.failures.record(exc)

    def _event(self, name: str, attrs: Mapping[str, Any]) -> None:
        if self._span is None:
            return
        try:
            self._span.add_event(name, attributes=attrs, timestamp=self._ts(self.clock.now()))
        except Exception as exc:  # noqa: BLE001
            self.failures.record(exc)

    def _finish(self, outcome: DeadlineOutcome, exc: BaseException | None = None) -> None:
        now = self.clock.now()
        if self.running:
            self._used_s += now - self._since
        elif self.outcome is None:
            self.suspended_s += now - self._since
        self._since = now
        self.running = False
        self.outcome = outcome
        if self._span is None:
            return
        try:
            attrs: dict[str, Any] = {
                Attr.DEADLINE_OUTCOME: outcome.value,
                Attr.DEADLINE_SUSPENDED_S: round(self.suspended_s, 9),
                Attr.DEADLINE_ACTIVE_S: round(min(self._used_s, self.seconds), 9),
            }
            if self.fired_state is not None:
                attrs[Attr.DEADLINE_STATE_WHEN_FIRED] = self.fired_state
            if exc is not None and outcome is DeadlineOutcome.ERROR:
                attrs[Attr.ERROR_TYPE] = type(exc).__name__
                self._span.set_status(StatusCode.ERROR, str(exc))
            self._span.set_attributes(attrs)
            self._span.end(end_time=self._ts(now))
        except Exception as err:  # noqa: BLE001
            self.failures.record(err)


class DeadlineRegistry:
    """``RequestDeadlineRegistry`` with counted holders (the fix P1 needs, NVIDIA-NeMo/RL #4266)."""

    def __init__(self, inner: Any | None = None) -> None:
        self._inner = inner
        self._live: dict[int, Deadline] = {}
        self._holders: Counter[str] = Counter()
        self._last_holder: DeadlineHolder | str | None = None
        self.failures = InstrumentFailures("deadline registry")

    @property
    def holders_count(self) -> int:
        return sum(self._holders.values())

    @property
    def suspended(self) -> bool:
        return self.holders_count > 0

    def live(self) -> tuple[Deadline, ...]:
        return tuple(self._live.values())

    def add(self, deadline: Deadline) -> None:
        self._live[id(deadline)] = deadline
        if self._inner is not None:
            self._inner.add(deadline)
        if self.suspended:
            # its work cannot progress while a holder has admission closed either
            deadline._held(holder=self._last_holder, holders_count=self.holders_count,
                           suspend=True, change=True)

    def discard(self, deadline: Deadline) -> None:
        if self._live.pop(id(deadline), None) is not None and self._inner is not None:
            self._inner.discard(deadline)

    def suspend(self, holder: DeadlineHolder | str) -> int:
        """``holder`` stops every live deadline's clock; returns the holder count after."""
        key = str(getattr(holder, "value", holder))
        first = self.holders_count == 0
        self._holders[key] += 1
        self._last_holder = holder
        count = self.holders_count
        for deadline in tuple(self._live.values()):
            deadline._held(holder=holder, holders_count=count, suspend=True, change=first)
        if first and self._inner is not None:
            self._inner.suspend()
        return count

    def resume(self, holder: DeadlineHolder | str) -> int:
        """``holder`` lets go; the clocks restart only when it was the last holder."""
        key = str(getattr(holder, "value", holder))
        if self._holders[key] <= 0:
            # a caller bug, but stopping the run over it would be worse than the bug
            self.failures.record(ValueError(f"resume by {key} without a matching suspend"))
            return self.holders_count
        self._holders[key] -= 1
        count = self.holders_count
        for deadline in tuple(self._live.values()):
            deadline._held(holder=holder, holders_count=count, suspend=False, change=count == 0)
        if count == 0 and self._inner is not None:
            self._inner.resume()
        return count
