"""Gym side of a replay: each row's /run as a timeline of turns against the participants.

A run's turn is a policy call (admitted, waiting or refused by the model gate; its response
streams, or is held while admission is closed) followed by a tool step; a turn boundary follows.
Parking follows the agent participant: a park-requested run waiting on an undelivered call parks
at once at its last boundary; one mid-tool-step or mid-stream parks at its next boundary.
The RL deadline never cancels a run: an abandoned run keeps going and may finish unread.

Gym asks the agent, policy-model and resources servers (``ports``), the fleet for policy calls
when the scenario has one, and a real engine when the replay has one; it tells ``PrepareWatch``
whenever a run moved something a snapshot prepare may be waiting on.
"""

from __future__ import annotations

from typing import Any

from rolloutscope.vocabulary import ExecutionState
from rolloutscope.replay.backends.base import GenerationSession
from rolloutscope.replay.event_engine import Priority
from rolloutscope.replay.participants.agent import CompletionReceipt, ExecutionKey, RunRefused
from rolloutscope.replay.participants.model import Admission, CallState
from rolloutscope.replay.participants.protocol import EpisodeId
from rolloutscope.replay.participants.rollouts import classify_http
from rolloutscope.replay.scenario import Faults, Row
from rolloutscope.replay.sim.gym_recorder import GymRecorder
from rolloutscope.replay.sim.ports import (
    AgentServer,
    FleetForGym,
    PolicyModelServer,
    Timeline,
    ToolResources,
)
from rolloutscope.replay.sim.gym_run import Activity, RefusedRun, Run, RunOwner
from rolloutscope.replay.sim.signals import PrepareWatch


# The members read on every turn, bound once: on Python 3.11 each ``Enum.MEMBER`` read runs
# ``EnumType.__getattr__``'s attribute hook, ten times the cost of a global read, and a large
# replay makes millions of them.
_MODEL, _TOOL, _TOOL_WAIT, _PARKED, _DONE = (
    Activity.MODEL, Activity.TOOL, Activity.TOOL_WAIT, Activity.PARKED, Activity.DONE)
_RETIRED, _PARK_REQUESTED = ExecutionState.RETIRED, ExecutionState.PARK_REQUESTED
_REFUSED, _WAITING = Admission.REFUSED, Admission.WAITING
_UNDELIVERED = (CallState.HELD, CallState.WAITING)  # a policy call whose response is not out
_WORK = Priority.WORK


class GymSide:
    def __init__(self, *, timeline: Timeline, agent: AgentServer, model: PolicyModelServer,
                 resources: ToolResources, fleet: FleetForGym,
                 generation: GenerationSession | None, prepare: PrepareWatch, faults: Faults,
                 recorder: GymRecorder) -> None:
        self._timeline = timeline
        self._agent = agent
        self._model = model
        self._resources = resources
        self._fleet = fleet
        self._generation = generation  # a real engine serves the policy calls, without a fleet
        self._prepare = prepare
        self._rec = recorder
        self.runs: dict[ExecutionKey, Run] = {}  # live runs (not completed, failed or retired)
        self._by_call: dict[str, Run] = {}
        self._tool_waiting: list[Run] = []
        self.completions = 0
        self.environment_dead = False  # a dead Gym subprocess never answers a tool step
        self._lost = {(r.prompt_idx, r.row_idx, r.rl_attempt) for r in faults.lost_replies}
        self._failures = {(f.row.prompt_idx, f.row.row_idx, f.row.rl_attempt): f
                          for f in faults.row_failures}

    # -- what the controller asks -----------------------------------------------------------------
    def start_run(self, owner: RunOwner, *, prompt_idx: int, row_idx: int, rl_attempt: int,
                  episode: EpisodeId, row: Row, parent: Any) -> Run | None:
        try:
            key = self._agent.begin_run(episode)
        except RunRefused as exc:
            owner.on_row_done(RefusedRun(prompt_idx, row_idx, rl_attempt), None,
                              classify_http(409, f"{exc.code}: {exc}"))
            return None
        run = Run(key, owner, prompt_idx, row_idx, rl_attempt, row)
        self._rec.run_started(run, parent)
        self.runs[key] = run
        ref = (prompt_idx, row_idx, rl_attempt)
        # a fault hits the first run of its row in that RL try; a re-dispatch runs clean
        run.lost_reply = ref in self._lost
        self._lost.discard(ref)
        fault = self._failures.pop(ref, None)
        if fault is not None:
            run.fault_timer = self._timeline.after(fault.after_s, self._inject_failure, run,
                                                   fault.http_status)
        if row.setup_s > 0:
            run.timer = self._timeline.after(row.setup_s, self._boundary, run)
        else:
            self._boundary(run)
        return run

    def is_live(self, run: Run) -> bool:
        return run.key in self.runs

    def acknowledge(self, receipts: list[CompletionReceipt]) -> int:
        return self._agent.acknowledge(receipts)

    def state_when(self, runs: list[Run]) -> str:
        """What the guarded runs were doing (for a deadline firing): parked > held > running."""
        states = set()
        for run in runs:
            if run.activity is _DONE:
                continue
            if run.parked:
                states.add("parked")
            elif run.call_id is not None and self._model.state_of(run.call_id) is CallState.HELD:
                states.add("held")
            else:
                states.add("running")
        for s in ("parked", "held", "running"):
            if s in states:
                return s
        return "unknown"

    # -- faults -----------------------------------------------------------------------------------
    def subprocess_died(self) -> None:
        self.environment_dead = True

    def fail_calls(self, call_ids: list[str], status: int) -> None:
        """Calls that died with their worker: their runs fail with ``status``."""
        for cid in call_ids:
            run = self._by_call.get(cid)
            if run is not None:
                self._inject_failure(run, status)

    def _inject_failure(self, run: Run, status: int, detail: str = "injected fault") -> None:
        if run.activity is _DONE:
            return
        failure = classify_http(status, detail)
        self._agent.fail(run.key)
        self._end(run, _RETIRED, failure.detail)
        if not run.abandoned:
            run.owner.on_row_done(run, None, failure)
        self._prepare.gym_changed()

    # -- ending -----------------------------------------------------------------------------------
    def _end(self, run: Run, state: ExecutionState, error: str | None = None) -> None:
        run.parked = False
        self._rec.run_ended(run, state, error)
        run.activity = _DONE
        if run.timer is not None:
            run.timer.cancel()
        if run.fault_timer is not None:
            run.fault_timer.cancel()
        if run.fleet_call is not None:
            self._fleet.cancel(run.fleet_call)
            run.fleet_call = None
        if run.gen_call is not None:
            assert self._generation is not None
            self._generation.cancel(run.gen_call)
            run.gen_call = None
        if run.call_id is not None:
            self._model.forget_call(run.call_id)
            self._by_call.pop(run.call_id, None)
        self.runs.pop(run.key, None)

    def _complete(self, run: Run) -> None:
        receipt = self._agent.complete(run.key, f"{run.key.rollout_id}:{run.rl_attempt}")
        self._rec.run_completed(run, receipt)
        self._end(run, ExecutionState.COMPLETED)
        self.completions += 1
        # the reply travels back on RL's stream unless it was lost on the wire; an abandoned
        # run's reply has no reader
        if not run.abandoned:
            run.owner.on_row_done(run, None if run.lost_reply else receipt, None)
        self._prepare.gym_changed()

    def retired(self, keys: tuple[ExecutionKey, ...]) -> None:
        for key in keys:
            run = self.runs.get(key)
            if run is None:
                continue
            self._rec.run_retired(run)
            self._end(run, _RETIRED)

    # -- turns ----------------------------------------------------------------------------------
    def _boundary(self, run: Run) -> None:
        run.timer = None
        if self._agent.state_of(run.key) is _RETIRED:
            return
        if run.turn == len(run.turns):
            self._complete(run)
            return
        if not self._agent.record_boundary(run.key):
            self._park(run)
            return
        self._call(run)

    def _call(self, run: Run) -> None:
        turn = run.turns[run.turn]
        run.activity = _MODEL
        call_id = run.call_id = f"{run.call_prefix}{run.turn}"
        decision, code = self._model.request(call_id, run.episode, constrained=turn.constrained)
        self._by_call[call_id] = run
        if decision is _REFUSED:
            run.call_id = None
            self._by_call.pop(call_id, None)
            # a 409 from the model server fails the /run (a 4xx: RL calls it a data failure)
            self._inject_failure(run, 409 if code is not None else 500)
            return
        if decision is _WAITING:
            self._rec.call_waiting(run, call_id)
            return
        self._admitted(run)

    def _admitted(self, run: Run) -> None:
        turn = run.turns[run.turn]
        if self._fleet.active:  # generated on a shard; Gym pins stream=false on this path
            run.fleet_call = self._fleet.model_call(run, turn.model_s, self)
            return
        gen = self._generation
        if gen is not None:  # served by a real engine: its answers come back as events
            assert run.call_id is not None
            run.gen_call = gen.submit(
                call_id=run.call_id, turn=turn, shard=None,
                on_first_token=lambda: self._real_first_token(run),
                on_done=lambda result, _s: self._real_done(run, result))
            return
        if turn.streaming:
            run.timer = self._timeline.after(turn.first_chunk_s, self._first_chunk, run)
        else:  # stream=false: no byte arrives before the generation finishes
            run.timer = self._timeline.after(turn.model_s, self._first_chunk, run)

    def _first_chunk(self, run: Run) -> None:
        turn = run.turns[run.turn]
        assert run.call_id is not None
        started = self._model.first_chunk(run.call_id)
        if started and turn.streaming:
            self._rec.response_started(run)
        rest = turn.model_s - turn.first_chunk_s if turn.streaming else 0.0
        if rest > 0:
            run.timer = self._timeline.after(rest, self._finished, run)
        else:
            self._finished(run)

    def _real_first_token(self, run: Run) -> None:
        assert run.call_id is not None
        if self._model.first_chunk(run.call_id):
            self._rec.response_started(run)

    def _real_done(self, run: Run, result: Any) -> None:
        run.gen_call = None
        if result.error is not None:
            # Gym's client answers the /run with a 500 of its own (no fleet: no retry loop)
            self._inject_failure(run, 500, f"policy model call failed: "
                                           f"{type(result.error).__name__}: {result.error}")
            return
        assert run.call_id is not None
        if self._model.state_of(run.call_id) is not CallState.STREAMING:
            self._model.first_chunk(run.call_id)  # a call that streamed has started already
        self._finished(run)

    # ModelCallAnswers: the fleet's final answer to a run's policy call
    def generated(self, run: Run) -> None:
        """The fleet answered the run's policy call."""
        run.fleet_call = None
        assert run.call_id is not None
        self._model.first_chunk(run.call_id)
        self._finished(run)

    def model_call_failed(self, run: Run, status: int) -> None:
        """The policy call failed for good: the agent's /run fails with a 500 of its own."""
        run.fleet_call = None
        self._inject_failure(run, 500, f"policy model call failed with HTTP {status}")

    def _finished(self, run: Run) -> None:
        run.timer = None
        assert run.call_id is not None
        if self._model.finish(run.call_id):
            self._delivered(run)
            # a stream that ended may unblock a waiting prepare (the test saves a call a turn)
            if self._prepare.preparing:
                self._prepare.gym_changed()

    def _delivered(self, run: Run) -> None:
        self._agent.model_call_delivered(run.key)
        if self.environment_dead:
            run.activity = _TOOL  # a dead Gym subprocess never answers the tool step
            return
        if self._resources.begin_tool_call():
            run.activity = _TOOL
            run.timer = self._timeline.after(run.turns[run.turn].tool_s, self._tool_done,
                                             run)
        else:
            run.activity = _TOOL_WAIT
            self._tool_waiting.append(run)

    def _tool_done(self, run: Run) -> None:
        self._resources.end_tool_call()
        assert run.call_id is not None
        self._model.forget_call(run.call_id)
        self._by_call.pop(run.call_id, None)
        run.call_id = None
        run.turn += 1
        self._boundary(run)
        if self._prepare.preparing:
            self._prepare.gym_changed()

    # -- parking (what the checkpoint notes tell Gym) ---------------------------------------------
    def _park(self, run: Run, boundary_state: Any = None) -> None:
        if boundary_state is None:
            boundary_state = self._agent.parked_state_of(run.key)
        if run.activity is not _MODEL:
            run.activity = _PARKED
        run.parked = True
        self._rec.run_parked(run, checkpoint_id=self._agent.checkpoint_id,
                             boundary_state=boundary_state,
                             boundary_index=self._agent.boundary_of(run.key))

    def on_park_requested(self) -> None:
        """Agent admission closed: every running run is park-requested."""
        model = self._model
        for run in list(self.runs.values()):
            if self._agent.state_of(run.key) is not _PARK_REQUESTED:
                continue
            self._rec.park_requested(run)
            # waiting on an undelivered call: its agent is still at the boundary it recorded
            # before the call, so it parks there now
            if run.activity is _MODEL and run.call_id is not None and model.state_of(
                    run.call_id) in _UNDELIVERED:
                self._park(run, self._agent.park_now(run.key))

    def on_agent_released(self, keys: list[ExecutionKey]) -> None:
        now = self._timeline.now
        for key in keys:
            run = self.runs.get(key)
            if run is None:
                continue
            if run.parked:
                run.parked = False
                self._rec.run_released(run)
            if run.activity is _PARKED:
                run.activity = _MODEL
                # continue after the whole resume fan-out: the model reopens after the agent
                run.timer = self._timeline.at(now, self._call, run, priority=_WORK)

    def on_model_reopened(self, delivered: list[str], admitted: list[str]) -> None:
        now = self._timeline.now
        for cid in delivered:
            run = self._by_call.get(cid)
            if run is not None:
                run.timer = self._timeline.at(now, self._delivered, run, priority=_WORK)
        for cid in admitted:
            run = self._by_call.get(cid)
            if run is not None:
                self._admitted(run)

    def on_tools_reopened(self) -> None:
        waiting, self._tool_waiting = self._tool_waiting, []
        for run in waiting:
            if run.activity is _TOOL_WAIT:
                run.activity = _TOOL
                run.timer = self._timeline.after(run.turns[run.turn].tool_s,
                                                 self._tool_done, run)
            else:
                self._resources.end_tool_call()  # admitted on reopen, but its run is gone
