"""The discrete-event engine: a virtual clock, an event queue, and drivers that pace it.

Rule: the engine is deterministic. Events run in (time, priority, insertion) order; nothing reads
the wall clock or an unseeded random source, so the same scenario and seed produce the same
spans in the same order. Ties at one instant are resolved by priority, a modelling decision:

- CONTROL first: a snapshot that starts at the instant a turn ends parks the run at that boundary;
- WORK next: a result that arrives at the instant its deadline is due counts as in time;
- DEADLINE after work, and WATCHDOG last, so a tick sees the instant's progress.

How fast virtual time passes is the driver's business: ``VirtualDriver`` runs events back to back
(tests, replays, benchmarks); ``PacedDriver`` sleeps until each event's time divided by a factor
(the accelerated wall-clock demo, which exports over OTLP to a live collector). The pacing
functions are injected, so the paced driver is tested without sleeping.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Protocol

from rolloutscope.replay.participants.clock import ManualClock


class Priority(IntEnum):
    CONTROL = 0
    WORK = 1
    DEADLINE = 2
    WATCHDOG = 3


class Timer:
    """A scheduled callback; ``cancel`` makes it a no-op without touching the heap."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn: Callable[..., Any] | None = fn
        self.args = args

    def cancel(self) -> None:
        self.fn = None


class Scheduler:
    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self._heap: list[tuple[float, int, int, Timer]] = []
        self._seq = 0
        self.events_run = 0
        self.stopped = False

    @property
    def now(self) -> float:
        return self.clock.t

    def at(self, t: float, fn: Callable[..., Any], *args: Any,
           priority: Priority = Priority.WORK) -> Timer:
        if t < self.clock.t:
            t = self.clock.t  # never schedule into the past
        timer = Timer(fn, args)
        self._seq += 1
        heapq.heappush(self._heap, (t, priority, self._seq, timer))
        return timer

    def after(self, dt: float, fn: Callable[..., Any], *args: Any,
              priority: Priority = Priority.WORK) -> Timer:
        return self.at(self.clock.t + dt, fn, *args, priority=priority)

    def next_time(self) -> float | None:
        while self._heap and self._heap[0][3].fn is None:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def step(self, horizon: float) -> bool:
        """Run the next event if it is due by ``horizon``; False when none is."""
        heap = self._heap
        while heap:
            t, _, _, timer = heap[0]
            if t > horizon or self.stopped:
                return False
            heapq.heappop(heap)
            fn = timer.fn
            if fn is None:
                continue
            timer.fn = None
            self.clock.t = t
            fn(*timer.args)
            self.events_run += 1
            return True
        return False

    def stop(self) -> None:
        """End the run after the current event (a terminal controller error)."""
        self.stopped = True


class Driver(Protocol):
    def run(self, scheduler: Scheduler, horizon: float) -> None: ...


class VirtualDriver:
    """As fast as the CPU allows."""

    def run(self, scheduler: Scheduler, horizon: float) -> None:
        step = scheduler.step
        while step(horizon):
            pass


class PacedDriver:
    """Virtual time runs ``factor`` times faster than ``monotonic``; sleeps in between."""

    def __init__(self, *, factor: float, monotonic: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        if factor <= 0:
            raise ValueError("factor must be positive")
        self.factor = factor
        self._monotonic = monotonic
        self._sleep = sleep

    def run(self, scheduler: Scheduler, horizon: float) -> None:
        t0_wall = self._monotonic()
        t0_virtual = scheduler.now
        while True:
            t = scheduler.next_time()
            if t is None or t > horizon or scheduler.stopped:
                return
            wait = t0_wall + (t - t0_virtual) / self.factor - self._monotonic()
            if wait > 0:
                self._sleep(wait)
            scheduler.step(horizon)
