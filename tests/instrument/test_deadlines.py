"""The drop-in deadline and the holder-counting registry, on a clock that moves only when told."""

from __future__ import annotations

import asyncio
import json

import pandas as pd
import pytest

from rolloutscope.clock import ManualClock
from rolloutscope.collectors.instrument import Deadline, DeadlineRegistry, RolloutTimeout
from rolloutscope.vocabulary import Attr, DeadlineHolder, EventName

from .conftest import S, T0

PROMPT_GROUP = "NeMo-Gym prompt group"


class Guarded:
    """A task inside ``async with deadline``, held at ``release`` until the test lets it go."""

    def __init__(self, deadline: Deadline, *, body=None) -> None:
        self.deadline = deadline
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self._body = body
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> str:
        async with self.deadline:
            self.entered.set()
            await self.release.wait()
            if self._body is not None:
                await self._body()
        return "done"


def _deadline(run, clock, seconds=30.0, **kw) -> Deadline:
    return Deadline(seconds, kw.pop("description", PROMPT_GROUP), tracer=run.tracer, clock=clock,
                    time_ns=lambda: T0, **kw)


def _events(run, span_id: str) -> list[tuple[str, float, dict]]:
    assert run.inst.flush()
    rows = run.inst.store.query_df(
        "SELECT name, ts_ns, attributes FROM span_events WHERE span_id = ? ORDER BY ts_ns, name",
        [span_id])
    return [(r.name, (r.ts_ns - T0) / S, json.loads(r.attributes) if r.attributes else {})
            for r in rows.itertuples()]


class ExportingClock(ManualClock):
    """Advancing passes an exporter batch boundary, as the same time would live."""

    def __init__(self, run) -> None:
        super().__init__()
        self._run = run

    def advance(self, dt: float) -> None:
        assert self._run.inst.flush()
        super().advance(dt)


class TestFiring:
    def test_a_deadline_fires_at_its_budget_with_a_typed_timeout_and_the_state_at_firing(
            self, run):
        async def scenario():
            clock = ExportingClock(run)
            guarded = Guarded(_deadline(run, clock, deadline_id="p7-d0",
                                        attributes={Attr.ROLLOUT_ID: "p7", Attr.PROMPT_IDX: 7},
                                        state_when_fired=lambda: "parked"))
            await guarded.entered.wait()
            clock.advance(29.5)
            assert not guarded.deadline.fired and guarded.deadline.remaining_s == 0.5
            clock.advance(0.5)
            assert guarded.deadline.fired
            with pytest.raises(RolloutTimeout) as raised:
                await guarded.task
            return raised.value

        error = asyncio.run(scenario())
        assert str(error) == "NeMo-Gym prompt group exceeded 30.0s"
        assert isinstance(error, TimeoutError) and isinstance(error.__cause__,
                                                              asyncio.CancelledError)
        row = run.view("deadlines").iloc[0]
        assert (row.deadline_id, row.kind, row.rollout_id, row.prompt_idx) == (
            "p7-d0", "rollout", "p7", 7)
        assert (row.outcome, row.state_when_fired, row.budget_s) == ("fired", "parked", 30.0)
        assert (row.start_ns, row.end_ns, row.fired_ns) == (T0, T0 + 30 * S, T0 + 30 * S)
        assert [(n, t) for n, t, _ in _events(run, row.span_id)] == [
            (EventName.DEADLINE_START, 0.0), (EventName.DEADLINE_FIRE, 30.0)]

    def test_a_live_deadline_is_visible_as_open_before_it_ends(self, run):
        async def scenario():
            clock = ExportingClock(run)
            guarded = Guarded(_deadline(run, clock, description="generation turn"))
            await guarded.entered.wait()
            young = run.view("deadlines")
            clock.advance(1.0)
            live = run.view("deadlines")
            guarded.release.set()
            assert await guarded.task == "done"
            return young, live

        young, live = asyncio.run(scenario())
        assert young.empty  # a deadline younger than OPEN_MARKER_AFTER_S costs no marker row
        assert list(zip(live.kind, live.outcome, live.is_open)) == [("generation", "open", True)]
        ended = run.view("deadlines")
        assert list(zip(ended.outcome, ended.is_open)) == [("completed", False)]

    def test_no_budget_means_no_deadline_no_timer_and_no_span(self, run):
        async def scenario():
            clock = ExportingClock(run)
            guarded = Guarded(Deadline(None, PROMPT_GROUP, tracer=run.tracer, clock=clock))
            await guarded.entered.wait()
            assert clock.pending == 0
            clock.advance(10**6)
            guarded.release.set()
            return await guarded.task

        assert asyncio.run(scenario()) == "done"
        assert run.view("deadlines").empty

    def test_a_timeout_error_from_the_guarded_code_is_not_relabelled(self, run):
        async def own_timeout():
            raise TimeoutError("vLLM did not answer")

        async def scenario():
            clock = ExportingClock(run)
            guarded = Guarded(_deadline(run, clock), body=own_timeout)
            await guarded.entered.wait()
            clock.advance(3)
            guarded.release.set()
            with pytest.raises(TimeoutError) as raised:
                await guarded.task
            return raised.value

        error = asyncio.run(scenario())
        assert not isinstance(error, RolloutTimeout) and str(error) == "vLLM did not answer"
        row = run.view("deadlines").iloc[0]
        assert row.outcome == "error" and pd.isna(row.fired_ns)

    def test_work_that_finishes_in_time_completes_the_deadline_with_its_budget_used(self, run):
        async def scenario():
            clock = ExportingClock(run)
            guarded = Guarded(_deadline(run, clock, description="environment step"))
            await guarded.entered.wait()
            clock.advance(12)
            guarded.release.set()
            await guarded.task
            return clock.pending

        assert asyncio.run(scenario()) == 0  # its timer is gone
        row = run.view("deadlines").iloc[0]
        assert (row.kind, row.outcome, row.end_ns - row.start_ns) == ("env", "completed", 12 * S)
        assert json.loads(run.inst.store.query(
            "SELECT attributes FROM spans WHERE span_id = ?", [row.span_id])[0][0])[
            Attr.DEADLINE_ACTIVE_S] == 12.0

    def test_cancelling_the_guarded_task_from_outside_is_recorded_as_cancelled(self, run):
        async def scenario():
            clock = ExportingClock(run)
            guarded = Guarded(_deadline(run, clock))
            await guarded.entered.wait()
            clock.advance(4)
            guarded.task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await guarded.task

        asyncio.run(scenario())
        row = run.view("deadlines").iloc[0]
        assert row.outcome == "cancelled"
        assert [n for n, _, _ in _events(run, row.span_id)] == [
            EventName.DEADLINE_START, EventName.DEADLINE_CANCEL]

    def test_the_controllers_own_timeout_type_is_raised_when_given(self, run):
        class ControllerTimeout(Exception):
            def __init__(self, description, seconds):
                super().__init__(f"{description} exceeded {seconds}s")

        async def scenario():
            clock = ExportingClock(run)
            guarded = Guarded(_deadline(run, clock, seconds=5, timeout_error=ControllerTimeout))
            await guarded.entered.wait()
            clock.advance(5)
            with pytest.raises(ControllerTimeout, match="prompt group exceeded 5s"):
                await guarded.task

        asyncio.run(scenario())


class TestSuspension:
    def test_a_suspended_deadline_cannot_fire_and_resumes_with_what_was_left(self, run):
        async def scenario():
            clock = ExportingClock(run)
            registry = DeadlineRegistry()
            guarded = Guarded(_deadline(run, clock, registry=registry,
                                        state_when_fired=lambda: "running"))
            await guarded.entered.wait()
            clock.advance(10)
            registry.suspend(DeadlineHolder.GYM_CHECKPOINT)
            clock.advance(300)  # a snapshot far longer than the whole budget
            assert not guarded.deadline.fired and guarded.deadline.remaining_s == 20
            registry.resume(DeadlineHolder.GYM_CHECKPOINT)
            clock.advance(19.5)
            assert not guarded.deadline.fired
            clock.advance(0.5)
            with pytest.raises(RolloutTimeout):
                await guarded.task

        asyncio.run(scenario())
        row = run.view("deadlines").iloc[0]
        assert (row.outcome, row.suspended_s, row.fired_ns) == ("fired", 300.0, T0 + 330 * S)
        events = _events(run, row.span_id)
        assert [(n, t) for n, t, _ in events] == [
            (EventName.DEADLINE_START, 0), (EventName.DEADLINE_SUSPEND, 10),
            (EventName.DEADLINE_RESUME, 310), (EventName.DEADLINE_FIRE, 330)]
        assert events[1][2] == {Attr.DEADLINE_HOLDER: "gym_checkpoint",
                                Attr.DEADLINE_HOLDERS_COUNT: 1}

    def test_clocks_restart_only_when_the_last_holder_lets_go(self, run):
        async def scenario():
            clock = ExportingClock(run)
            registry = DeadlineRegistry()
            guarded = Guarded(_deadline(run, clock, registry=registry))
            await guarded.entered.wait()
            clock.advance(5)
            registry.suspend(DeadlineHolder.COLOCATED_TRAINING)
            clock.advance(5)
            registry.suspend(DeadlineHolder.GYM_CHECKPOINT)
            clock.advance(5)
            # the snapshot ends while the engine is still training: still suspended
            assert registry.resume(DeadlineHolder.GYM_CHECKPOINT) == 1
            clock.advance(100)
            assert guarded.deadline.suspended and guarded.deadline.remaining_s == 25
            assert registry.resume(DeadlineHolder.COLOCATED_TRAINING) == 0
            clock.advance(1)
            assert guarded.deadline.remaining_s == 24
            guarded.release.set()
            await guarded.task

        asyncio.run(scenario())
        row = run.view("deadlines").iloc[0]
        assert (row.outcome, row.suspended_s) == ("completed", 110.0)
        holders = [(n, t, a[Attr.DEADLINE_HOLDER], a[Attr.DEADLINE_HOLDERS_COUNT])
                   for n, t, a in _events(run, row.span_id) if Attr.DEADLINE_HOLDER in a]
        assert holders == [
            (EventName.DEADLINE_SUSPEND, 5, "colocated_training", 1),
            (EventName.DEADLINE_SUSPEND, 10, "gym_checkpoint", 2),
            (EventName.DEADLINE_RESUME, 15, "gym_checkpoint", 1),
            (EventName.DEADLINE_RESUME, 115, "colocated_training", 0)]

    def test_a_deadline_entered_while_the_registry_is_held_starts_suspended(self, run):
        async def scenario():
            clock = ExportingClock(run)
            registry = DeadlineRegistry()
            registry.suspend(DeadlineHolder.GYM_CHECKPOINT)
            guarded = Guarded(_deadline(run, clock, registry=registry))
            await guarded.entered.wait()
            clock.advance(60)
            assert guarded.deadline.remaining_s == 30
            registry.resume(DeadlineHolder.GYM_CHECKPOINT)
            clock.advance(30)
            with pytest.raises(RolloutTimeout):
                await guarded.task

        asyncio.run(scenario())
        row = run.view("deadlines").iloc[0]
        assert (row.outcome, row.suspended_s, row.fired_ns) == ("fired", 60.0, T0 + 90 * S)

    def test_a_single_flag_inner_registry_sees_one_suspend_and_one_resume(self, run):
        class RequestDeadlineRegistry:  # RL's registry: one flag, resume restarts all
            def __init__(self):
                self.calls = []

            def add(self, d):
                self.calls.append("add")

            def discard(self, d):
                self.calls.append("discard")

            def suspend(self):
                self.calls.append("suspend")

            def resume(self):
                self.calls.append("resume")

        async def scenario():
            inner = RequestDeadlineRegistry()
            clock = ExportingClock(run)
            registry = DeadlineRegistry(inner)
            guarded = Guarded(_deadline(run, clock, registry=registry))
            await guarded.entered.wait()
            registry.suspend("colocated_training")
            registry.suspend("gym_checkpoint")
            registry.resume("gym_checkpoint")
            registry.resume("colocated_training")
            guarded.release.set()
            await guarded.task
            return inner.calls

        assert asyncio.run(scenario()) == ["add", "suspend", "resume", "discard"]

    def test_a_resume_without_a_suspend_is_counted_not_raised(self):
        registry = DeadlineRegistry()
        assert registry.resume(DeadlineHolder.GYM_CHECKPOINT) == 0
        assert registry.failures.count == 1 and not registry.suspended
