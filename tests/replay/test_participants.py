"""Invariants of the participant models, as sentences; state machines checked by Hypothesis."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rolloutscope.vocabulary import (
    CheckpointPhase,
    DeadlineHolder,
    DeadlineKind,
    ErrorCode,
    ExecutionState,
    ParticipantKind,
)
from rolloutscope.replay.errors import ModelInvariantError
from rolloutscope.replay.participants.agent import AgentParticipant, ExecutionKey
from rolloutscope.clock import ManualClock
from rolloutscope.replay.participants.coordinator import RESUME_ORDER, CheckpointCoordinator
from rolloutscope.replay.participants.deadlines import DeadlineRegistry
from rolloutscope.replay.participants.environment import (
    EnvironmentParticipant,
    ResourcesParticipant,
)
from rolloutscope.replay.participants.model import Admission, CallState, ModelParticipant
from rolloutscope.replay.participants.protocol import EpisodeId, NoteKind


def _agent(clock: ManualClock) -> AgentParticipant:
    return AgentParticipant(instance="agent", clock=clock, lease_grace_s=600.0)


def _model(clock: ManualClock, *, wait: bool, workers: int = 1) -> ModelParticipant:
    return ModelParticipant(instance="model", clock=clock, calls_wait_at_closed_admission=wait,
                            workers=workers, generation_cuts=True)


EP = EpisodeId("r-0", 0)


class TestExecutionKey:
    def test_a_key_hashes_equals_and_orders_as_its_three_fields(self):
        a, b = ExecutionKey("r-0", 1, 2), ExecutionKey("r-0", 1, 3)
        assert hash(a) == hash(("r-0", 1, 2)) and a == ExecutionKey("r-0", 1, 2)
        assert a < b and sorted([b, a]) == [a, b] and a != b
        assert repr(a) == "ExecutionKey(rollout_id='r-0', attempt=1, generation=2)"
        assert dataclasses.replace(a, generation=3) == b and hash(b) == hash(("r-0", 1, 3))

    def test_a_key_pickled_in_a_process_with_another_hash_seed_still_finds_its_run(self):
        """Its hash is cached; a pickled key is rebuilt, so the cache is this process's."""
        code = ("import pickle, sys; from rolloutscope.replay.participants.agent import "
                "ExecutionKey; sys.stdout.buffer.write(pickle.dumps(ExecutionKey('r-0', 1, 2)))")
        pickled = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                 env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
        runs = {ExecutionKey("r-0", 1, 2): "the run"}
        assert runs[pickle.loads(pickled)] == "the run"


class TestAgentReadiness:
    def test_a_finished_unacknowledged_run_blocks_every_prepare(self):
        clock = ManualClock()
        agent = _agent(clock)
        key = agent.begin_run(EP)
        agent.complete(key, "done")
        for i in range(3):
            assert agent.prepare(f"ck-{i}", deadline_ts=300.0).ok
            assert not agent.poll_ready()
            assert agent.report().counts["completed_unacknowledged"] == 1
            agent.resume(f"ck-{i}")

    def test_an_ack_with_the_receipt_releases_the_run(self):
        agent = _agent(ManualClock())
        receipt = agent.complete(agent.begin_run(EP), "done")
        assert agent.acknowledge([receipt]) == 1
        agent.prepare("ck", deadline_ts=300.0)
        assert agent.poll_ready()

    def test_retire_refuses_a_completed_run_and_hands_back_its_receipt(self):
        agent = _agent(ManualClock())
        key = agent.begin_run(EP)
        receipt = agent.complete(key, "done")
        reply = agent.retire([EP])
        assert reply.ok
        assert reply.extra["completed_unacknowledged"] == (EP.capture_key,)
        assert reply.extra["receipts"] == (receipt,)
        assert agent.state_of(key) is ExecutionState.COMPLETED

    def test_retire_during_a_checkpoint_is_refused_until_resume(self):
        agent = _agent(ManualClock())
        agent.begin_run(EP)
        agent.prepare("ck", deadline_ts=10.0)
        assert agent.retire([EP]).code is ErrorCode.INVALID_PHASE
        agent.resume("ck")
        assert agent.retire([EP]).ok

    def test_a_retired_attempt_cannot_start_again_but_the_next_attempt_can(self):
        agent = _agent(ManualClock())
        agent.begin_run(EP)
        agent.retire([EP])
        with pytest.raises(Exception, match="retired"):
            agent.begin_run(EP)
        assert agent.begin_run(EpisodeId("r-0", 1)).attempt == 1

    def test_a_run_parked_at_a_boundary_lets_prepare_succeed(self):
        agent = _agent(ManualClock())
        key = agent.begin_run(EP)
        agent.record_boundary(key)
        agent.prepare("ck", deadline_ts=10.0)
        assert not agent.poll_ready()  # park requested, not yet at a boundary
        assert agent.record_boundary(key) is False
        assert agent.poll_ready()


class AgentMachine(RuleBasedStateMachine):
    """Whatever the order of runs, boundaries, completions, ACKs, checkpoints and retires, the
    incremental counters agree with a recount and readiness follows the CK1 rule."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.agent = _agent(self.clock)
        self.keys: list = []
        self.receipts: list = []
        self.ck = 0

    @rule(rid=st.integers(0, 3))
    def begin(self, rid):
        try:
            self.keys.append(self.agent.begin_run(EpisodeId(f"r{rid}", 0)))
        except Exception:
            pass

    @precondition(lambda self: self.keys)
    @rule(i=st.integers(0, 50))
    def boundary(self, i):
        self.agent.record_boundary(self.keys[i % len(self.keys)])

    @precondition(lambda self: self.keys)
    @rule(i=st.integers(0, 50))
    def complete(self, i):
        key = self.keys[i % len(self.keys)]
        if self.agent.state_of(key) in (ExecutionState.RUNNING, ExecutionState.PARK_REQUESTED):
            self.receipts.append(self.agent.complete(key, "x"))

    @precondition(lambda self: self.receipts)
    @rule()
    def ack(self):
        self.agent.acknowledge([self.receipts.pop()])

    @rule()
    def prepare(self):
        self.ck += 1
        self.agent.prepare(f"ck{self.ck}", deadline_ts=self.clock.now() + 1)
        for key in self.agent.park_requested():
            if self.agent.boundary_of(key) >= 0 and self.ck % 2:
                self.agent.park_now(key)

    @rule()
    def resume(self):
        self.agent.resume(f"ck{self.ck}")

    @rule(rid=st.integers(0, 3))
    def retire(self, rid):
        self.agent.retire([EpisodeId(f"r{rid}", 0)])

    @invariant()
    def counters_match_a_recount(self):
        states = [self.agent.state_of(k) for k in self.keys]
        unacked = sum(1 for k in self.keys if self.agent.completion_receipt(k) is not None)
        counts = self.agent.counts()
        assert counts["completed_unacknowledged"] == unacked
        running = sum(s in (ExecutionState.RUNNING, ExecutionState.PARK_REQUESTED)
                      for s in states)
        assert counts["running"] == running
        assert self.agent.is_ready() == self.agent.report().ready
        if unacked:
            assert not self.agent.is_ready()


TestAgentMachine = AgentMachine.TestCase
TestAgentMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


class TestModelGate:
    def test_a_call_at_closed_admission_waits_on_the_newer_gate(self):
        model = _model(ManualClock(), wait=True)
        model.prepare("ck", deadline_ts=10.0)
        assert model.request("c1", EP) == (Admission.WAITING, None)
        model.resume("ck")
        assert model.admitted == ["c1"]

    def test_a_call_at_closed_admission_is_refused_409_on_the_older_gate(self):
        model = _model(ManualClock(), wait=False)
        model.prepare("ck", deadline_ts=10.0)
        assert model.request("c1", EP) == (Admission.REFUSED, ErrorCode.ADMISSION_CLOSED)

    def test_a_retired_attempts_waiting_call_is_refused_with_stale_attempt(self):
        model2 = _model(ManualClock(), wait=True)
        model2.prepare("ck", deadline_ts=10.0)
        model2.request("c3", EP)
        model2._transition(CheckpointPhase.RESTORED, "ck")  # retire is allowed when restored
        reply = model2.retire([EP])
        assert reply.extra["refused"] == ("c3",)
        assert model2.state_of("c3") is CallState.REFUSED
        assert any(n.code is ErrorCode.STALE_ATTEMPT for n in model2.drain_notes())

    def test_only_a_response_already_streaming_blocks_readiness(self):
        model = _model(ManualClock(), wait=True)
        model.request("streaming", EP)
        model.first_chunk("streaming")
        model.request("unstarted", EpisodeId("r-1", 0))
        model.prepare("ck", deadline_ts=10.0)
        assert not model.poll_ready()
        assert model.report().blockers == (EP.capture_key,)
        assert model.first_chunk("unstarted") is False  # held, not started
        assert model.finish("streaming") is True
        assert model.poll_ready()
        assert model.finish("unstarted") is False  # held until resume
        model.resume("ck")
        assert model.delivered == ["unstarted"]

    def test_a_worker_lost_after_readiness_fails_the_commit_for_good(self):
        model = _model(ManualClock(), wait=True, workers=2)
        model.prepare("ck", deadline_ts=10.0)
        assert model.poll_ready()
        model.lose_worker(1)
        first = model.commit("ck", deadline_ts=10.0)
        again = model.commit("ck", deadline_ts=10.0)
        assert first.code is ErrorCode.EXPORT_FAILED
        assert again.code is ErrorCode.EXPORT_FAILED and again.idempotent
        model.resume("ck")
        assert model.restore("ck2", 10.0, [EP]).code is ErrorCode.CHECKPOINT_ERROR

    def test_a_worker_lost_during_prepare_blocks_readiness(self):
        model = _model(ManualClock(), wait=True, workers=2)
        model.request("c", EP)
        model.first_chunk("c")  # streaming on worker 0: prepare waits
        model.prepare("ck", deadline_ts=10.0)
        assert model.lose_worker(0) == ["c"]  # its stream dies with it
        assert not model.poll_ready()
        assert "worker-0" in model.report().blockers


class TestCheckpointProtocol:
    def _coordinator(self, clock, resources_busy=False):
        env = EnvironmentParticipant(instance="env", clock=clock)
        model = _model(clock, wait=True)
        agent = _agent(clock)
        res = ResourcesParticipant(instance="res", clock=clock)
        if resources_busy:
            res.begin_tool_call()
        coord = CheckpointCoordinator({ParticipantKind.ENVIRONMENT: [env],
                                       ParticipantKind.MODEL: [model],
                                       ParticipantKind.AGENT: [agent],
                                       ParticipantKind.RESOURCES: [res]}, clock)
        return coord, env, model, agent, res

    def test_prepare_stops_at_the_first_stage_not_ready_by_the_deadline(self):
        clock = ManualClock()
        coord, env, model, agent, res = self._coordinator(clock)
        agent.complete(agent.begin_run(EP), "done")
        progress = coord.begin_prepare("ck", deadline_ts=300.0)
        assert not progress.done
        clock.set(300.0)
        progress = coord.advance_prepare()
        assert progress.done and not progress.prepared
        assert progress.stopped_at is ParticipantKind.AGENT
        assert res.phase is CheckpointPhase.IDLE  # never asked: stages run in order
        assert not agent.admission_open  # left closed: the caller must resume

    def test_resume_reopens_admission_in_reverse_order(self):
        clock = ManualClock()
        coord, *_ = self._coordinator(clock)
        assert coord.begin_prepare("ck", deadline_ts=10.0).prepared
        fan = coord.resume("ck")
        assert [p.kind for p, _ in fan.replies] == list(RESUME_ORDER)
        assert all(p.admission_open for p in coord.all())

    def test_replies_are_idempotent_per_checkpoint_and_operation(self):
        clock = ManualClock()
        coord, *_ = self._coordinator(clock)
        coord.begin_prepare("ck", deadline_ts=10.0)
        first = coord.commit("ck", deadline_ts=10.0)
        second = coord.commit("ck", deadline_ts=10.0)
        assert first.ok and second.ok
        assert all(r.idempotent for _, r in second.replies)

    def test_a_silent_controller_lets_the_lease_expire_and_the_participant_resume(self):
        clock = ManualClock()
        coord, env, model, agent, res = self._coordinator(clock)
        coord.begin_prepare("ck", deadline_ts=400.0)
        clock.set(999.0)
        assert not agent.tick()
        clock.set(1000.0)
        assert agent.tick()
        notes = [n.kind for n in agent.drain_notes()]
        assert NoteKind.LEASE_EXPIRED in notes and NoteKind.ADMISSION_OPENED in notes
        assert agent.commit("ck", deadline_ts=1300.0).code is ErrorCode.STALE_CHECKPOINT
        assert agent.prepare("ck", deadline_ts=1300.0).code is ErrorCode.STALE_CHECKPOINT

    def test_a_failed_restore_retires_the_next_attempts_then_resumes_everyone(self):
        clock = ManualClock()
        coord, env, model, agent, res = self._coordinator(clock)
        model.request("c", EP)  # a model that has served a call refuses to restore
        fan = coord.restore("ck", 10.0, [EP])
        assert not fan.ok
        assert all(p.phase is CheckpointPhase.IDLE for p in coord.all())
        assert agent.is_retired(EpisodeId(EP.rollout_id, 1))

    def test_forget_drops_the_refusal_marks(self):
        agent = _agent(ManualClock())
        agent.retire([EP])
        agent.forget([EP.rollout_id])
        assert not agent.is_retired(EP)


class TestDeadlines:
    def test_a_suspended_deadline_does_not_fire(self):
        clock = ManualClock()
        reg = DeadlineRegistry(clock, counted=True)
        d = reg.add("d", kind=DeadlineKind.ROLLOUT, budget_s=180.0)
        clock.set(150.0)
        reg.suspend(DeadlineHolder.GYM_CHECKPOINT)
        clock.set(400.0)
        assert d.due_at() is None
        with pytest.raises(ModelInvariantError):
            reg.fire("d")
        reg.resume(DeadlineHolder.GYM_CHECKPOINT)
        assert d.due_at() == pytest.approx(430.0)
        assert d.remaining_s(400.0) == pytest.approx(30.0)

    def test_the_flag_registry_restarts_clocks_when_the_snapshot_ends_mid_training(self):
        clock = ManualClock()
        reg = DeadlineRegistry(clock, counted=False)
        d = reg.add("d", kind=DeadlineKind.ROLLOUT, budget_s=100.0)
        reg.suspend(DeadlineHolder.COLOCATED_TRAINING)
        reg.suspend(DeadlineHolder.GYM_CHECKPOINT)  # a no-op on RL's registry
        clock.set(10.0)
        reg.resume(DeadlineHolder.GYM_CHECKPOINT)
        assert d.due_at() is not None  # running again while training still holds it

    def test_counted_holders_resume_only_when_the_last_holder_lets_go(self):
        clock = ManualClock()
        reg = DeadlineRegistry(clock, counted=True)
        d = reg.add("d", kind=DeadlineKind.ROLLOUT, budget_s=100.0)
        reg.suspend(DeadlineHolder.COLOCATED_TRAINING)
        reg.suspend(DeadlineHolder.GYM_CHECKPOINT)
        clock.set(10.0)
        assert reg.resume(DeadlineHolder.GYM_CHECKPOINT).holders_count == 1
        assert d.due_at() is None
        reg.resume(DeadlineHolder.COLOCATED_TRAINING)
        assert d.due_at() == pytest.approx(110.0)


class DeadlineMachine(RuleBasedStateMachine):
    """Budget is conserved: used + remaining == budget, suspended time never counts."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.reg = DeadlineRegistry(self.clock, counted=True)
        self.d = self.reg.add("d", kind=DeadlineKind.ROLLOUT, budget_s=100.0)
        self.held = {h: 0 for h in DeadlineHolder}
        self.running_s = 0.0

    @rule(dt=st.floats(0.0, 20.0))
    def advance(self, dt):
        if not self.reg.suspended:
            dt = min(dt, max(self.d.remaining_s(self.clock.now()), 0.0))
            self.running_s += dt
        self.clock.advance(dt)

    @rule(h=st.sampled_from(list(DeadlineHolder)))
    def suspend(self, h):
        self.reg.suspend(h)
        self.held[h] += 1

    @rule(h=st.sampled_from(list(DeadlineHolder)))
    def resume(self, h):
        if self.held[h]:
            self.reg.resume(h)
            self.held[h] -= 1

    @invariant()
    def remaining_is_the_budget_minus_running_time(self):
        assert self.d.remaining_s(self.clock.now()) == pytest.approx(100.0 - self.running_s)
        assert (self.d.due_at() is None) == (sum(self.held.values()) > 0)


TestDeadlineMachine = DeadlineMachine.TestCase
TestDeadlineMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
