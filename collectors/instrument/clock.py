"""The clock a deadline reads and sets its timer on: injected, so tests never sleep.

``LoopClock`` is what the controller's ``_Deadline`` uses through ``asyncio.timeout``: the
running loop's monotonic ``time()`` and ``call_at``. ``ManualClock`` is the in-memory fake
shipped beside it: time moves only on ``advance``, which runs every timer that falls due, in
due order, with ``now()`` reading each timer's due time while it runs.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Protocol

# An interval gets its open marker (emit_open_marker) only once it has lasted this long. Most
# deadlines and control calls end within milliseconds: a marker for them is a wasted row, and
# when a marker and its span's end reach the store in one commit the writer keeps the marker,
# so the view would show a finished interval as still open.
OPEN_MARKER_AFTER_S = 1.0


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class DeadlineClock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

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
    """A clock that moves only when told to."""

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
        target = self.t + dt
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.t = max(self.t, when)
            timer.callback()
        self.t = target

    @property
    def pending(self) -> int:
        """Timers armed and not cancelled."""
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)
