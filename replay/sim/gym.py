"""Gym side of a replay: each row's /run as a timeline of turns against the participants.

A run's turn is a policy call (admitted, waiting or refused by the model gate; its response
streams, or is held while admission is closed) followed by a tool step; a turn boundary follows.
Parking follows the agent participant: a park-requested run waiting on an undelivered call parks
at once at its last boundary; one mid-tool-step or mid-stream parks at its next boundary.
The RL deadline never cancels a run: an abandoned run keeps going and may finish unread.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.trace import Status, StatusCode

from rolloutscope.vocabulary import (
    Attr,
    EventName,
    ExecutionState,
    SpanName,
)
from rolloutscope.replay.engine import Priority, Timer
from rolloutscope.replay.participants.agent import CompletionReceipt, ExecutionKey, RunRefused
from rolloutscope.replay.participants.model import Admission, CallState
from rolloutscope.replay.participants.protocol import EpisodeId
from rolloutscope.replay.participants.rollouts import Failure, classify_http
from rolloutscope.replay.scenario import Row
from rolloutscope.replay.sim import services

if TYPE_CHECKING:
    from rolloutscope.replay.sim.world import World


class Activity(IntEnum):
    SETUP = 0
    MODEL = 1
    TOOL = 2
    TOOL_WAIT = 3
    PARKED = 4
    DONE = 5


class RunOwner(Protocol):
    def on_row_done(self, run: Run, receipt: CompletionReceipt | None,
                    failure: Failure | None) -> None: ...


class Run:
    __slots__ = ("key", "episode", "owner", "prompt_idx", "row_idx", "rl_attempt", "row",
                 "turn", "activity", "call_id", "span", "rollout_span", "parked_span", "timer",
                 "abandoned", "lost_reply", "fault_timer", "fleet_call", "gen_call")

    def __init__(self, key: ExecutionKey, owner: RunOwner, prompt_idx: int, row_idx: int,
                 rl_attempt: int, row: Row) -> None:
        self.key = key
        # the key's episode, built once: every policy call names it
        self.episode = key.episode
        self.owner = owner
        self.prompt_idx = prompt_idx
        self.row_idx = row_idx
        self.rl_attempt = rl_attempt
        self.row = row
        self.turn = 0
        self.activity = Activity.SETUP
        self.call_id: str | None = None
        self.span: Any = None
        self.rollout_span: Any = None
        self.parked_span: Any = None
        self.timer: Timer | None = None
        self.abandoned = False  # RL stopped reading it; it keeps running
        self.lost_reply = False
        self.fault_timer: Timer | None = None
        self.fleet_call: Any = None  # the policy call in the generation fleet, when modelled
        self.gen_call: Any = None  # the policy call on a real engine, without a fleet

    def ids(self) -> dict[str, Any]:
        return {Attr.ROLLOUT_ID: self.key.rollout_id, Attr.PROMPT_IDX: self.prompt_idx,
                Attr.RL_ATTEMPT: self.rl_attempt}


class GymSide:
    def __init__(self, world: World) -> None:
        self.w = world
        self.runs: dict[ExecutionKey, Run] = {}  # live runs (not completed, failed or retired)
        self._by_call: dict[str, Run] = {}
        self._tool_waiting: list[Run] = []
        faults = world.scenario.faults
        self._lost = {(r.prompt_idx, r.row_idx, r.rl_attempt) for r in faults.lost_replies}
        self._failures = {(f.row.prompt_idx, f.row.row_idx, f.row.rl_attempt): f
                          for f in faults.row_failures}

    # -- starting and ending ------------------------------------------------------------------
    def start_run(self, owner: RunOwner, *, prompt_idx: int, row_idx: int, rl_attempt: int,
                  episode: EpisodeId, row: Row, parent: Any) -> Run | None:
        w = self.w
        try:
            key = w.agent.begin_run(episode)
        except RunRefused as exc:
            owner.on_row_done(_Refused(prompt_idx, row_idx, rl_attempt), None,
                              classify_http(409, f"{exc.code}: {exc}"))
            return None
        run = Run(key, owner, prompt_idx, row_idx, rl_attempt, row)
        now = w.now
        ids = run.ids()
        run.span = w.tel.start(services.AGENT, SpanName.AGENT_EXECUTION, now, {
            **ids, Attr.ROW_IDX: row_idx, Attr.EPISODE_ATTEMPT: key.attempt,
            Attr.EXECUTION_GENERATION: key.generation,
            Attr.EXECUTION_STATE: ExecutionState.RUNNING.value}, parent)
        run.rollout_span = w.tel.start(services.AGENT, SpanName.GYM_ROLLOUT, now, {
            Attr.ROLLOUT_ID: key.episode.capture_key, Attr.PROMPT_IDX: prompt_idx,
            Attr.RL_ATTEMPT: rl_attempt, Attr.ROW_IDX: row_idx}, run.span)
        self.runs[key] = run
        ref = (prompt_idx, row_idx, rl_attempt)
        # a fault hits the first run of its row in that RL try; a re-dispatch runs clean
        run.lost_reply = ref in self._lost
        self._lost.discard(ref)
        fault = self._failures.pop(ref, None)
        if fault is not None:
            run.fault_timer = w.sched.after(fault.after_s, self._inject_failure, run,
                                            fault.http_status)
        if row.setup_s > 0:
            run.timer = w.sched.after(row.setup_s, self._boundary, run)
        else:
            self._boundary(run)
        return run

    def _end_spans(self, run: Run, state: ExecutionState, error: str | None = None) -> None:
        now = self.w.now
        if run.parked_span is not None:
            self.w.tel.end(run.parked_span, now)
            run.parked_span = None
        for span in (run.rollout_span, run.span):
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
        self.w.tel.end(run.rollout_span, now)
        self.w.tel.end(run.span, now, {Attr.EXECUTION_STATE: state.value})
        run.activity = Activity.DONE
        if run.timer is not None:
            run.timer.cancel()
        if run.fault_timer is not None:
            run.fault_timer.cancel()
        if run.fleet_call is not None:
            self.w.fleet.cancel(run.fleet_call)
            run.fleet_call = None
        if run.gen_call is not None:
            self.w.generation.cancel(run.gen_call)
            run.gen_call = None
        if run.call_id is not None:
            self.w.model.forget_call(run.call_id)
            self._by_call.pop(run.call_id, None)
        self.runs.pop(run.key, None)

    def _complete(self, run: Run) -> None:
        receipt = self.w.agent.complete(run.key, f"{run.key.rollout_id}:{run.rl_attempt}")
        self.w.tel.event(run.span, EventName.AGENT_COMPLETED, self.w.now, {
            **run.ids(), Attr.RESULT_ID: receipt.result_id,
            Attr.RESULT_DIGEST: receipt.result_digest[:16]})
        self._end_spans(run, ExecutionState.COMPLETED)
        self.w.completions += 1
        # the reply travels back on RL's stream unless it was lost on the wire; an abandoned
        # run's reply has no reader
        if not run.abandoned:
            run.owner.on_row_done(run, None if run.lost_reply else receipt, None)
        self.w.on_gym_change()

    def _inject_failure(self, run: Run, status: int, detail: str = "injected fault") -> None:
        if run.activity is Activity.DONE:
            return
        failure = classify_http(status, detail)
        self.w.agent.fail(run.key)
        self._end_spans(run, ExecutionState.RETIRED, failure.detail)
        if not run.abandoned:
            run.owner.on_row_done(run, None, failure)
        self.w.on_gym_change()

    def fail_calls(self, call_ids: list[str], status: int) -> None:
        """Calls that died with their worker: their runs fail with ``status``."""
        for cid in call_ids:
            run = self._by_call.get(cid)
            if run is not None:
                self._inject_failure(run, status)

    def retired(self, keys: tuple[ExecutionKey, ...]) -> None:
        for key in keys:
            run = self.runs.get(key)
            if run is None:
                continue
            self.w.tel.event(run.span, EventName.AGENT_RETIRED, self.w.now,
                             {Attr.RETIRE_REASON: "retire"})
            self._end_spans(run, ExecutionState.RETIRED)

    # -- turns ----------------------------------------------------------------------------------
    def _boundary(self, run: Run) -> None:
        run.timer = None
        if self.w.agent.state_of(run.key) is ExecutionState.RETIRED:
            return
        if run.turn == len(run.row.turns):
            self._complete(run)
            return
        if not self.w.agent.record_boundary(run.key):
            self._park(run)
            return
        self._call(run)

    def _call(self, run: Run) -> None:
        turn = run.row.turns[run.turn]
        run.activity = Activity.MODEL
        call_id = run.call_id = f"{run.episode.capture_key}.g{run.key.generation}.t{run.turn}"
        decision, code = self.w.model.request(call_id, run.episode, constrained=turn.constrained)
        self._by_call[call_id] = run
        if decision is Admission.REFUSED:
            run.call_id = None
            self._by_call.pop(call_id, None)
            # a 409 from the model server fails the /run (a 4xx: RL calls it a data failure)
            self._inject_failure(run, 409 if code is not None else 500)
            return
        if decision is Admission.WAITING:
            self.w.tel.event(run.span, EventName.MODEL_ADMISSION_WAIT, self.w.now,
                             {Attr.MODEL_CALL_ID: call_id})
            return
        self._admitted(run)

    def _admitted(self, run: Run) -> None:
        turn = run.row.turns[run.turn]
        if self.w.fleet.active:  # generated on a shard; Gym pins stream=false on this path
            run.fleet_call = self.w.fleet.model_call(run, turn.model_s)
            return
        gen = self.w.generation
        if gen is not None:  # served by a real engine: its answers come back as events
            assert run.call_id is not None
            run.gen_call = gen.submit(
                call_id=run.call_id, turn=turn, shard=None,
                on_first_token=lambda: self._real_first_token(run),
                on_done=lambda result, _s: self._real_done(run, result))
            return
        if turn.streaming:
            run.timer = self.w.sched.after(turn.first_chunk_s, self._first_chunk, run)
        else:  # stream=false: no byte arrives before the generation finishes
            run.timer = self.w.sched.after(turn.model_s, self._first_chunk, run)

    def _first_chunk(self, run: Run) -> None:
        turn = run.row.turns[run.turn]
        assert run.call_id is not None
        started = self.w.model.first_chunk(run.call_id)
        if started and turn.streaming:
            self.w.tel.event(run.span, EventName.MODEL_RESPONSE_STARTED, self.w.now,
                             {Attr.MODEL_CALL_ID: run.call_id})
        rest = turn.model_s - turn.first_chunk_s if turn.streaming else 0.0
        if rest > 0:
            run.timer = self.w.sched.after(rest, self._finished, run)
        else:
            self._finished(run)

    def _real_first_token(self, run: Run) -> None:
        assert run.call_id is not None
        if self.w.model.first_chunk(run.call_id):
            self.w.tel.event(run.span, EventName.MODEL_RESPONSE_STARTED, self.w.now,
                             {Attr.MODEL_CALL_ID: run.call_id})

    def _real_done(self, run: Run, result: Any) -> None:
        run.gen_call = None
        if result.error is not None:
            # Gym's client answers the /run with a 500 of its own (no fleet: no retry loop)
            self._inject_failure(run, 500, f"policy model call failed: "
                                           f"{type(result.error).__name__}: {result.error}")
            return
        assert run.call_id is not None
        if self.w.model.state_of(run.call_id) is not CallState.STREAMING:
            self.w.model.first_chunk(run.call_id)  # a call that streamed has started already
        self._finished(run)

    def generated(self, run: Run) -> None:
        """The fleet answered the run's policy call."""
        run.fleet_call = None
        assert run.call_id is not None
        self.w.model.first_chunk(run.call_id)
        self._finished(run)

    def model_call_failed(self, run: Run, status: int) -> None:
        """The policy call failed for good: the agent's /run fails with a 500 of its own."""
        run.fleet_call = None
        self._inject_failure(run, 500, f"policy model call failed with HTTP {status}")

    def _finished(self, run: Run) -> None:
        run.timer = None
        assert run.call_id is not None
        if self.w.model.finish(run.call_id):
            self._delivered(run)
            self.w.on_gym_change()  # a stream that ended may unblock a prepare

    def _delivered(self, run: Run) -> None:
        self.w.agent.model_call_delivered(run.key)
        if self.w.env_dead:
            run.activity = Activity.TOOL  # a dead Gym subprocess never answers the tool step
            return
        if self.w.resources.begin_tool_call():
            run.activity = Activity.TOOL
            run.timer = self.w.sched.after(run.row.turns[run.turn].tool_s, self._tool_done, run)
        else:
            run.activity = Activity.TOOL_WAIT
            self._tool_waiting.append(run)

    def _tool_done(self, run: Run) -> None:
        self.w.resources.end_tool_call()
        assert run.call_id is not None
        self.w.model.forget_call(run.call_id)
        self._by_call.pop(run.call_id, None)
        run.call_id = None
        run.turn += 1
        self._boundary(run)
        self.w.on_gym_change()

    # -- parking --------------------------------------------------------------------------------
    def _park(self, run: Run, boundary_state: Any = None) -> None:
        w = self.w
        if boundary_state is None:
            boundary_state = w.agent.parked_state_of(run.key)
        if run.activity is not Activity.MODEL:
            run.activity = Activity.PARKED
        run.parked_span = w.tel.start(services.AGENT, SpanName.AGENT_PARKED, w.now, {
            **run.ids(), Attr.CHECKPOINT_ID: w.agent.checkpoint_id or "",
            Attr.PARKED_BOUNDARY_STATE: boundary_state.value,
            Attr.BOUNDARY_INDEX: w.agent.boundary_of(run.key)}, run.span)

    def on_park_requested(self) -> None:
        """Agent admission closed: every running run is park-requested."""
        w = self.w
        model = w.model
        for run in list(self.runs.values()):
            if w.agent.state_of(run.key) is not ExecutionState.PARK_REQUESTED:
                continue
            w.tel.event(run.span, EventName.AGENT_PARK_REQUESTED, w.now)
            # waiting on an undelivered call: its agent is still at the boundary it recorded
            # before the call, so it parks there now
            if run.activity is Activity.MODEL and run.call_id is not None and model.state_of(
                    run.call_id) in (CallState.HELD, CallState.WAITING):
                self._park(run, w.agent.park_now(run.key))

    def on_agent_released(self, keys: list[ExecutionKey]) -> None:
        now = self.w.now
        for key in keys:
            run = self.runs.get(key)
            if run is None:
                continue
            if run.parked_span is not None:  # its end is the release: no separate event
                self.w.tel.end(run.parked_span, now)
                run.parked_span = None
            if run.activity is Activity.PARKED:
                run.activity = Activity.MODEL
                # continue after the whole resume fan-out: the model reopens after the agent
                run.timer = self.w.sched.at(now, self._call, run, priority=Priority.WORK)

    def on_model_reopened(self, delivered: list[str], admitted: list[str]) -> None:
        now = self.w.now
        for cid in delivered:
            run = self._by_call.get(cid)
            if run is not None:
                run.timer = self.w.sched.at(now, self._delivered, run, priority=Priority.WORK)
        for cid in admitted:
            run = self._by_call.get(cid)
            if run is not None:
                self._admitted(run)

    def on_tools_reopened(self) -> None:
        waiting, self._tool_waiting = self._tool_waiting, []
        for run in waiting:
            if run.activity is Activity.TOOL_WAIT:
                run.activity = Activity.TOOL
                run.timer = self.w.sched.after(run.row.turns[run.turn].tool_s, self._tool_done,
                                               run)
            else:
                self.w.resources.end_tool_call()  # admitted on reopen, but its run is gone

    def state_when(self, runs: list[Run]) -> str:
        """What the guarded runs were doing (for a deadline firing): parked > held > running."""
        states = set()
        for run in runs:
            if run.activity is Activity.DONE:
                continue
            if run.parked_span is not None:
                states.add("parked")
            elif run.call_id is not None and self.w.model.state_of(run.call_id) is CallState.HELD:
                states.add("held")
            else:
                states.add("running")
        for s in ("parked", "held", "running"):
            if s in states:
                return s
        return "unknown"


class _Refused:
    """Stands in for a run the agent refused to start, so the owner can count the row."""

    __slots__ = ("prompt_idx", "row_idx", "rl_attempt", "abandoned", "key")

    def __init__(self, prompt_idx: int, row_idx: int, rl_attempt: int) -> None:
        self.prompt_idx, self.row_idx, self.rl_attempt = prompt_idx, row_idx, rl_attempt
        self.abandoned = False
        self.key = None

