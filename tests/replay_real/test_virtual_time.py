"""The virtual-time runtime: real asyncio code on the engine's clock, interleaved with the
engine's events by priority, deterministic, and a participant that sleeps or blocks in wall
time caught and named."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rolloutscope.replay.event_engine import Priority, Scheduler, VirtualDriver
from rolloutscope.replay.virtual_time import (
    AsyncRuntime,
    ForeignThreadError,
    RuntimeReentryError,
    WallClockSleepError,
    WallClockStallError,
)
from tests.replay_real.sleepy import participant as sleepy

EPOCH = 1_788_220_800.0


def _runtime(**kw):
    sched = Scheduler()
    return sched, AsyncRuntime(sched, epoch_s=EPOCH, **kw)


def test_loop_time_is_the_virtual_clock_and_a_long_wait_costs_no_wall_time():
    sched, rt = _runtime()
    seen = []

    async def waits():
        async with asyncio.timeout(3600):
            await asyncio.sleep(1800)
        seen.append(asyncio.get_running_loop().time())
        try:
            await asyncio.wait_for(asyncio.Event().wait(), timeout=900)
        except TimeoutError:
            seen.append(asyncio.get_running_loop().time())

    rt.spawn(waits(), participant="p", what="waits")
    sched.at(0.0, rt.settle)
    t0 = time.perf_counter()
    VirtualDriver().run(sched, 10_000.0)
    assert seen == [1800.0, 2700.0]
    assert time.perf_counter() - t0 < 5.0  # 45 simulated minutes; generous on a shared machine


def test_time_inside_a_registered_module_is_virtual_and_restored_outside():
    sched, rt = _runtime()
    rt.register("sleepy", modules=("tests.replay_real.sleepy",))
    pending = rt.spawn(sleepy.reads_wall_time(), participant="sleepy", what="reads")
    sched.at(100.0, rt.settle)
    VirtualDriver().run(sched, 1000.0)
    assert pending.result() == (EPOCH + 100.0, EPOCH + 130.0, 130.0)
    assert sleepy.time is time  # the module's own globals are back


def test_a_participant_that_sleeps_in_wall_time_is_caught_and_named():
    sched, rt = _runtime()
    rt.register("sleepy-agent", modules=("tests.replay_real.sleepy",))
    with pytest.raises(WallClockSleepError) as err:
        rt.run(sleepy.sleeps_in_wall_time(5.0), participant="sleepy-agent", what="sleep")
    assert err.value.participant == "sleepy-agent"
    assert "time.sleep(5)" in str(err.value)
    assert "tests.replay_real.sleepy.participant.sleeps_in_wall_time" in str(err.value)


def test_a_participant_that_blocks_the_loop_is_caught_and_named():
    sched, rt = _runtime(stall_limit_s=0.05)
    rt.register("blocking-agent", modules=("tests.replay_real.sleepy",))
    with pytest.raises(WallClockStallError) as err:
        rt.run(sleepy.blocks_the_loop(0.3), participant="blocking-agent", what="block")
    assert err.value.participant == "blocking-agent"
    assert err.value.wall_s >= 0.3
    assert "blocks_the_loop" in str(err.value)


def test_a_result_at_the_instant_its_timeout_is_due_counts_as_in_time():
    """Loop timers run after the instant's engine work, as the reference deadlines do."""
    sched, rt = _runtime()
    outcome = []
    done = rt.loop.create_future()

    async def guarded():
        try:
            async with asyncio.timeout(10.0):
                await done
            outcome.append("in time")
        except TimeoutError:
            outcome.append("timed out")

    sched.at(0.0, lambda: rt.spawn(guarded(), participant="p", what="guarded") and None)
    sched.at(0.0, rt.settle)
    sched.at(10.0, lambda: (done.set_result(None), rt.settle()), priority=Priority.WORK)
    VirtualDriver().run(sched, 100.0)
    assert outcome == ["in time"]


def test_the_loop_posts_engine_work_instead_of_calling_back_into_it():
    sched, rt = _runtime()
    order = []

    async def fires():
        await asyncio.sleep(5)
        rt.post(order.append, ("posted", rt.now))

    rt.spawn(fires(), participant="p", what="fires")
    sched.at(0.0, rt.settle)
    sched.at(5.0, order.append, ("control", 5.0), priority=Priority.CONTROL)
    VirtualDriver().run(sched, 100.0)
    assert order == [("control", 5.0), ("posted", 5.0)]


def test_calling_the_runtime_from_its_own_loop_is_refused():
    sched, rt = _runtime()

    async def reenters():
        rt.settle()

    with pytest.raises(RuntimeReentryError, match="must post"):
        rt.run(reenters(), participant="p", what="reenters")


def test_work_posted_from_another_thread_is_caught():
    sched, rt = _runtime()

    async def from_a_thread():
        t = threading.Thread(target=rt.loop.call_soon_threadsafe, args=(print,))
        t.start()
        t.join()

    with pytest.raises(ForeignThreadError, match="from another thread"):
        rt.run(from_a_thread(), participant="p", what="thread")


def test_to_thread_runs_inline_at_the_current_instant():
    sched, rt = _runtime()
    threads = []

    async def offloads():
        return await asyncio.to_thread(lambda: threads.append(threading.get_ident()) or 7)

    pending = rt.run(offloads(), participant="p", what="offloads")
    assert pending.result() == 7
    assert threads == [threading.get_ident()]


def test_the_same_program_interleaves_the_same_way_every_time():
    def trace():
        sched, rt = _runtime()
        log = []

        async def worker(i):
            for step in range(5):
                await asyncio.sleep(0.5 * (i % 3) + 0.25)
                log.append((rt.now, i, step))

        for i in range(6):
            rt.spawn(worker(i), participant="w", what=f"worker {i}")
        sched.at(0.0, rt.settle)
        VirtualDriver().run(sched, 100.0)
        rt.close()
        return log

    first = trace()
    assert len(first) == 30
    assert first == trace()


def test_blocking_work_offloaded_with_to_thread_is_not_a_stall():
    sched, rt = _runtime(stall_limit_s=0.05)

    async def offloads_a_slow_write():
        await asyncio.to_thread(threading.Event().wait, 0.2)
        return "written"

    assert rt.run(offloads_a_slow_write(), participant="p", what="write").result() == "written"
