"""The checkpoint protocol shared by every participant kind (docs/domain/checkpoint-protocol.md).

Rule: one phase machine per participant, every phase change routed through ``_transition``::

    idle --prepare--> preparing --(ready)--> prepared --commit--> committed
    idle --restore--> restored
    preparing | prepared | committed | restored --resume--> idle   (resume == abort if unpublished)
    retire / forget: only in idle or restored, otherwise invalid_phase ("resume first")

Replies are data (``Reply`` with an ``ErrorCode``), idempotent per (checkpoint_id, op). Every call
renews the lease to ``deadline_ts + lease_grace_s``; ``tick`` past it resumes on its own (abort)
and fences the checkpoint id, as do ordinary resumes (the last 64 ids answer stale_checkpoint).
The transition that must never exist: admission reopening while a checkpoint still holds it
without a resume or a lease expiry.

Kinds subclass ``Participant`` and fill in admission, readiness, export, restore and retire.
They record what happened in ``notes`` (drained by the engine, which turns them into spans and
continues the work a resume released); they never do I/O and read time only from the clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rolloutscope.clock import Clock
from rolloutscope.vocabulary import (
    CheckpointOp,
    CheckpointPhase,
    ErrorCode,
    ParticipantKind,
)

RESUMED_FENCE_SIZE = 64
MAX_BLOCKERS = 100


@dataclass(frozen=True, slots=True, order=True)
class EpisodeId:
    rollout_id: str
    attempt: int

    @property
    def capture_key(self) -> str:
        return self.rollout_id if self.attempt == 0 else f"{self.rollout_id}-a{self.attempt}"


@dataclass(frozen=True, kw_only=True)
class Report:
    ready: bool
    blockers: tuple[str, ...] = ()  # capture keys, at most MAX_BLOCKERS
    blocker_count: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Reply:
    op: CheckpointOp
    checkpoint_id: str | None
    phase: CheckpointPhase
    code: ErrorCode | None = None
    detail: str = ""
    report: Report | None = None
    idempotent: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.code is None


class NoteKind(StrEnum):
    ADMISSION_CLOSED = "admission_closed"
    ADMISSION_OPENED = "admission_opened"
    LEASE_EXPIRED = "lease_expired"
    REFUSED = "refused"
    PHASE_CHANGED = "phase_changed"


@dataclass(frozen=True, slots=True)
class Note:
    kind: NoteKind
    at: float
    checkpoint_id: str | None
    detail: str = ""
    code: ErrorCode | None = None
    keys: tuple[str, ...] = ()


class Participant:
    kind: ParticipantKind

    def __init__(self, *, instance: str, clock: Clock, lease_grace_s: float = 600.0) -> None:
        self.instance = instance
        self.clock = clock
        self.lease_grace_s = lease_grace_s
        self.phase = CheckpointPhase.IDLE
        self.checkpoint_id: str | None = None
        self.lease_expires_at: float | None = None
        self.admission_open = True
        self.retired_attempts: dict[str, int] = {}  # rollout id -> highest retired attempt
        self.notes: list[Note] = []
        self._replies: dict[tuple[str, CheckpointOp], Reply] = {}
        self._resumed: deque[str] = deque(maxlen=RESUMED_FENCE_SIZE)

    # -- hooks for the kinds ----------------------------------------------------------------
    def _on_close_admission(self) -> None: ...
    def _on_open_admission(self) -> None: ...
    def _on_prepared(self) -> None: ...

    def report(self) -> Report:
        return Report(ready=True)

    def is_ready(self) -> bool:
        """Cheap readiness (counters only); ``report`` also lists the blockers."""
        return self.report().ready

    def _export(self, checkpoint_id: str) -> ErrorCode | None:
        return None

    def _restore(self, episodes: tuple[EpisodeId, ...]) -> tuple[ErrorCode | None, str]:
        return None, ""

    def _retire(self, episodes: tuple[EpisodeId, ...]) -> dict[str, Any]:
        return {}

    # -- the phase machine --------------------------------------------------------------------
    def _transition(self, to: CheckpointPhase, checkpoint_id: str | None) -> None:
        if to is not self.phase:
            self.notes.append(Note(NoteKind.PHASE_CHANGED, self.clock.now(), checkpoint_id,
                                   detail=f"{self.phase}->{to}"))
        self.phase = to
        if to is CheckpointPhase.IDLE:
            if checkpoint_id is not None and checkpoint_id not in self._resumed:
                self._resumed.append(checkpoint_id)
            self.checkpoint_id = None
            self.lease_expires_at = None
            self._set_admission(True, checkpoint_id)
        else:
            self.checkpoint_id = checkpoint_id

    def _set_admission(self, open_: bool, checkpoint_id: str | None) -> None:
        if open_ == self.admission_open:
            return
        self.admission_open = open_
        kind = NoteKind.ADMISSION_OPENED if open_ else NoteKind.ADMISSION_CLOSED
        self.notes.append(Note(kind, self.clock.now(), checkpoint_id))
        if open_:
            self._on_open_admission()
        else:
            self._on_close_admission()

    def _renew(self, deadline_ts: float) -> None:
        self.lease_expires_at = deadline_ts + self.lease_grace_s

    def _reply(self, op: CheckpointOp, ck: str | None, code: ErrorCode | None = None,
               detail: str = "", **kw: Any) -> Reply:
        if code is not None:
            self.notes.append(Note(NoteKind.REFUSED, self.clock.now(), ck, detail, code))
        return Reply(op=op, checkpoint_id=ck, phase=self.phase, code=code, detail=detail, **kw)

    def _cached(self, ck: str, op: CheckpointOp) -> Reply | None:
        r = self._replies.get((ck, op))
        if r is None:
            return None
        return Reply(op=r.op, checkpoint_id=r.checkpoint_id, phase=self.phase, code=r.code,
                     detail=r.detail, report=r.report, idempotent=True, extra=r.extra)

    def _stale(self, op: CheckpointOp, ck: str) -> Reply | None:
        if ck in self._resumed and ck != self.checkpoint_id:
            return self._reply(op, ck, ErrorCode.STALE_CHECKPOINT,
                               f"checkpoint {ck} was already resumed")
        if self.checkpoint_id is not None and ck != self.checkpoint_id:
            return self._reply(op, ck, ErrorCode.CHECKPOINT_CONFLICT,
                               f"checkpoint {self.checkpoint_id} is in progress")
        return None

    # -- operations (the routes under /ng-control/v1/checkpoint) ----------------------------
    def prepare(self, checkpoint_id: str, deadline_ts: float) -> Reply:
        """Close admission and start waiting for readiness (``poll_ready`` finishes it)."""
        op = CheckpointOp.PREPARE
        refused = self._stale(op, checkpoint_id)
        if refused is not None:
            return refused
        if self.phase is CheckpointPhase.IDLE:
            self._renew(deadline_ts)
            self._transition(CheckpointPhase.PREPARING, checkpoint_id)
            self._set_admission(False, checkpoint_id)
            self.poll_ready()
            return self._reply(op, checkpoint_id, report=self.report())
        if self.phase in (CheckpointPhase.PREPARING, CheckpointPhase.PREPARED):
            self._renew(deadline_ts)
            self.poll_ready()
            return self._reply(op, checkpoint_id, report=self.report(), idempotent=True)
        return self._reply(op, checkpoint_id, ErrorCode.INVALID_PHASE,
                           f"cannot prepare in phase {self.phase}")

    def poll_ready(self) -> bool:
        """``wait_ready``: preparing becomes prepared once the participant is ready."""
        if self.phase is CheckpointPhase.PREPARING and self.is_ready():
            self._transition(CheckpointPhase.PREPARED, self.checkpoint_id)
            self._on_prepared()
        return self.phase is CheckpointPhase.PREPARED

    def commit(self, checkpoint_id: str, deadline_ts: float) -> Reply:
        op = CheckpointOp.COMMIT
        answered = self._cached(checkpoint_id, op) or self._stale(op, checkpoint_id)
        if answered is not None:
            return answered
        if self.phase is not CheckpointPhase.PREPARED:
            return self._reply(op, checkpoint_id, ErrorCode.INVALID_PHASE,
                               f"cannot commit in phase {self.phase}")
        self._renew(deadline_ts)
        report = self.report()
        if not report.ready:  # readiness regressed since prepare (a held response delivered)
            self._transition(CheckpointPhase.PREPARING, checkpoint_id)
            return self._reply(op, checkpoint_id, ErrorCode.INVALID_PHASE,
                               "no longer ready to commit", report=report)
        code = self._export(checkpoint_id)
        if code is None:
            self._transition(CheckpointPhase.COMMITTED, checkpoint_id)
        reply = self._reply(op, checkpoint_id, code, "" if code is None else "export failed",
                            report=report)
        self._replies[(checkpoint_id, op)] = reply  # export is final for the checkpoint
        return reply

    def restore(self, checkpoint_id: str, deadline_ts: float,
                episodes: Iterable[EpisodeId]) -> Reply:
        op = CheckpointOp.RESTORE
        answered = self._cached(checkpoint_id, op) or self._stale(op, checkpoint_id)
        if answered is not None:
            return answered
        if self.phase is not CheckpointPhase.IDLE:
            return self._reply(op, checkpoint_id, ErrorCode.INVALID_PHASE,
                               f"cannot restore in phase {self.phase}")
        eps = tuple(sorted(episodes))
        code, detail = self._restore(eps)
        if code is not None:
            return self._reply(op, checkpoint_id, code, detail)
        self._renew(deadline_ts)
        self._transition(CheckpointPhase.RESTORED, checkpoint_id)
        self._set_admission(False, checkpoint_id)
        restored = tuple(EpisodeId(e.rollout_id, e.attempt + 1).capture_key for e in eps)
        reply = self._reply(op, checkpoint_id, extra={"restored": restored})
        self._replies[(checkpoint_id, op)] = reply
        return reply

    def resume(self, checkpoint_id: str) -> Reply:
        op = CheckpointOp.RESUME
        if self.phase is CheckpointPhase.IDLE:
            return self._reply(op, checkpoint_id, idempotent=True)
        if checkpoint_id != self.checkpoint_id:
            return self._reply(op, checkpoint_id, ErrorCode.STALE_CHECKPOINT,
                               f"checkpoint {self.checkpoint_id} is in progress")
        self._transition(CheckpointPhase.IDLE, checkpoint_id)
        return self._reply(op, checkpoint_id)

    def renew(self, checkpoint_id: str, deadline_ts: float) -> Reply:
        op = CheckpointOp.RENEW
        if self.phase is CheckpointPhase.IDLE or checkpoint_id != self.checkpoint_id:
            return self._reply(op, checkpoint_id, ErrorCode.STALE_CHECKPOINT,
                               "no such checkpoint in progress")
        self._renew(deadline_ts)
        return self._reply(op, checkpoint_id)

    def retire(self, episodes: Iterable[EpisodeId]) -> Reply:
        op = CheckpointOp.RETIRE
        if self.phase not in (CheckpointPhase.IDLE, CheckpointPhase.RESTORED):
            return self._reply(op, self.checkpoint_id, ErrorCode.INVALID_PHASE,
                               f"cannot retire in phase {self.phase}: resume first")
        eps = tuple(sorted(episodes))
        for e in eps:  # the mark comes before any work stops, and stays if the retire fails
            if e.attempt > self.retired_attempts.get(e.rollout_id, -1):
                self.retired_attempts[e.rollout_id] = e.attempt
        return self._reply(op, self.checkpoint_id, extra=self._retire(eps))

    def forget(self, rollout_ids: Iterable[str]) -> Reply:
        op = CheckpointOp.FORGET
        if self.phase not in (CheckpointPhase.IDLE, CheckpointPhase.RESTORED):
            return self._reply(op, self.checkpoint_id, ErrorCode.INVALID_PHASE,
                               f"cannot forget in phase {self.phase}: resume first")
        for rid in rollout_ids:
            self.retired_attempts.pop(rid, None)
        return self._reply(op, self.checkpoint_id)

    def is_retired(self, episode: EpisodeId) -> bool:
        return episode.attempt <= self.retired_attempts.get(episode.rollout_id, -1)

    def tick(self) -> bool:
        """Self-resume once the lease has expired; True when it did."""
        if self.lease_expires_at is None or self.clock.now() < self.lease_expires_at:
            return False
        ck, phase = self.checkpoint_id, self.phase
        # detail is the phase the lease expired in (the participant logs "checkpoint %s lease
        # expired in phase %s; resuming %s")
        self.notes.append(Note(NoteKind.LEASE_EXPIRED, self.clock.now(), ck,
                               detail=CheckpointPhase(phase).value))
        self._transition(CheckpointPhase.IDLE, ck)
        return True

    def drain_notes(self) -> list[Note]:
        notes, self.notes = self.notes, []
        return notes
