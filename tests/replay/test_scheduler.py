"""The scheduler's loop and what its timers keep alive."""

from __future__ import annotations

import gc
import weakref

from rolloutscope.replay.engine import Priority, Scheduler, VirtualDriver


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
