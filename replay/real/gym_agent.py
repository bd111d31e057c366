"""NeMo-Gym's agent checkpoint participant and its control plane, driven from the engine.

The engine's Gym side runs each ``/run`` as a timeline of turns and asks its agent participant
what happens at every boundary; the snapshot process drives the participant's checkpoint
operations. ``GymAgent`` answers both through Gym's real generation-2 code on the virtual-time
runtime:

- each execution is a session of the real ``AgentSessionParticipant`` (``open_session``, then
  one ``activation`` held by a coroutine for the whole run). At each turn boundary the
  coroutine awaits the real ``Activation.boundary`` -- which parks there while a checkpoint has
  admission closed -- and then holds ``awaiting_model()`` until the engine delivers the turn's
  policy response, so the session counts as at its boundary while the call is out, as Gym's
  agents do;
- every checkpoint operation is the real ``ParticipantControlPlane`` call with its pydantic
  request (``CheckpointRequest``, ``CommitRequest``, ``RetireRequest``, ``ForgetRequest``),
  deadlines converted to the absolute wall-clock ``deadline_ts`` Gym expects, on the runtime's
  virtual ``time.time()``. Prepare runs the real ``_wait_ready`` (woken by the participant's
  condition, re-checked at most every second); commit exports through the agent hooks and
  writes the participant state into a scratch checkpoint directory; the real lease watcher
  resumes on its own when a controller goes quiet;
- what the real code does on its own (a lease expiring, a parked session resuming) is read
  back after every settle and handed to the engine as notes.

What the real API cannot express, and how it is decided here (docs/replaying-real-code.md):

- completion receipts: a generation-2 agent closes a finished session and keeps nothing, so
  there is no ``completed_unacknowledged`` state, an ACK releases nothing, and a finished run
  never blocks prepare (the reference model's "stranded completion" cannot happen);
- phase changes and lease expiry are not reported: they are read from ``plane.phase`` and
  ``participant.accepting`` after each settle; an idle phase reached without a resume is a
  lease expiry;
- which sessions a retire stopped is not returned (the reply lists the episode ids asked for):
  it is read from the activation coroutines that were cancelled.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolloutscope.replay.participants.agent import CompletionReceipt, ExecutionKey, RunRefused
from rolloutscope.replay.participants.protocol import (
    EpisodeId,
    Note,
    NoteKind,
    Reply,
    Report,
)
from rolloutscope.replay.virtual_time import AsyncRuntime, ParticipantTaskError, Pending
from rolloutscope.vocabulary import (
    CheckpointOp,
    CheckpointPhase,
    ErrorCode,
    ExecutionState,
    ParkedBoundaryState,
    ParticipantKind,
)

PARTICIPANT = "agent_participant"
OP_TIMEOUT_S = 300.0  # the budget RL gives the calls it makes outside a prepare (resume, retire)


def error_code(error: BaseException) -> ErrorCode:
    try:
        return ErrorCode(getattr(error, "code", "checkpoint_error"))
    except ValueError:
        return ErrorCode.CHECKPOINT_ERROR


@dataclass
class _Execution:
    key: ExecutionKey
    session_key: str
    episode: Any  # Gym's EpisodeId
    inbox: asyncio.Queue
    task: Pending | None = None
    boundaries: int = 0
    in_boundary: bool = False  # awaiting Activation.boundary: parked when it does not return
    parked: bool = False
    parked_in_model: bool = False
    model_done: asyncio.Future | None = None
    state: ExecutionState = ExecutionState.RUNNING
    receipt: CompletionReceipt | None = None
    stopped_by: list[str] = field(default_factory=list)


_BOUNDARY, _END = "boundary", "end"


class _Hooks:
    """``AgentSessionHooks``: the agent's own session state is the engine's run position."""

    def __init__(self, agent: GymAgent) -> None:
        self._agent = weakref.proxy(agent)

    async def export_agent_sessions(self, session_keys: list[str]) -> dict[str, dict]:
        by_key = {ex.session_key: ex for ex in self._agent._executions.values()}
        return {k: {"rollout_id": by_key[k].key.rollout_id, "turns": by_key[k].boundaries}
                for k in session_keys if k in by_key}

    async def restore_agent_sessions(self, sessions: list[Any]) -> None:
        return None

    async def retire_agent_session(self, session_key: str) -> None:
        return None

    async def park_agent_sessions(self, session_keys: list[str]) -> None:
        return None


class GymAgent:
    """The engine's agent participant, played by Gym's real classes."""

    kind = ParticipantKind.AGENT

    def __init__(self, *, runtime: AsyncRuntime, control: Any, participant_cls: type,
                 episode_types: Any, instance: str = "agent", lease_grace_s: float = 600.0,
                 modules: Iterable[str] = ()) -> None:
        self.runtime = runtime
        self.instance = instance
        self._control = control
        self._EpisodeId = episode_types.EpisodeId
        self._executions: dict[ExecutionKey, _Execution] = {}
        self._generations: dict[EpisodeId, int] = {}
        self.notes: list[Note] = []
        self.released: list[ExecutionKey] = []
        self._released_now: list[ExecutionKey] = []
        self._pending_prepare: Pending | None = None
        self._resuming = False
        self._in_call = 0
        self._retires = 0
        self.on_change: Callable[[], None] | None = None  # the engine, for what happens on its own
        self._scratch = tempfile.mkdtemp(prefix="rolloutscope-gym-checkpoint-")
        weakref.finalize(self, shutil.rmtree, self._scratch, True)
        runtime.register(PARTICIPANT, modules=tuple(modules))
        self.participant = participant_cls(_Hooks(self))
        self.plane = control.ParticipantControlPlane(self.participant, instance_name=instance,
                                                     lease_grace_seconds=lease_grace_s)
        self._phase = CheckpointPhase.IDLE
        self._accepting = True
        self._ck_seen: str | None = None
        runtime.on_settled(self._observe)

    # -- what the engine reads ------------------------------------------------------------------
    @property
    def phase(self) -> CheckpointPhase:
        return CheckpointPhase(getattr(self.plane.phase, "value", self.plane.phase))

    @property
    def checkpoint_id(self) -> str | None:
        return self.plane.checkpoint_id

    @property
    def lease_expires_at(self) -> float | None:
        return None  # the real lease watcher expires the lease on the runtime's clock

    @property
    def admission_open(self) -> bool:
        return bool(self.participant.accepting)

    def _gym_episode(self, episode: EpisodeId) -> Any:
        return self._EpisodeId(rollout_id=episode.rollout_id, attempt=episode.attempt)

    def _wall(self, t: float) -> float:
        return self.runtime.wall_time(t)

    # -- the agent's own operations (GymSide) ---------------------------------------------------
    def begin_run(self, episode: EpisodeId) -> ExecutionKey:
        gen = self._generations.get(episode, -1) + 1
        key = ExecutionKey(episode.rollout_id, episode.attempt, gen)
        ex = _Execution(key, f"{episode.capture_key}.g{gen}", self._gym_episode(episode),
                        asyncio.Queue())
        try:
            self._call(self.participant.open_session, ex.session_key, ex.episode)
        except Exception as exc:
            code = error_code(exc)
            if code not in (ErrorCode.ADMISSION_CLOSED, ErrorCode.STALE_ATTEMPT):
                raise
            raise RunRefused(code, str(exc)) from None
        self._generations[episode] = gen
        self._executions[key] = ex
        ex.task = self.runtime.run(self._drive(ex), participant=PARTICIPANT,
                                   what=f"activation of {ex.session_key}")
        return key

    async def _drive(self, ex: _Execution) -> None:
        try:
            async with self.participant.activation(ex.session_key, ex.episode) as act:
                while True:
                    command = await ex.inbox.get()
                    if command == _END:
                        return
                    ex.in_boundary = True
                    await act.boundary(lambda n=ex.boundaries: {"turn": n})
                    ex.in_boundary = False
                    ex.boundaries += 1
                    if ex.parked:
                        ex.parked = False
                        self._released_now.append(ex.key)
                    ex.model_done = asyncio.get_running_loop().create_future()
                    # parked_in_model stays set until the agent's admission reopens: the
                    # engine keeps the run parked (its parked span open) until the agent
                    # releases it, even when the model reopened first and delivered
                    async with act.awaiting_model():
                        await ex.model_done
        except asyncio.CancelledError:
            ex.stopped_by.append("cancelled")  # a retire stopped the activation
        except Exception as exc:
            if error_code(exc) is ErrorCode.STALE_ATTEMPT:  # retired under a parked boundary
                ex.stopped_by.append("stale")
            else:  # the participant refused its own activation: a finding, named now
                self.runtime.violation(ParticipantTaskError(
                    PARTICIPANT, f"the activation of {ex.session_key}", exc))

    def state_of(self, key: ExecutionKey) -> ExecutionState:
        ex = self._executions[key]
        if ex.state in (ExecutionState.COMPLETED, ExecutionState.RETIRED):
            return ex.state
        if ex.task is not None and ex.task.done:
            return ExecutionState.RETIRED
        if ex.parked or ex.parked_in_model:
            return ExecutionState.PARKED
        if not self.participant.accepting:
            return ExecutionState.PARK_REQUESTED
        return ExecutionState.RUNNING

    def parked_state_of(self, key: ExecutionKey) -> ParkedBoundaryState | None:
        ex = self._executions[key]
        if not (ex.parked or ex.parked_in_model):
            return None
        return ParkedBoundaryState.WITH_BOUNDARY if ex.boundaries or ex.in_boundary \
            else ParkedBoundaryState.WITHOUT_BOUNDARY

    def boundary_of(self, key: ExecutionKey) -> int:
        ex = self._executions[key]
        return ex.boundaries - (0 if ex.in_boundary else 1)

    def record_boundary(self, key: ExecutionKey) -> bool:
        ex = self._executions[key]
        if self.state_of(key) is ExecutionState.RETIRED:
            return False
        self._send(ex, _BOUNDARY)
        if ex.in_boundary and not (ex.task is not None and ex.task.done):
            ex.parked = True
            return False
        return not (ex.task is not None and ex.task.done)

    def park_now(self, key: ExecutionKey) -> ParkedBoundaryState:
        """A park-requested run waiting on an undelivered policy call: in Gym it is already at
        its boundary (inside ``awaiting_model``)."""
        ex = self._executions[key]
        ex.parked_in_model = True
        state = self.parked_state_of(key)
        assert state is not None
        return state

    def model_call_delivered(self, key: ExecutionKey) -> None:
        ex = self._executions.get(key)
        if ex is not None and ex.model_done is not None and not ex.model_done.done():
            ex.model_done.set_result(None)
            self.runtime.settle()

    def complete(self, key: ExecutionKey, result: str) -> CompletionReceipt:
        ex = self._executions[key]
        self._finish(ex)
        ex.state = ExecutionState.COMPLETED
        ex.receipt = CompletionReceipt(key.rollout_id, key.attempt, key.generation,
                                       f"{key.episode.capture_key}.g{key.generation}",
                                       hashlib.sha256(result.encode()).hexdigest())
        return ex.receipt

    def fail(self, key: ExecutionKey) -> None:
        ex = self._executions[key]
        if ex.state is ExecutionState.RUNNING:
            self._finish(ex)
            ex.state = ExecutionState.RETIRED

    def _finish(self, ex: _Execution) -> None:
        if ex.model_done is not None and not ex.model_done.done():
            ex.model_done.set_result(None)
        self._send(ex, _END)
        self._call(self.participant.close_session, ex.session_key)

    def _send(self, ex: _Execution, command: str) -> None:
        ex.inbox.put_nowait(command)
        self.runtime.settle()

    def acknowledge(self, receipts: list[CompletionReceipt]) -> int:
        """Gym's generation-2 agent keeps no finished results: nothing to release."""
        return 0

    def completion_receipt(self, key: ExecutionKey) -> CompletionReceipt | None:
        return None

    def park_requested(self) -> list[ExecutionKey]:
        return [k for k in self._executions if self.state_of(k) is
                ExecutionState.PARK_REQUESTED]

    # -- readiness ------------------------------------------------------------------------------
    def _readiness(self) -> Any:
        with self.runtime.entered():
            return self.participant.readiness()

    def report(self) -> Report:
        r = self._readiness()
        return Report(ready=bool(r.ready), blockers=tuple(r.blockers),
                      blocker_count=int(r.blocker_count), counts=dict(r.counts))

    def is_ready(self) -> bool:
        return bool(self._readiness().ready)

    def counts(self) -> dict[str, int]:
        return dict(self._readiness().counts)

    # -- checkpoint operations (the control plane) ----------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        self._in_call += 1
        try:
            return self.runtime.call(fn, *args)
        finally:
            self._in_call -= 1

    def _run(self, coro: Any, what: str) -> Pending:
        self._in_call += 1
        try:
            return self.runtime.run(coro, participant=PARTICIPANT, what=what)
        finally:
            self._in_call -= 1

    def _reply(self, op: CheckpointOp, ck: str | None, pending: Pending,
               **extra: Any) -> Reply:
        if not pending.done:
            return Reply(op=op, checkpoint_id=ck, phase=self.phase, report=self.report(),
                         extra=extra)
        error = pending.error
        if error is not None:
            code = error_code(error)
            self.notes.append(Note(NoteKind.REFUSED, self.runtime.now, ck, str(error), code))
            return Reply(op=op, checkpoint_id=ck, phase=self.phase, code=code,
                         detail=str(error))
        result = pending.result()
        return Reply(op=op, checkpoint_id=ck, phase=self.phase, report=self.report(),
                     idempotent=bool(result.get("idempotent", False)),
                     extra={**{k: v for k, v in result.items() if k != "report"}, **extra})

    def _request(self, model: str, ck: str, deadline_ts: float, **fields: Any) -> Any:
        return getattr(self._control, model)(checkpoint_id=ck,
                                             deadline_ts=self._wall(deadline_ts), **fields)

    def prepare(self, checkpoint_id: str, deadline_ts: float) -> Reply:
        request = self._request("CheckpointRequest", checkpoint_id, deadline_ts)
        pending = self._run(self.plane.prepare(request), f"prepare {checkpoint_id}")
        if not pending.done:
            self._pending_prepare = pending
        return self._reply(CheckpointOp.PREPARE, checkpoint_id, pending)

    def poll_ready(self) -> bool:
        self.runtime.settle()
        return self.phase is CheckpointPhase.PREPARED

    def commit(self, checkpoint_id: str, deadline_ts: float) -> Reply:
        directory = Path(self._scratch) / checkpoint_id
        request = self._request("CommitRequest", checkpoint_id, deadline_ts,
                                checkpoint_dir=str(directory))
        pending = self._run(self.plane.commit(request), f"commit {checkpoint_id}")
        if not pending.done:
            return Reply(op=CheckpointOp.COMMIT, checkpoint_id=checkpoint_id, phase=self.phase,
                         code=ErrorCode.CHECKPOINT_ERROR,
                         detail="the commit did not finish at the instant it was asked")
        return self._reply(CheckpointOp.COMMIT, checkpoint_id, pending)

    def restore(self, checkpoint_id: str, deadline_ts: float,
                episodes: Iterable[EpisodeId]) -> Reply:
        eps = [self._gym_episode(e) for e in sorted(episodes)]
        request = self._request("RestoreRequest", checkpoint_id, deadline_ts,
                                checkpoint_dir=str(Path(self._scratch) / checkpoint_id),
                                episode_ids=eps)
        return self._reply(CheckpointOp.RESTORE, checkpoint_id,
                           self._run(self.plane.restore(request), f"restore {checkpoint_id}"))

    def resume(self, checkpoint_id: str) -> Reply:
        request = self._request("CheckpointRequest", checkpoint_id,
                                self.runtime.now + OP_TIMEOUT_S)
        self._resuming = True
        try:
            pending = self._run(self.plane.resume(request), f"resume {checkpoint_id}")
        finally:
            self._resuming = False
        return self._reply(CheckpointOp.RESUME, checkpoint_id, pending)

    def renew(self, checkpoint_id: str, deadline_ts: float) -> Reply:
        request = self._request("CheckpointRequest", checkpoint_id, deadline_ts)
        return self._reply(CheckpointOp.RENEW, checkpoint_id,
                           self._run(self.plane.renew(request), f"renew {checkpoint_id}"))

    def _outside_checkpoint_id(self) -> str:
        if self.plane.checkpoint_id is not None:
            return self.plane.checkpoint_id
        self._retires += 1
        return f"retire-{self._retires}"

    def retire(self, episodes: Iterable[EpisodeId]) -> Reply:
        eps = sorted(episodes)
        ck = self._outside_checkpoint_id()
        request = self._request("RetireRequest", ck, self.runtime.now + OP_TIMEOUT_S,
                                episode_ids=[self._gym_episode(e) for e in eps])
        targets = {(e.rollout_id, e.attempt) for e in eps}
        live = [ex for ex in self._executions.values() if ex.state is ExecutionState.RUNNING
                and any(ex.key.rollout_id == r and ex.key.attempt <= a for r, a in targets)]
        pending = self._run(self.plane.retire(request), f"retire {len(eps)} episode(s)")
        stopped = []
        for ex in live:
            if ex.task is not None and ex.task.done:
                ex.state = ExecutionState.RETIRED
                stopped.append(ex.key)
        return self._reply(CheckpointOp.RETIRE, self.plane.checkpoint_id, pending,
                           retired=tuple(stopped), completed_unacknowledged=(), receipts=())

    def forget(self, rollout_ids: Iterable[str]) -> Reply:
        rids = sorted(rollout_ids)
        request = self._request("ForgetRequest", self._outside_checkpoint_id(),
                                self.runtime.now + OP_TIMEOUT_S, rollout_ids=rids)
        return self._reply(CheckpointOp.FORGET, self.plane.checkpoint_id,
                           self._run(self.plane.forget(request), f"forget {len(rids)}"))

    def is_retired(self, episode: EpisodeId) -> bool:
        try:
            self.participant.retired.check(self._gym_episode(episode))
        except Exception:
            return True
        return False

    def tick(self) -> bool:
        return False

    def drain_notes(self) -> list[Note]:
        notes, self.notes = self.notes, []
        return notes

    # -- what the real code did on its own ------------------------------------------------------
    def _observe(self) -> None:
        now = self.runtime.now
        if self.plane.checkpoint_id is not None:
            self._ck_seen = self.plane.checkpoint_id
        ck = self._ck_seen
        changed = False
        phase, accepting = self.phase, bool(self.participant.accepting)
        if phase is CheckpointPhase.PREPARED and self._phase is CheckpointPhase.IDLE:
            # ready at once: the control plane went through preparing within one settle
            self.notes.append(Note(NoteKind.PHASE_CHANGED, now, ck, detail="idle->preparing"))
            self._phase = CheckpointPhase.PREPARING
        if phase is not self._phase:
            if phase is CheckpointPhase.IDLE and not self._resuming and self._phase in (
                    CheckpointPhase.PREPARING, CheckpointPhase.PREPARED,
                    CheckpointPhase.COMMITTED, CheckpointPhase.RESTORED):
                self.notes.append(Note(NoteKind.LEASE_EXPIRED, now, ck,
                                       detail=self._phase.value))
            self.notes.append(Note(NoteKind.PHASE_CHANGED, now, ck,
                                   detail=f"{self._phase.value}->{phase.value}"))
            self._phase, changed = phase, True
        if accepting != self._accepting:
            self._accepting = accepting
            if accepting:
                released = list(self._released_now)
                for ex in self._executions.values():
                    if ex.parked_in_model:
                        ex.parked_in_model = False
                        released.append(ex.key)
                self.released, self._released_now = sorted(set(released)), []
                self.notes.append(Note(NoteKind.ADMISSION_OPENED, now, ck))
            else:
                self.notes.append(Note(NoteKind.ADMISSION_CLOSED, now, ck))
            changed = True
        if changed and not self._in_call and self.on_change is not None:
            self.runtime.post(self.on_change)


def agent_from(control: Any, participant_cls: type, episode_types: Any,
               modules: Iterable[str]) -> Callable[..., GymAgent]:
    """The engine's agent-participant factory: ``participant_cls`` (Gym's
    ``AgentSessionParticipant``, or a user's patched one) under Gym's control plane."""

    def build(*, runtime: AsyncRuntime, instance: str = "agent", lease_grace_s: float = 600.0,
              **_: Any) -> GymAgent:
        return GymAgent(runtime=runtime, control=control, participant_cls=participant_cls,
                        episode_types=episode_types, instance=instance,
                        lease_grace_s=lease_grace_s, modules=modules)

    return build
