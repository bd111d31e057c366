"""The scheduler's loop and what its timers keep alive."""

from __future__ import annotations

import gc
import heapq
import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutscope.replay.event_engine import Priority, Scheduler, VirtualDriver


class Payload:
    """Something a timer's callback takes (a rollout, in a replay)."""


def test_run_until_runs_events_in_time_priority_insertion_order_up_to_the_horizon():
    sched, ran = Scheduler(), []
    sched.at(2.0, ran.append, "late")
    sched.at(1.0, ran.append, "work-1")
    sched.at(1.0, ran.append, "watchdog", priority=Priority.WATCHDOG)
    sched.at(1.0, ran.append, "control", priority=Priority.CONTROL)
    sched.at(1.0, ran.append, "work-2")
    sched.at(1.0, ran.append, "cancelled").cancel()
    sched.at(5.0, ran.append, "past the horizon")
    sched.run_until(3.0)
    assert ran == ["control", "work-1", "work-2", "watchdog", "late"]
    assert sched.now == 2.0 and sched.events_run == 5


def test_run_until_stops_after_the_event_that_stops_the_run():
    sched, ran = Scheduler(), []
    sched.at(1.0, lambda: (ran.append("stop"), sched.stop()))
    sched.at(2.0, ran.append, "never")
    sched.run_until(10.0)
    assert ran == ["stop"] and sched.now == 1.0


def test_a_cancelled_timer_lets_go_of_its_arguments_though_it_stays_in_the_heap():
    sched, payload = Scheduler(), Payload()
    alive = weakref.ref(payload)
    timer = sched.at(100.0, lambda p: None, payload)
    del payload
    timer.cancel()
    assert alive() is None


def test_a_fired_timer_lets_go_of_its_arguments_while_its_owner_still_holds_it():
    sched, payload = Scheduler(), Payload()
    alive = weakref.ref(payload)
    timer = sched.after(1.0, lambda p: None, payload)
    del payload
    sched.run_until(2.0)
    assert timer.fn is None and alive() is None


def test_the_virtual_driver_gives_the_collector_its_thresholds_back():
    before = gc.get_threshold()
    seen = []
    sched = Scheduler()
    sched.at(1.0, lambda: seen.append(gc.get_threshold()))
    VirtualDriver().run(sched, 10.0)
    assert seen[0][0] == VirtualDriver.YOUNG_COLLECTION_EVERY
    assert gc.get_threshold() == before


class OneHeap:
    """The reference the calendar must match: every event in one heap of (time, priority,
    insertion), times clamped to now."""

    def __init__(self) -> None:
        self.now, self._heap, self._seq = 0.0, [], 0

    def at(self, t, fn, *args, priority=Priority.WORK):
        self._seq += 1
        entry = [max(self.now, t), priority, self._seq, fn, args]
        heapq.heappush(self._heap, entry)
        return entry

    def after(self, dt, fn, *args, priority=Priority.WORK):
        return self.at(self.now + dt, fn, *args, priority=priority)

    def run_until(self, horizon):
        while self._heap and self._heap[0][0] <= horizon:
            t, _, _, fn, args = heapq.heappop(self._heap)
            if fn is not None:
                self.now = t
                fn(*args)


# how an event is armed: (delay after the event that arms it, priority, cancelled at once,
# armed with ``at`` rather than ``after``)
_arming = st.tuples(st.floats(min_value=-1.0, max_value=30.0) | st.sampled_from([0.0, 0.5, 1.0]),
                    st.sampled_from(list(Priority)), st.booleans(), st.booleans())


def _fire_order(sched, upfront, chained, horizon, cancel):
    ran, pending = [], list(chained)

    def arm(delay, priority, cancelled, absolute):
        label = len(ran), len(pending), delay, priority
        if absolute:
            handle = sched.at(sched.now + delay, fire, label, priority=priority)
        else:
            handle = sched.after(delay, fire, label, priority=priority)
        if cancelled:
            cancel(handle)

    def fire(label):
        ran.append((sched.now, label))
        if pending:
            arm(*pending.pop(0))

    for spec in upfront:
        arm(*spec)
    sched.run_until(horizon)
    return ran


def _cancel_entry(entry):
    entry[3] = None


@settings(max_examples=300, deadline=None)
@given(upfront=st.lists(_arming, max_size=40), chained=st.lists(_arming, max_size=40),
       horizon=st.floats(min_value=0.0, max_value=60.0))
def test_the_calendar_runs_events_in_the_order_one_heap_would(upfront, chained, horizon):
    """Events armed up front and by running events, into the current bucket, into one before
    a later bucket already waiting, cancelled, and past the horizon: the calendar of one-second
    buckets runs them when and in the order one heap of (time, priority, insertion) would."""
    assert (_fire_order(Scheduler(), upfront, chained, horizon, lambda timer: timer.cancel())
            == _fire_order(OneHeap(), upfront, chained, horizon, _cancel_entry))


def test_step_and_next_time_cross_buckets_and_skip_cancelled_events():
    sched, ran = Scheduler(), []
    sched.at(0.5, ran.append, "a")
    sched.at(3.5, ran.append, "cancelled").cancel()
    sched.at(7.25, ran.append, "b")
    sched.at(float("inf"), ran.append, "never")
    assert sched.next_time() == 0.5
    assert sched.step(10.0) and ran == ["a"]
    assert sched.next_time() == 7.25
    assert sched.step(10.0) and ran == ["a", "b"] and sched.now == 7.25
    sched.at(7.5, ran.append, "c")  # into the current bucket, after it was drawn
    assert sched.next_time() == 7.5
    assert sched.step(10.0) and not sched.step(10.0)
    assert ran == ["a", "b", "c"] and sched.next_time() == float("inf")
