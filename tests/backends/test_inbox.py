"""The engine's seam for real calls: answers posted from other threads re-enter the paced
driver at the virtual time the wall clock has reached."""

from __future__ import annotations

import threading

from rolloutscope.replay.event_engine import Inbox, PacedDriver, Scheduler


class FakeWall:
    """A wall clock that moves only when the driver sleeps; ``at_sleep`` runs on each sleep."""

    def __init__(self, inbox: Inbox, posts: dict[int, tuple[float, object]]) -> None:
        self.t = 100.0
        self.inbox = inbox
        self.posts = posts  # sleep number -> (seconds it lasts, callback to post)
        self.sleeps = 0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        lasted, fn = self.posts.get(self.sleeps, (seconds, None))
        self.t += min(lasted, seconds)
        if fn is not None:
            self.inbox.post(fn)


def test_a_posted_answer_runs_at_the_virtual_time_its_arrival_maps_to():
    inbox, sched, seen = Inbox(), Scheduler(), []
    sched.at(50.0, lambda: seen.append(("timer", sched.now)))
    wall = FakeWall(inbox, {1: (2.0, lambda: seen.append(("answer", sched.now)))})
    PacedDriver(factor=10.0, monotonic=wall.monotonic, sleep=wall.sleep, inbox=inbox).run(
        sched, horizon=100.0)
    assert seen == [("answer", 20.0), ("timer", 50.0)]


def test_the_driver_waits_for_calls_still_out_when_no_timer_is_due():
    inbox, sched, seen = Inbox(), Scheduler(), []
    inbox.opened()

    def answered() -> None:
        inbox.closed()
        seen.append(sched.now)

    wall = FakeWall(inbox, {1: (3.0, answered)})
    PacedDriver(factor=2.0, monotonic=wall.monotonic, sleep=wall.sleep, inbox=inbox).run(
        sched, horizon=100.0)
    assert seen == [6.0]
    assert wall.sleeps == 1  # nothing out and nothing due: it returned at once


def test_calls_still_out_at_the_horizon_do_not_hold_the_run():
    inbox, sched = Inbox(), Scheduler()
    inbox.opened()
    wall = FakeWall(inbox, {})
    PacedDriver(factor=1.0, monotonic=wall.monotonic, sleep=wall.sleep, inbox=inbox).run(
        sched, horizon=5.0)
    assert wall.t == 105.0


def test_a_post_from_another_thread_wakes_a_waiting_inbox():
    inbox = Inbox()
    poster = threading.Thread(target=inbox.post, args=(print,))
    poster.start()
    inbox.wait(30.0)  # returns as soon as the post lands, not after 30 s
    poster.join()
    assert [fn for fn, _ in inbox.take()] == [print]
