"""Stand-in for NVIDIA-NeMo/Gym ``nemo_gym/_checkpoint/control.py`` at 011c338 (generation 2).

``CheckpointParticipant`` is what a server's participant implements: admission, readiness as a
``PrepareReport``, retire, export/install, with an ``asyncio.Condition`` that ``notify`` wakes.
``ParticipantControlPlane`` drives one participant through ``idle -> preparing -> prepared ->
committed`` (``restore`` from idle; ``resume`` back to idle from anywhere), fencing checkpoint
ids (the last 64 resumed ones are stale; another active one conflicts), caching finished
results per ``(checkpoint_id, op)``, and keeping a lease: every call renews it to
``deadline_ts + lease_grace_seconds``, and a watcher (``asyncio.sleep`` against ``time.time()``)
resumes on its own when it runs out. Deadlines are absolute wall-clock seconds; a prepare waits
for readiness on the condition with at most 1 s between checks and, at its deadline, answers
``preparing`` with admission still closed. Retire and forget are refused while a checkpoint is
open. Commit exports once and stores the records under the checkpoint directory.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Optional

from rolloutscope.replay.doubles.gym_episode_types import EpisodeId
from rolloutscope.replay.doubles.gym_errors import (
    CheckpointConflictError,
    DeadlineExceededError,
    InvalidPhaseError,
    StaleAttemptError,
    StaleCheckpointError,
)

_RESUMED_IDS_KEPT = 64
MAX_REPORTED_BLOCKERS = 100


class CheckpointPhase(str, Enum):
    IDLE = "idle"
    PREPARING = "preparing"
    PREPARED = "prepared"
    COMMITTED = "committed"
    RESTORED = "restored"


@dataclass(kw_only=True)
class CheckpointRequest:
    checkpoint_id: str
    deadline_ts: float

    def remaining(self) -> float:
        left = self.deadline_ts - time.time()
        if left <= 0:
            raise DeadlineExceededError(f"checkpoint {self.checkpoint_id!r} deadline passed")
        return left


@dataclass(kw_only=True)
class CommitRequest(CheckpointRequest):
    checkpoint_dir: str
    episode_ids: Optional[list[EpisodeId]] = None
    stop: bool = False


@dataclass(kw_only=True)
class RestoreRequest(CheckpointRequest):
    checkpoint_dir: str
    episode_ids: list[EpisodeId]


@dataclass(kw_only=True)
class RetireRequest(CheckpointRequest):
    episode_ids: list[EpisodeId]


@dataclass(kw_only=True)
class ForgetRequest(CheckpointRequest):
    rollout_ids: list[str]


@dataclass(kw_only=True)
class CheckpointRecord:
    episode_id: EpisodeId

    def to_json_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(kw_only=True)
class PrepareReport:
    ready: bool
    blockers: list[str] = field(default_factory=list)
    blocker_count: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    restarts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.blocker_count:
            self.blocker_count = len(self.blockers)
        self.blockers = list(self.blockers)[:MAX_REPORTED_BLOCKERS]

    def model_dump(self) -> dict[str, Any]:
        return asdict(self)


class RetiredAttempts:
    def __init__(self) -> None:
        self._marks: dict[str, int] = {}

    def check(self, episode_id: EpisodeId) -> None:
        mark = self._marks.get(episode_id.rollout_id)
        if mark is not None and episode_id.attempt <= mark:
            raise StaleAttemptError(f"{episode_id.capture_key} was retired")

    def mark(self, episode_ids: Iterable[EpisodeId]) -> None:
        for e in episode_ids:
            self._marks[e.rollout_id] = max(self._marks.get(e.rollout_id, -1), e.attempt)

    def forget(self, rollout_ids: Iterable[str]) -> None:
        for rid in rollout_ids:
            self._marks.pop(rid, None)

    def __len__(self) -> int:
        return len(self._marks)


class CheckpointParticipant(ABC):
    kind: ClassVar[str]
    record_model: ClassVar[type[CheckpointRecord]] = CheckpointRecord

    def __init__(self) -> None:
        self.retired = RetiredAttempts()
        self._changed = asyncio.Condition()
        self.on_change: Optional[Callable[[], Awaitable[None]]] = None

    async def notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
        if self.on_change is not None:
            await self.on_change()

    async def wait_changed(self, timeout: float) -> None:
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=timeout)
            except TimeoutError:
                pass

    @abstractmethod
    async def close_admission(self, request: CheckpointRequest) -> None: ...

    @abstractmethod
    async def open_admission(self) -> None: ...

    @abstractmethod
    def readiness(self) -> PrepareReport: ...

    def ready(self) -> bool:
        return self.readiness().ready

    @abstractmethod
    async def retire(self, episode_id: EpisodeId) -> None: ...

    def export_records(self, episode_ids: Optional[list[EpisodeId]]) -> list[CheckpointRecord]:
        return []

    def restore_records(self, records: list[CheckpointRecord]) -> None:
        pass

    async def mark_retired(self, episode_ids: list[EpisodeId]) -> None:
        self.retired.mark(episode_ids)

    async def forget(self, rollout_ids: list[str]) -> None:
        self.retired.forget(rollout_ids)

    async def export(self, episode_ids: Optional[list[EpisodeId]]) -> list[CheckpointRecord]:
        return self.export_records(episode_ids)

    async def install(self, records: list[CheckpointRecord], scope: list[EpisodeId]) -> None:
        self.restore_records(records)

    async def restored_pending(self) -> list[EpisodeId]:
        return []

    def status_extra(self) -> dict[str, Any]:
        return {}


def next_attempt(episode_id: EpisodeId) -> EpisodeId:
    return episode_id.model_copy(update={"attempt": episode_id.attempt + 1})


def _jsonable(record: Any) -> Any:
    if is_dataclass(record):
        return asdict(record)
    return record


class ParticipantControlPlane:
    def __init__(self, participant: CheckpointParticipant, *, instance_name: str,
                 lease_grace_seconds: float) -> None:
        self.participant = participant
        self.instance_name = instance_name
        self.lease_grace_seconds = lease_grace_seconds
        self.phase = CheckpointPhase.IDLE
        self.checkpoint_id: Optional[str] = None
        self._lease_expires_at: Optional[float] = None
        self._lease_task: Optional[asyncio.Task] = None
        self._resumed: OrderedDict[str, None] = OrderedDict()
        self._results: dict[tuple[str, str], dict[str, Any]] = {}
        self._exported: Optional[tuple[str, list[CheckpointRecord]]] = None
        self._lock = asyncio.Lock()

    def status(self) -> dict[str, Any]:
        return {"kind": self.participant.kind, "instance": self.instance_name,
                "phase": self.phase.value, "checkpoint_id": self.checkpoint_id,
                "lease_expires_at": self._lease_expires_at,
                "retired_rollouts": len(self.participant.retired),
                "report": self.participant.readiness().model_dump(),
                **self.participant.status_extra()}

    def _admit(self, checkpoint_id: str, allowed: set[CheckpointPhase]) -> None:
        if checkpoint_id in self._resumed:
            raise StaleCheckpointError(f"checkpoint {checkpoint_id!r} was already resumed")
        if self.checkpoint_id is not None and self.checkpoint_id != checkpoint_id:
            raise CheckpointConflictError(f"checkpoint {self.checkpoint_id!r} is active in "
                                          f"phase {self.phase.value}")
        if self.phase not in allowed:
            raise InvalidPhaseError(f"not valid in phase {self.phase.value}")

    # lease
    def _renew(self, request: CheckpointRequest) -> None:
        expires = request.deadline_ts + self.lease_grace_seconds
        self._lease_expires_at = max(self._lease_expires_at or 0.0, expires)
        if self._lease_task is None or self._lease_task.done():
            self._lease_task = asyncio.create_task(self._watch_lease(request.checkpoint_id))

    async def _watch_lease(self, checkpoint_id: str) -> None:
        while self._lease_expires_at is not None and self.checkpoint_id in (None, checkpoint_id):
            left = self._lease_expires_at - time.time()
            if left > 0:
                await asyncio.sleep(left)
                continue
            async with self._lock:
                if self.checkpoint_id != checkpoint_id or \
                        time.time() < (self._lease_expires_at or 0.0):
                    continue
                await self._reopen(resume_id=checkpoint_id)
            return

    async def renew(self, request: CheckpointRequest) -> dict[str, Any]:
        async with self._lock:
            self._admit(request.checkpoint_id, set(CheckpointPhase) - {CheckpointPhase.IDLE})
            self._renew(request)
            return {"lease_expires_at": self._lease_expires_at}

    # phases
    async def prepare(self, request: CheckpointRequest) -> dict[str, Any]:
        async with self._lock:
            done = self._results.get((request.checkpoint_id, "prepare"))
            if done is not None:
                return done
            self._admit(request.checkpoint_id, {CheckpointPhase.IDLE, CheckpointPhase.PREPARING})
            if self.phase is CheckpointPhase.IDLE:
                self.checkpoint_id, self.phase = request.checkpoint_id, CheckpointPhase.PREPARING
                self._renew(request)
                try:
                    await self.participant.close_admission(request)
                except BaseException:
                    await self._reopen()
                    raise
            else:
                self._renew(request)
        try:
            while not (self.participant.ready() or time.time() >= request.deadline_ts
                       or self.checkpoint_id != request.checkpoint_id):
                await self.participant.wait_changed(min(request.deadline_ts - time.time(), 1.0))
        except BaseException:
            async with self._lock:
                if self.checkpoint_id == request.checkpoint_id and \
                        self.phase is CheckpointPhase.PREPARING:
                    await self._reopen()
            raise
        async with self._lock:
            report = self.participant.readiness()
            if self.checkpoint_id != request.checkpoint_id or \
                    self.phase is not CheckpointPhase.PREPARING:
                return {"phase": self.phase.value, "report": report.model_dump()}
            if report.ready:
                self.phase = CheckpointPhase.PREPARED
            result = {"phase": self.phase.value, "report": report.model_dump()}
            if report.ready:
                self._results[(request.checkpoint_id, "prepare")] = result
            return result

    def _outside_checkpoint(self, request: CheckpointRequest) -> None:
        if self.phase not in (CheckpointPhase.IDLE, CheckpointPhase.RESTORED):
            raise InvalidPhaseError(f"not valid in phase {self.phase.value}; resume first")
        if self.checkpoint_id is not None and self.checkpoint_id != request.checkpoint_id:
            raise CheckpointConflictError(f"checkpoint {self.checkpoint_id!r} is active")
        if self.phase is not CheckpointPhase.IDLE:
            self._renew(request)

    async def retire(self, request: RetireRequest) -> dict[str, Any]:
        async with self._lock:
            self._outside_checkpoint(request)
            await _within(request, self.participant.mark_retired(request.episode_ids))
            await _within(request, self._stop(request.episode_ids))
        await self.participant.notify()
        return {"retired": [e.capture_key for e in request.episode_ids]}

    async def _stop(self, episode_ids: list[EpisodeId]) -> None:
        for episode_id in episode_ids:
            await self.participant.retire(episode_id)

    async def forget(self, request: ForgetRequest) -> dict[str, Any]:
        async with self._lock:
            self._outside_checkpoint(request)
            await _within(request, self.participant.forget(request.rollout_ids))
        return {"forgotten": sorted(request.rollout_ids)}

    async def commit(self, request: CommitRequest) -> dict[str, Any]:
        async with self._lock:
            done = self._results.get((request.checkpoint_id, "commit"))
            if done is not None:
                return done
            self._admit(request.checkpoint_id, {CheckpointPhase.PREPARED})
            self._renew(request)
            report = self.participant.readiness()
            if not report.ready:
                raise InvalidPhaseError(f"participant is no longer ready to commit: "
                                        f"blockers={report.blockers}")
            if self._exported is None or self._exported[0] != request.checkpoint_id:
                records = await _within(request, self.participant.export(request.episode_ids))
                self._exported = (request.checkpoint_id, records)
            records = self._exported[1]
            manifest = await _within(request, asyncio.to_thread(
                self._write, Path(request.checkpoint_dir), request.checkpoint_id, records))
            self.phase = CheckpointPhase.COMMITTED
            result = {"phase": self.phase.value, "manifest": manifest,
                      "episode_ids": sorted({r.episode_id.capture_key for r in records})}
            self._results[(request.checkpoint_id, "commit")] = result
            return result

    def _write(self, checkpoint_dir: Path, checkpoint_id: str,
               records: list[CheckpointRecord]) -> dict[str, Any]:
        where = checkpoint_dir / "gym" / self.participant.kind / self.instance_name
        where.mkdir(parents=True, exist_ok=True)
        manifest = {"kind": self.participant.kind, "instance": self.instance_name,
                    "checkpoint_id": checkpoint_id, "record_count": len(records),
                    "records": [_jsonable(r) for r in records]}
        (where / "manifest.json").write_text(json.dumps(manifest, default=str),
                                             encoding="utf-8")
        return {k: v for k, v in manifest.items() if k != "records"}

    async def restore(self, request: RestoreRequest) -> dict[str, Any]:
        async with self._lock:
            done = self._results.get((request.checkpoint_id, "restore"))
            if done is not None:
                return done
            self._admit(request.checkpoint_id, {CheckpointPhase.IDLE})
            raise InvalidPhaseError("the stand-in control plane does not restore")

    async def resume(self, request: CheckpointRequest) -> dict[str, Any]:
        async with self._lock:
            if request.checkpoint_id in self._resumed:
                return {"phase": CheckpointPhase.IDLE.value, "idempotent": True}
            if self.phase is CheckpointPhase.IDLE and self.checkpoint_id is None:
                self._remember(request.checkpoint_id)
                return {"phase": CheckpointPhase.IDLE.value, "idempotent": True}
            self._admit(request.checkpoint_id, set(CheckpointPhase) - {CheckpointPhase.IDLE})
            await self._reopen(resume_id=request.checkpoint_id)
            return {"phase": self.phase.value, "idempotent": False}

    def _remember(self, checkpoint_id: str) -> None:
        self._resumed[checkpoint_id] = None
        while len(self._resumed) > _RESUMED_IDS_KEPT:
            self._resumed.popitem(last=False)

    async def _reopen(self, *, resume_id: Optional[str] = None) -> None:
        self._exported = None
        await self.participant.open_admission()
        if resume_id is not None:
            self._remember(resume_id)
            self._results = {k: v for k, v in self._results.items() if k[0] != resume_id}
        self.phase, self.checkpoint_id, self._lease_expires_at = CheckpointPhase.IDLE, None, None
        if self._lease_task is not None and self._lease_task is not asyncio.current_task():
            self._lease_task.cancel()
        self._lease_task = None
        await self.participant.notify()


async def _within(request: CheckpointRequest, operation: Any) -> Any:
    try:
        async with asyncio.timeout(request.remaining()):
            return await operation
    except TimeoutError as error:
        raise DeadlineExceededError(f"checkpoint {request.checkpoint_id!r} deadline passed "
                                    f"during I/O") from error
