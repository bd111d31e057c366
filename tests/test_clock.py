"""The one clock module: a manual clock's timers run in due order, reading their own due time,
and the replay engine and the instrument deadlines share it."""

from __future__ import annotations

import pytest

from rolloutscope.clock import Clock, DeadlineClock, LoopClock, ManualClock
from rolloutscope.replay.event_engine import Scheduler


def test_timers_run_in_due_order_reading_their_due_time():
    clock = ManualClock(10.0)
    seen = []
    clock.call_at(13.0, lambda: seen.append(("b", clock.now())))
    clock.call_at(11.0, lambda: seen.append(("a", clock.now())))
    cancelled = clock.call_at(12.0, lambda: seen.append(("never", clock.now())))
    cancelled.cancel()
    assert clock.pending == 2
    clock.advance(2.5)
    assert seen == [("a", 11.0)] and clock.now() == 12.5
    clock.set(20.0)  # setting the time runs what falls due on the way, as advancing does
    assert seen == [("a", 11.0), ("b", 13.0)] and clock.now() == 20.0
    assert clock.pending == 0


def test_a_clock_does_not_go_backwards():
    clock = ManualClock(5.0)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1.0)
    with pytest.raises(ValueError, match=r"backwards \(4.0 < 5.0\)"):
        clock.set(4.0)


def test_the_manual_clock_satisfies_both_protocols_and_drives_the_engine():
    clock: DeadlineClock = ManualClock()
    plain: Clock = clock
    assert plain.now() == 0.0
    sched = Scheduler()
    assert isinstance(sched.clock, ManualClock)
    sched.at(4.0, lambda: None)
    sched.run_until(10.0)
    assert sched.now == sched.clock.now() == 4.0


def test_the_loop_clock_reads_the_running_loop():
    import asyncio

    async def read() -> tuple[float, float]:
        return LoopClock().now(), asyncio.get_running_loop().time()

    ours, loops = asyncio.run(read())
    assert 0.0 <= loops - ours < 1.0
