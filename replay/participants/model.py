"""The policy model participant: the admission gate, held responses and generation cuts.

Rule (NVIDIA-NeMo/Gym #3883; see
docs/domain/checkpoint-protocol.md#admission-parking-and-held-responses): prepare closes admission.
An admitted call keeps generating, but its response is held until resume unless it had *started*
before admission closed; a response starts at its first data chunk (never at headers or
keep-alives). Only a response already streaming blocks readiness. A new call at closed admission
waits un-admitted until resume (the newer gate) or is refused with 409 ``admission_closed`` (the
older one); a waiting call whose attempt is retired is refused at once with ``stale_attempt``.

With several workers, one coordinator is the participant: a worker that disconnects during
prepare blocks readiness; one lost after readiness was checked makes the commit fail with
``export_failed``, final for that checkpoint; restore is refused once any worker has left.
The transition that must never exist: a held response delivered while admission is closed.
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from operator import attrgetter
from typing import Any

from rolloutscope.vocabulary import CutOutcome, ErrorCode, ParticipantKind
from rolloutscope.replay.errors import ModelInvariantError
from rolloutscope.replay.participants.protocol import (
    MAX_BLOCKERS,
    EpisodeId,
    Note,
    NoteKind,
    Participant,
    Report,
)


class CallState(StrEnum):
    WAITING = "waiting"  # at closed admission, not admitted (newer gate)
    ADMITTED = "admitted"  # generating, response not started
    STREAMING = "streaming"  # response started (first data chunk sent), not finished
    HELD = "held"  # admission closed before the response started: held until resume
    DONE = "done"  # response delivered in full
    REFUSED = "refused"
    CANCELLED = "cancelled"


class Admission(StrEnum):
    ADMITTED = "admitted"
    WAITING = "waiting"
    REFUSED = "refused"


# The members read on every policy call, bound once: on Python 3.11 each ``Enum.MEMBER`` read
# runs ``EnumType.__getattr__``'s attribute hook, ten times the cost of a global read, and a
# large replay makes millions of them.
_WAITING, _ADMITTED, _STREAMING, _HELD, _DONE, _REFUSED, _CANCELLED = (
    CallState.WAITING, CallState.ADMITTED, CallState.STREAMING, CallState.HELD, CallState.DONE,
    CallState.REFUSED, CallState.CANCELLED)
_ADMITTED_NOW: tuple[Admission, ErrorCode | None] = (Admission.ADMITTED, None)
_WAITS: tuple[Admission, ErrorCode | None] = (Admission.WAITING, None)
_state_of = attrgetter("state")


class _Call:
    __slots__ = ("call_id", "episode", "worker", "constrained", "state", "finished", "cut")

    def __init__(self, call_id: str, episode: EpisodeId, worker: int, constrained: bool) -> None:
        self.call_id = call_id
        self.episode = episode
        self.worker = worker
        self.constrained = constrained
        self.state = _ADMITTED
        self.finished = False
        self.cut: CutOutcome | None = None


class ModelParticipant(Participant):
    kind = ParticipantKind.MODEL

    def __init__(self, *, calls_wait_at_closed_admission: bool, generation_cuts: bool = False,
                 workers: int = 1, **kw: Any) -> None:
        super().__init__(**kw)
        self.calls_wait = calls_wait_at_closed_admission
        self.generation_cuts = generation_cuts
        self.workers = workers
        self.live_workers = set(range(workers))
        self._rotation = tuple(range(workers))  # the live workers in order, for round-robin
        self.workers_left = 0  # since start; restore is refused once any has left
        self._expected: frozenset[int] = frozenset()  # workers whose report prepare waits for
        self._reported: frozenset[int] = frozenset()  # workers that reported when ready
        self._calls: dict[str, _Call] = {}
        self._streaming = 0
        self.served = 0
        self.cuts: Counter[CutOutcome] = Counter()
        self.delivered: list[str] = []  # held responses delivered by the last reopening
        self.admitted: list[str] = []  # waiting calls admitted by the last reopening
        self._next_worker = 0

    # -- the gate -----------------------------------------------------------------------------
    def request(self, call_id: str, episode: EpisodeId, *, constrained: bool = False
                ) -> tuple[Admission, ErrorCode | None]:
        if call_id in self._calls:
            raise ModelInvariantError(f"call {call_id} was already requested")
        if self.is_retired(episode):
            return self._refuse(call_id, ErrorCode.STALE_ATTEMPT)
        if not self.admission_open and not self.calls_wait:
            return self._refuse(call_id, ErrorCode.ADMISSION_CLOSED)
        rotation = self._rotation
        worker = rotation[self._next_worker % len(rotation)]
        self._next_worker += 1
        call = self._calls[call_id] = _Call(call_id, episode, worker, constrained)
        if not self.admission_open:
            call.state = _WAITING
            return _WAITS
        self.served += 1
        return _ADMITTED_NOW

    def _refuse(self, call_id: str, code: ErrorCode) -> tuple[Admission, ErrorCode]:
        self.notes.append(Note(NoteKind.REFUSED, self.clock.now(), self.checkpoint_id,
                               f"policy call {call_id} refused", code, (call_id,)))
        return Admission.REFUSED, code

    def first_chunk(self, call_id: str) -> bool:
        """The response's first data chunk. True: it streams now; False: it is held."""
        call = self._calls[call_id]
        if call.state is _ADMITTED:
            call.state = _STREAMING
            self._streaming += 1
            return True
        if call.state is _HELD:
            return False
        raise ModelInvariantError(f"call {call_id} cannot start from {call.state}")

    def finish(self, call_id: str) -> bool:
        """The generation finished. True: delivered now; False: held until resume."""
        call = self._calls[call_id]
        if call.state is _STREAMING:
            call.state = _DONE
            call.finished = True
            self._streaming -= 1
            return True
        if call.state is _HELD:
            call.finished = True
            return False
        raise ModelInvariantError(f"call {call_id} cannot finish from {call.state}")

    def state_of(self, call_id: str) -> CallState:
        return self._calls[call_id].state

    def forget_call(self, call_id: str) -> None:
        """The caller is gone (its run ended or was abandoned and finished)."""
        call = self._calls.pop(call_id, None)
        if call is not None and call.state is _STREAMING:
            self._streaming -= 1

    def lose_worker(self, worker: int) -> list[str]:
        """A uvicorn worker disconnects; its in-flight calls fail. Returns their ids."""
        if worker not in self.live_workers:
            raise ModelInvariantError(f"worker {worker} is not live")
        self.live_workers.discard(worker)
        self._rotation = tuple(sorted(self.live_workers))
        self.workers_left += 1
        failed = []
        for call in self._calls.values():
            if call.worker == worker and call.state in (_ADMITTED, _STREAMING,
                                                        _HELD):
                if call.state is _STREAMING:
                    self._streaming -= 1
                call.state = _CANCELLED
                failed.append(call.call_id)
        return failed

    # -- protocol hooks -----------------------------------------------------------------------
    def _on_close_admission(self) -> None:
        self._expected = frozenset(self.live_workers)
        self._reported = frozenset()
        for call in self._calls.values():
            if call.state is _ADMITTED:
                call.state = _HELD
                if self.generation_cuts:
                    # constrained decoding cannot resume from a token prefix: never cut
                    call.cut = CutOutcome.SKIPPED if call.constrained else CutOutcome.DURABLE
                    self.cuts[call.cut] += 1

    def _on_prepared(self) -> None:
        self._reported = frozenset(self.live_workers)

    def _on_open_admission(self) -> None:
        delivered, admitted = [], []
        for call in self._calls.values():
            if call.state is _HELD:
                if call.finished:
                    call.state = _DONE
                    delivered.append(call.call_id)
                else:
                    call.state = _ADMITTED
            elif call.state is _WAITING:
                call.state = _ADMITTED
                self.served += 1
                admitted.append(call.call_id)
        self.delivered, self.admitted = delivered, admitted
        self.cuts.clear()

    def is_ready(self) -> bool:
        # a worker that disconnected before it reported never reports: it blocks readiness;
        # one lost after reporting fails the export instead
        return self._streaming == 0 and self._expected - self._reported <= self.live_workers

    def counts(self) -> dict[str, int]:
        states = Counter(map(_state_of, self._calls.values()))  # one pass, in C
        held = states[_HELD]
        inflight = states[_ADMITTED] + states[_STREAMING] + held
        return {"inflight": inflight, "held": held, "cut": self.cuts[CutOutcome.DURABLE],
                "cut_failed": self.cuts[CutOutcome.FAILED],
                "cut_skipped": self.cuts[CutOutcome.SKIPPED]}

    def report(self) -> Report:
        blockers = sorted(c.episode.capture_key for c in self._calls.values()
                          if c.state is _STREAMING)
        missing = sorted(self._expected - self._reported - self.live_workers)
        blockers += [f"worker-{w}" for w in missing]
        return Report(ready=self.is_ready(), blockers=tuple(blockers[:MAX_BLOCKERS]),
                      blocker_count=len(blockers), counts=self.counts())

    def _export(self, checkpoint_id: str) -> ErrorCode | None:
        # the snapshots are collected from the workers that reported at readiness
        if not self._reported <= self.live_workers:
            return ErrorCode.EXPORT_FAILED
        return None

    def workers_acknowledged(self) -> int:
        return len(self._reported & self.live_workers)

    def _restore(self, episodes: tuple[EpisodeId, ...]) -> tuple[ErrorCode | None, str]:
        if self.served:
            return ErrorCode.CHECKPOINT_ERROR, "the model server has served calls"
        if self.workers_left:
            return ErrorCode.CHECKPOINT_ERROR, "a worker has left since start"
        return None, ""

    def _retire(self, episodes: tuple[EpisodeId, ...]) -> dict[str, Any]:
        refused, cancelled = [], []
        for call in self._calls.values():
            if not self.is_retired(call.episode):
                continue
            if call.state is _WAITING:
                call.state = _REFUSED
                refused.append(call.call_id)
            elif call.state in (_ADMITTED, _STREAMING, _HELD):
                if call.state is _STREAMING:
                    self._streaming -= 1
                call.state = _CANCELLED  # cancelled once; a retried retire skips it
                cancelled.append(call.call_id)
        if refused:
            self.notes.append(Note(NoteKind.REFUSED, self.clock.now(), self.checkpoint_id,
                                   "waiting calls of a retired attempt", ErrorCode.STALE_ATTEMPT,
                                   tuple(refused)))
        return {"refused": tuple(refused), "cancelled": tuple(cancelled)}
