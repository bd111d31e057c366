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

Work done outside the engine's thread (a model call served by a real inference engine) re-enters
through an ``Inbox``: the other thread posts a callback, and a ``PacedDriver`` given the inbox runs
it as an event at the virtual time the wall clock has reached when it takes it; it keeps waiting
while calls are still out even if no timer is due. In that mode the virtual clock follows the
wall clock (times the factor), so a real call's latency becomes virtual time. The virtual-clock
path never sees an inbox.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import threading
from bisect import insort
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import Any, Protocol

from rolloutscope.clock import ManualClock


class Priority(IntEnum):
    CONTROL = 0
    WORK = 1
    DEADLINE = 2
    WATCHDOG = 3


class Timer:
    """A scheduled callback; ``cancel`` makes it a no-op without touching the heap.

    A cancelled or fired timer lets go of its arguments: a cancelled one may sit in the heap
    until the horizon (a deadline armed past it), and a fired one is still held by its owner
    (``run.timer``); either would otherwise keep a finished rollout, its spans and their
    events alive to the end of the replay.
    """

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn: Callable[..., Any] | None = fn
        self.args = args

    def cancel(self) -> None:
        self.fn = None
        self.args = ()


# ``at`` and ``after`` make their timers without the ``__init__`` call (its fields set in place)
_new_timer = object.__new__


# the event queue's buckets are whole virtual seconds (``int(t)``); times at or past this go
# to one last bucket (``int`` of an infinite time would raise)
_LAST_BUCKET = 1 << 62


class Scheduler:
    """The event queue: events run in (time, priority, insertion) order.

    A calendar, not one heap: the events due in the current second of virtual time are in a
    sorted list, run in turn from ``_next`` on; later ones wait, unsorted, in a list per
    bucket, and a bucket is sorted once when the clock reaches it. One heap of everything in
    flight (18,000 events at ``scale-16k``'s peak, against 1,100 at 1,000 rollouts) makes each
    pop sift 14 levels of tuples and floats scattered over memory, mostly out of the CPU's
    caches, so its cost grew with the replay's scale. A bucket holds one second's events (80
    on average at ``scale-16k``, 5 at 1,000 rollouts): kept as a heap, each event still cost a
    sift through it, growing with the scale; sorted in one ``list.sort`` (which compares
    tuples of floats in C, without a rich comparison each) the bucket's events are then read
    in order at a fixed cost each. The few scheduled into the current second (a tenth at
    ``scale-16k``) are inserted in order among the events still to run. The order is the
    same: a bucket's events all come before the next bucket's, and within one they run in
    (time, priority, insertion) order as before (``test_scheduler`` checks it against one
    heap).
    """

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        # the current bucket's events in order: those before ``_next`` have run (or were
        # skipped, cancelled); the list goes when the next bucket becomes the current one
        self._due: list[tuple[float, int, int, Timer]] = []
        self._next = 0
        self._bucket = int(self.clock.t)  # the current bucket's index: its events are in _due
        self._later: dict[int, list[tuple[float, int, int, Timer]]] = {}  # later buckets
        self._later_keys: list[int] = []  # a heap of ``_later``'s indices
        self._seq = itertools.count(1)  # insertion order, the last tie-breaker
        self.events_run = 0
        self.stopped = False

    @property
    def now(self) -> float:
        return self.clock.t

    # ``at`` makes and queues its timer itself (no ``Timer.__init__``): a large replay
    # schedules a few hundred thousand events, and a call level each is measurable
    def at(self, t: float, fn: Callable[..., Any], *args: Any,
           priority: Priority = Priority.WORK) -> Timer:
        now = self.clock.t
        if t < now:
            t = now  # never schedule into the past
        timer = _new_timer(Timer)
        timer.fn, timer.args = fn, args
        entry = (t, priority, next(self._seq), timer)
        bucket = int(t) if t < _LAST_BUCKET else _LAST_BUCKET
        if bucket <= self._bucket:
            insort(self._due, entry, lo=self._next)
        else:
            later = self._later.get(bucket)
            if later is None:
                self._later[bucket] = [entry]
                heapq.heappush(self._later_keys, bucket)
            else:
                later.append(entry)
        return timer

    def after(self, dt: float, fn: Callable[..., Any], *args: Any,
              priority: Priority = Priority.WORK) -> Timer:
        return self.at(self.clock.t + dt, fn, *args, priority=priority)

    def _next_bucket(self) -> list[tuple[float, int, int, Timer]] | None:
        """Make the next non-empty bucket the current one (every event of the current one has
        run); None: none is left."""
        if not self._later_keys:
            return None
        self._bucket = heapq.heappop(self._later_keys)
        due = self._due = self._later.pop(self._bucket)
        due.sort()  # (time, priority, insertion) are never all equal: the timers are not compared
        self._next = 0
        return due

    def next_time(self) -> float | None:
        due: list[tuple[float, int, int, Timer]] | None = self._due
        while due is not None:
            i, n = self._next, len(due)
            while i < n and due[i][3].fn is None:
                i += 1  # cancelled: skipped
            self._next = i
            if i < n:
                return due[i][0]
            due = self._next_bucket()
        return None

    def step(self, horizon: float) -> bool:
        """Run the next event if it is due by ``horizon``; False when none is."""
        due: list[tuple[float, int, int, Timer]] | None = self._due
        while due is not None:
            while self._next < len(due):
                t, _, _, timer = due[self._next]
                if t > horizon or self.stopped:
                    return False
                self._next += 1
                fn = timer.fn
                if fn is None:
                    continue
                args, timer.fn, timer.args = timer.args, None, ()
                self.clock.t = t
                fn(*args)
                self.events_run += 1
                return True
            due = self._next_bucket()
        return False

    def run_until(self, horizon: float) -> None:
        """``step`` until it returns False, without a call per event (the virtual driver's
        loop: a large replay runs hundreds of thousands of events)."""
        due, i, clock = self._due, self._next, self.clock
        ran = 0  # counted here, added to ``events_run`` once
        try:
            while not self.stopped:
                if i == len(due):
                    due = self._next_bucket()
                    if due is None:
                        return
                    i = 0
                    continue
                t, _, _, timer = due[i]
                if t > horizon:
                    return
                # moved on before the event runs: what it schedules into this second is
                # inserted after it
                i += 1
                self._next = i
                fn = timer.fn
                if fn is None:
                    continue
                args, timer.fn, timer.args = timer.args, None, ()
                clock.t = t
                fn(*args)
                ran += 1
        finally:
            self.events_run += ran

    def stop(self) -> None:
        """End the run after the current event (a terminal controller error)."""
        self.stopped = True


class Driver(Protocol):
    def run(self, scheduler: Scheduler, horizon: float) -> None: ...


# net allocations between young-generation collections while a replay computes: more than
# scale-16k's whole live set, so its event loop runs without one
YOUNG_COLLECTION_EVERY = 1_000_000


class VirtualDriver:
    """As fast as the CPU allows, with the cyclic collector held back (``few_collections``)."""

    YOUNG_COLLECTION_EVERY = YOUNG_COLLECTION_EVERY

    def run(self, scheduler: Scheduler, horizon: float) -> None:
        with few_collections():
            scheduler.run_until(horizon)


@contextmanager
def few_collections() -> Iterator[None]:
    """Collect the young generation only every ``YOUNG_COLLECTION_EVERY`` net allocations
    (cycles are still found) and the older ones rarely; the previous thresholds come back
    after.

    A large replay keeps a few hundred thousand objects alive (the scenario's turns, open runs,
    their spans and events, timers) while it allocates and frees millions more, nearly all of
    them freed by reference counting. At its default thresholds CPython's cyclic collector
    would walk that live set again and again: about a third of ``scale-16k``'s event loop, and
    half of drawing its workload of 112,000 turns. Each young collection walks the objects
    still alive from the last one's time on, out of the CPU's caches (60-70 ms a hundred
    thousand): at 100,000 ``scale-16k``'s replay made five, 0.27-0.45 s of its 4.5 s; at a
    million it makes one, when drawing the workload is done. Only cyclic garbage waits longer
    for it: what reference counting frees goes at once, whatever the threshold.
    """
    previous = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


class Inbox:
    """Callbacks posted by other threads for the engine's thread (thread-safe).

    ``outstanding`` counts the calls still out on other threads; only the engine's thread changes
    it (``opened``/``closed``), so the driver knows to wait for them when no timer is due."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self.outstanding = 0

    def opened(self) -> None:
        self.outstanding += 1

    def closed(self) -> None:
        self.outstanding -= 1

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """From any thread: run ``fn(*args)`` on the engine's thread."""
        with self._cond:
            self._items.append((fn, args))
            self._cond.notify()

    def wait(self, timeout: float) -> None:
        """Block until something is posted or ``timeout`` seconds pass (a paced driver's sleep)."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout)

    def take(self) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
        with self._cond:
            items = list(self._items)
            self._items.clear()
        return items


class PacedDriver:
    """Virtual time runs ``factor`` times faster than ``monotonic``; sleeps in between.

    With an ``inbox``, ``sleep`` must return early when something is posted (``inbox.wait``
    does); each posted callback becomes an event at the virtual time its arrival maps to."""

    def __init__(self, *, factor: float, monotonic: Callable[[], float],
                 sleep: Callable[[float], None], inbox: Inbox | None = None) -> None:
        if factor <= 0:
            raise ValueError("factor must be positive")
        self.factor = factor
        self._monotonic = monotonic
        self._sleep = sleep
        self.inbox = inbox

    def run(self, scheduler: Scheduler, horizon: float) -> None:
        if self.inbox is not None:
            self._run_with_inbox(scheduler, horizon, self.inbox)
            return
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

    def _run_with_inbox(self, scheduler: Scheduler, horizon: float, inbox: Inbox) -> None:
        mono, factor = self._monotonic, self.factor
        t0_wall = mono()
        t0_virtual = scheduler.now
        while not scheduler.stopped:
            arrived = inbox.take()
            if arrived:
                now = t0_virtual + (mono() - t0_wall) * factor
                for fn, args in arrived:
                    scheduler.at(min(now, horizon), fn, *args)
            t = scheduler.next_time()
            if t is None or t > horizon:
                if not inbox.outstanding:
                    return
                t = horizon  # calls are still out: wait for them until the horizon
            wait = t0_wall + (t - t0_virtual) / factor - mono()
            if wait > 0:
                self._sleep(wait)
                continue
            if not scheduler.step(horizon):
                return  # the horizon, with nothing due
