"""Clocks: what time-reading code is handed, so that nothing reads the wall clock on its own.

One module for every clock the project passes around (ground floor: it imports nothing above):

- ``Clock``: ``now()`` in seconds. The checkpoint participants, the deadline registry and the
  coordinator read it.
- ``TimeFn``: a bare callable returning seconds, the shape ``GenerationFleetHealth`` takes.
- ``DeadlineClock``: ``now()`` plus ``call_at(when, callback)``, what the controller's
  ``_Deadline`` uses through ``asyncio.timeout``.
- ``LoopClock``: the running asyncio loop's clock, the live implementation of ``DeadlineClock``.
- ``ManualClock``: moves only when told to; satisfies both protocols. Timers armed on it run on
  ``advance``/``set``, in due order, with ``now()`` reading each timer's due time while it runs.

The replay engine's ``Scheduler`` owns a ``ManualClock`` and writes its ``t`` directly, once per
event, on its hot path; it keeps its own event queue, so nothing is ever armed on that clock and
a read of ``clock.t`` stays one attribute load.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Protocol

TimeFn = Callable[[], float]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the start of the run (or monotonic seconds, live)."""
        ...


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class DeadlineClock(Clock, Protocol):
    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` once ``now() >= when``, unless the handle is cancelled first."""
        ...


class LoopClock:
    """The running asyncio loop's clock."""

    __slots__ = ()

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_at(when, callback)


class _ManualTimer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to: the engine's virtual clock and every test's."""

    __slots__ = ("t", "_timers", "_seq")

    def __init__(self, t: float = 0.0) -> None:
        self.t = t
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _ManualTimer(when, callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def advance(self, dt: float) -> None:
        if dt < 0:
            raise ValueError("a clock does not go backwards")
        self._run_until(self.t + dt)

    def set(self, t: float) -> None:
        if t < self.t:
            raise ValueError(f"a clock does not go backwards ({t} < {self.t})")
        self._run_until(t)

    def _run_until(self, target: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= target:
            when, _, timer = heapq.heappop(timers)
            if timer.cancelled:
                continue
            self.t = max(self.t, when)
            timer.callback()
        self.t = target

    @property
    def pending(self) -> int:
        """Timers armed and not cancelled."""
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)
