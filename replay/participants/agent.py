"""The agent participant: agent /run executions, parking at turn boundaries, completion receipts.

Rule (the first protocol generation, which NVIDIA-NeMo/RL #4266 drives;
docs/domain/checkpoint-protocol.md#the-first-generation): an execution goes
``running -> park_requested -> parked (with or without a boundary) -> running`` on resume, ends
``completed`` (result kept until acknowledged) or ``retired`` (tombstoned), and

    ready_to_commit = no running/park_requested AND no parked_without_boundary
                      AND completed_unacknowledged == 0

so a finished but unacknowledged run blocks every prepare. ``retire`` refuses a completed run
(``completed_unacknowledged: True``): only an ACK carrying its receipt releases it. The
transition that must never exist: completed -> retired.

Counters are kept incrementally so readiness is O(1) at 16k executions.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rolloutscope.vocabulary import (
    ErrorCode,
    ExecutionState,
    ParkedBoundaryState,
    ParticipantKind,
)
from rolloutscope.replay.errors import ModelInvariantError
from rolloutscope.replay.participants.protocol import (
    MAX_BLOCKERS,
    EpisodeId,
    Participant,
    Report,
)


# The members read on every move, bound once: on Python 3.11 each ``Enum.MEMBER`` read runs
# ``EnumType.__getattr__``'s attribute hook, ten times the cost of a global read, and a large
# replay makes millions of them.
_RUNNING, _PARK_REQUESTED, _PARKED, _COMPLETED, _RETIRED = (
    ExecutionState.RUNNING, ExecutionState.PARK_REQUESTED, ExecutionState.PARKED,
    ExecutionState.COMPLETED, ExecutionState.RETIRED)
_WITH_BOUNDARY = ParkedBoundaryState.WITH_BOUNDARY
_WITHOUT_BOUNDARY = ParkedBoundaryState.WITHOUT_BOUNDARY


@dataclass(frozen=True, slots=True, order=True)
class ExecutionKey:
    rollout_id: str
    attempt: int  # the Gym episode attempt (bumped by restore), not RL's try
    generation: int  # bumped on each /run for the same (rollout_id, attempt)
    # the hash the dataclass would compute (of the three fields), computed once: the runs and
    # executions are looked up by key on every turn, and the generated ``__hash__`` builds and
    # hashes a tuple each time
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.rollout_id, self.attempt, self.generation)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[ExecutionKey], tuple[str, int, int]]:
        # rebuilt, not restored: another process hashes strings with another seed
        return ExecutionKey, (self.rollout_id, self.attempt, self.generation)

    @property
    def episode(self) -> EpisodeId:
        return EpisodeId(self.rollout_id, self.attempt)


@dataclass(frozen=True, slots=True)
class CompletionReceipt:
    """``AgentCompletionReceipt``: what an ACK must carry to release a completed run."""

    rollout_id: str
    attempt_index: int
    execution_generation: int
    result_id: str
    result_digest: str


class _Execution:
    __slots__ = ("key", "episode", "capture_key", "state", "boundary_index", "parked_state",
                 "receipt")

    def __init__(self, key: ExecutionKey, episode: EpisodeId) -> None:
        self.key = key
        # the key's episode and its capture key, kept: readiness reports and retires name
        # every execution, and building them again each time cost a few µs apiece
        self.episode = episode
        self.capture_key = episode.capture_key
        self.state = _RUNNING
        self.boundary_index = -1  # no boundary recorded yet
        self.parked_state: ParkedBoundaryState | None = None
        self.receipt: CompletionReceipt | None = None


class RunRefused(Exception):
    """A /run the agent refused (admission closed, or a retired attempt)."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        self.code = code
        super().__init__(detail)


class AgentParticipant(Participant):
    kind = ParticipantKind.AGENT

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._executions: dict[ExecutionKey, _Execution] = {}
        # the executions that may still change, in the same order: not retired, and not
        # completed and acknowledged. The admission hooks, readiness reports and retires walk
        # these only, not every execution the run ever started (16,000 at scale-16k, nearly all
        # finished by its later snapshots)
        self._live: dict[ExecutionKey, _Execution] = {}
        self._generations: dict[EpisodeId, int] = {}
        self._count: Counter[str] = Counter()
        self.released: list[ExecutionKey] = []  # resumed by the last admission reopening

    # -- counters -----------------------------------------------------------------------------
    def _move(self, ex: _Execution, state: ExecutionState,
              parked: ParkedBoundaryState | None = None) -> None:
        old_state = ex.state
        if old_state is _RETIRED or (
                old_state is _COMPLETED and state is not _COMPLETED):
            raise ModelInvariantError(f"{ex.key} is {ex.state}; it cannot become {state}")
        # the counter an execution is in (None: none), before and after the move, worked out
        # here rather than by a helper called twice: every park, resume and end of a run moves
        # its execution. The members themselves are the keys (string enums, equal to their
        # values and hashed alike): an enum's ``.value`` is a Python-level property. A
        # retired execution is never moved (above), so ``old_state`` is never retired.
        old = (ex.parked_state if old_state is _PARKED
               else old_state if old_state is not _COMPLETED
               else "completed_unacknowledged" if ex.receipt is not None else None)
        if old is not None:
            self._count[old] -= 1
        ex.state, ex.parked_state = state, parked
        if state is _RETIRED:
            del self._live[ex.key]
        new = (parked if state is _PARKED
               else None if state is _RETIRED
               else state if state is not _COMPLETED
               else "completed_unacknowledged" if ex.receipt is not None else None)
        if new is not None:
            self._count[new] += 1

    def state_of(self, key: ExecutionKey) -> ExecutionState:
        return self._executions[key].state

    def parked_state_of(self, key: ExecutionKey) -> ParkedBoundaryState | None:
        return self._executions[key].parked_state

    def boundary_of(self, key: ExecutionKey) -> int:
        return self._executions[key].boundary_index

    # -- the agent's own operations -----------------------------------------------------------
    def begin_run(self, episode: EpisodeId) -> ExecutionKey:
        if self.is_retired(episode):
            raise RunRefused(ErrorCode.STALE_ATTEMPT, f"{episode.capture_key} is retired")
        if not self.admission_open:
            raise RunRefused(ErrorCode.ADMISSION_CLOSED, "agent admission is closed")
        gen = self._generations.get(episode, -1) + 1
        self._generations[episode] = gen
        key = ExecutionKey(episode.rollout_id, episode.attempt, gen)
        self._executions[key] = self._live[key] = _Execution(key, episode)
        self._count[_RUNNING] += 1
        return key

    def record_boundary(self, key: ExecutionKey) -> bool:
        """A turn boundary was committed. False when the execution must park here."""
        ex = self._executions[key]
        if ex.state is _RETIRED:
            return False
        ex.boundary_index += 1
        if ex.state is _PARK_REQUESTED:
            self._move(ex, _PARKED, _WITH_BOUNDARY)
            return False
        return True

    def park_now(self, key: ExecutionKey) -> ParkedBoundaryState:
        """Park a park-requested execution that is waiting on an undelivered model call (or
        still seeding): it holds at its last boundary, or without one if it has none."""
        ex = self._executions[key]
        if ex.state is not _PARK_REQUESTED:
            raise ModelInvariantError(f"{key} is {ex.state}, not park_requested")
        state = (_WITH_BOUNDARY if ex.boundary_index >= 0
                 else _WITHOUT_BOUNDARY)
        self._move(ex, _PARKED, state)
        return state

    def model_call_delivered(self, key: ExecutionKey) -> None:
        """The run's policy response arrived. This generation of the agent parks only at turn
        boundaries, so the model ignores it; a generation-2 agent leaves ``awaiting_model``."""

    def complete(self, key: ExecutionKey, result: str) -> CompletionReceipt:
        ex = self._executions[key]
        if ex.state not in (_RUNNING, _PARK_REQUESTED):
            raise ModelInvariantError(f"{key} cannot complete from {ex.state}")
        digest = hashlib.sha256(result.encode()).hexdigest()
        ex.receipt = CompletionReceipt(key.rollout_id, key.attempt, key.generation,
                                       f"{ex.capture_key}.g{key.generation}", digest)
        self._move(ex, _COMPLETED)
        return ex.receipt

    def fail(self, key: ExecutionKey) -> None:
        """The run ended with an error: nothing is kept, nothing to acknowledge."""
        ex = self._executions[key]
        if ex.state in (_RUNNING, _PARK_REQUESTED):
            self._move(ex, _RETIRED)

    def acknowledge(self, receipts: list[CompletionReceipt]) -> int:
        """``acknowledge-completed``: release each completed run whose receipt matches."""
        released = 0
        for r in receipts:
            ex = self._executions.get(ExecutionKey(r.rollout_id, r.attempt_index,
                                                   r.execution_generation))
            if ex is None or ex.receipt != r:
                continue
            self._count["completed_unacknowledged"] -= 1
            ex.receipt = None
            del self._live[ex.key]
            released += 1
        return released

    def completion_receipt(self, key: ExecutionKey) -> CompletionReceipt | None:
        return self._executions[key].receipt

    # -- protocol hooks -----------------------------------------------------------------------
    def _on_close_admission(self) -> None:
        for ex in self._live.values():
            if ex.state is _RUNNING:
                self._move(ex, _PARK_REQUESTED)

    def _on_open_admission(self) -> None:
        released = []
        for ex in self._live.values():
            if ex.state in (_PARKED, _PARK_REQUESTED):
                self._move(ex, _RUNNING)
                released.append(ex.key)
        self.released = released

    def park_requested(self) -> list[ExecutionKey]:
        return [k for k, ex in self._live.items()
                if ex.state is _PARK_REQUESTED]

    def counts(self) -> dict[str, int]:
        c = self._count
        return {"running": c["running"] + c["park_requested"],
                "parked_with_boundary": c[_WITH_BOUNDARY],
                "parked_without_boundary": c[_WITHOUT_BOUNDARY],
                "completed_unacknowledged": c["completed_unacknowledged"]}

    def is_ready(self) -> bool:
        c = self._count
        return (c["running"] == 0 and c["park_requested"] == 0
                and c[_WITHOUT_BOUNDARY] == 0
                and c["completed_unacknowledged"] == 0)

    def report(self) -> Report:
        blockers = sorted(
            ex.capture_key for ex in self._live.values()
            if ex.state in (_RUNNING, _PARK_REQUESTED)
            or ex.parked_state is _WITHOUT_BOUNDARY
            or (ex.state is _COMPLETED and ex.receipt is not None))
        return Report(ready=self.is_ready(), blockers=tuple(blockers[:MAX_BLOCKERS]),
                      blocker_count=len(blockers), counts=self.counts())

    def _retire(self, episodes: tuple[EpisodeId, ...]) -> dict[str, Any]:
        retired, refused = [], []
        receipts: list[CompletionReceipt] = []
        targets = {e.rollout_id for e in episodes}
        for ex in list(self._live.values()):  # a retired one leaves ``_live``
            if ex.key.rollout_id not in targets or not self.is_retired(ex.episode):
                continue
            if ex.state is _COMPLETED:
                if ex.receipt is not None:  # a finished run cannot be retired
                    refused.append(ex.capture_key)
                    receipts.append(ex.receipt)
            elif ex.state is not _RETIRED:
                self._move(ex, _RETIRED)
                retired.append(ex.key)
        return {"retired": tuple(retired), "completed_unacknowledged": tuple(refused),
                "receipts": tuple(receipts)}
