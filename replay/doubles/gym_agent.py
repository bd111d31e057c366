"""Stand-in for ``AgentSessionParticipant`` of NVIDIA-NeMo/Gym ``nemo_gym/_checkpoint/agent.py``
at 011c338 (generation 2; the native-session path -- the legacy ``/run`` path with its
``EpisodeSteps`` is not mirrored).

A session is opened per episode and driven by one activation at a time. The activation reports
a boundary before each model call and after each tool round; a policy call made right after a
boundary counts as at that boundary (``awaiting_model``). Closing admission does not wait: it
only asks every session to park at its next boundary, and refuses new sessions
(``AdmissionClosedError``). Readiness: no session is running between boundaries and none is
being retired. Retire cancels the activation, waits for it, and frees the session; retired
attempts are refused until forgotten. Export asks the agent's hooks for every live session's
state, with each one's latest boundary.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Protocol

from rolloutscope.replay.doubles.gym_control import (
    CheckpointParticipant,
    CheckpointRecord,
    CheckpointRequest,
    PrepareReport,
    next_attempt,
)
from rolloutscope.replay.doubles.gym_episode_types import EpisodeId
from rolloutscope.replay.doubles.gym_errors import (
    AdmissionClosedError,
    ControlError,
    StaleAttemptError,
)

BoundarySnapshot = Callable[[], dict[str, Any]]


@dataclass(kw_only=True)
class AgentSessionRecord(CheckpointRecord):
    session_key: str
    session: Any
    boundary: Any = None


@dataclass(frozen=True)
class RestoredAgentSession:
    session_key: str
    episode_id: EpisodeId
    session: dict[str, Any]


class AgentSessionHooks(Protocol):
    async def export_agent_sessions(self, session_keys: list[str]) -> dict[str, dict]: ...
    async def restore_agent_sessions(self, sessions: list[RestoredAgentSession]) -> None: ...
    async def retire_agent_session(self, session_key: str) -> None: ...
    async def park_agent_sessions(self, session_keys: list[str]) -> None: ...


@dataclass
class _Session:
    key: str
    episode_id: EpisodeId
    state: Literal["idle", "running", "at_boundary"] = "idle"
    park_requested: bool = False
    boundary: Optional[BoundarySnapshot] = None
    continuation: Optional[dict[str, Any]] = None
    task: Optional[asyncio.Task] = None
    resume: asyncio.Event = field(default_factory=asyncio.Event)
    restored_pending: bool = False
    retired: bool = False


class Activation:
    def __init__(self, participant: "AgentSessionParticipant", session: _Session) -> None:
        self._participant = participant
        self._session = session
        self.continuation, session.continuation = session.continuation, None
        session.restored_pending = False

    async def boundary(self, snapshot: BoundarySnapshot) -> None:
        await self._participant.at_boundary(self._session, snapshot)

    async def park(self) -> None:
        await self._participant.park(self._session)

    @asynccontextmanager
    async def awaiting_model(self) -> AsyncIterator[None]:
        async with self._participant.awaiting_model(self._session):
            yield


class AgentSessionParticipant(CheckpointParticipant):
    kind = "agent"
    record_model = AgentSessionRecord

    def __init__(self, hooks: AgentSessionHooks) -> None:
        super().__init__()
        self.hooks = hooks
        self.accepting = True
        self._sessions: dict[str, _Session] = {}

    @staticmethod
    def claim_key(record: CheckpointRecord) -> Optional[str]:
        return None

    def open_session(self, session_key: str, episode_id: EpisodeId, *, seed: bool = False) -> None:
        self.retired.check(episode_id)
        existing = self._sessions.get(session_key)
        if existing is not None:
            if existing.episode_id != episode_id:
                raise StaleAttemptError(f"agent session {session_key!r} belongs to "
                                        f"{existing.episode_id.capture_key}")
            return
        if not self.accepting:
            raise AdmissionClosedError("agent admission is closed for a checkpoint")
        self._sessions[session_key] = _Session(key=session_key, episode_id=episode_id)

    def has_session(self, session_key: str) -> bool:
        return session_key in self._sessions

    def close_session(self, session_key: str) -> None:
        session = self._sessions.pop(session_key, None)
        if session is None:
            return
        session.resume.set()
        if session.task is not None and session.task is not asyncio.current_task():
            session.task.cancel()

    @asynccontextmanager
    async def activation(self, session_key: str, episode_id: EpisodeId) -> AsyncIterator[Activation]:
        self.retired.check(episode_id)
        session = self._sessions.get(session_key)
        if session is None:
            raise ControlError(f"agent session {session_key!r} is not open")
        if session.episode_id != episode_id:
            raise StaleAttemptError(f"agent session {session_key!r} belongs to "
                                    f"{session.episode_id.capture_key}")
        if session.state != "idle":
            raise ControlError(f"agent session {session_key!r} already has an activation")
        session.state, session.park_requested = "running", not self.accepting
        session.task = asyncio.current_task()
        try:
            yield Activation(self, session)
        finally:
            if self._sessions.get(session.key) is session:
                session.state, session.boundary, session.task = "idle", None, None
            await self.notify()

    async def at_boundary(self, session: _Session, snapshot: BoundarySnapshot) -> None:
        self._require_live(session)
        session.boundary = snapshot
        if session.park_requested:
            await self.park(session)

    async def park(self, session: _Session) -> None:
        self._require_live(session)
        session.state = "at_boundary"
        session.resume.clear()
        if self.accepting:
            session.resume.set()
        await self.notify()
        while True:
            await session.resume.wait()
            self._require_live(session)
            if self.accepting:
                break
            session.resume.clear()
        session.state = "running"

    @asynccontextmanager
    async def awaiting_model(self, session: _Session) -> AsyncIterator[None]:
        session.state = "at_boundary"
        await self.notify()
        try:
            yield
        finally:
            if self._sessions.get(session.key) is session:
                session.state = "running"

    def _require_live(self, session: _Session) -> None:
        if self._sessions.get(session.key) is not session:
            raise StaleAttemptError(f"agent session {session.key!r} was retired")

    async def close_admission(self, request: CheckpointRequest) -> None:
        self.accepting = False
        for session in self._sessions.values():
            session.park_requested = True

    async def open_admission(self) -> None:
        self.accepting = True
        for session in self._sessions.values():
            session.park_requested = False
            session.resume.set()

    def readiness(self) -> PrepareReport:
        blockers = sorted({s.episode_id.capture_key for s in self._sessions.values()
                           if s.retired or s.state == "running"})
        return PrepareReport(
            ready=not blockers, blockers=blockers,
            counts={"sessions": len(self._sessions),
                    "at_boundary": sum(s.state == "at_boundary"
                                       for s in self._sessions.values())})

    async def retire(self, episode_id: EpisodeId) -> None:
        for session in list(self._sessions.values()):
            if session.episode_id.rollout_id != episode_id.rollout_id or \
                    session.episode_id.attempt > episode_id.attempt:
                continue
            first, session.retired = not session.retired, True
            session.resume.set()
            task = session.task
            if task is not None and task is not asyncio.current_task():
                if first:
                    task.cancel()
                await asyncio.wait([task])
            await self.hooks.retire_agent_session(session.key)
            if self._sessions.get(session.key) is session:
                del self._sessions[session.key]

    async def export(self, episode_ids: Optional[list[EpisodeId]]) -> list[CheckpointRecord]:
        scope = None if episode_ids is None else set(episode_ids)
        sessions = [s for s in self._sessions.values() if not s.retired and (
            scope is None or not s.restored_pending or s.episode_id in scope)]
        boundaries = [s.boundary() if s.state == "at_boundary" and s.boundary else
                      s.continuation for s in sessions]
        states = await self.hooks.export_agent_sessions([s.key for s in sessions])
        missing = [s.key for s in sessions if s.key not in states]
        if missing:
            raise ControlError(f"the agent did not export sessions {missing}")
        return [AgentSessionRecord(episode_id=s.episode_id, session_key=s.key,
                                   session=states[s.key], boundary=b)
                for s, b in zip(sessions, boundaries)]

    async def install(self, records: list[CheckpointRecord], scope: list[EpisodeId]) -> None:
        if self._sessions:
            raise ControlError("agent restore requires a process without live sessions")
        restored = [RestoredAgentSession(r.session_key, next_attempt(r.episode_id), r.session)
                    for r in records if isinstance(r, AgentSessionRecord)]
        await self.hooks.restore_agent_sessions(restored)
        for record, session in zip(records, restored):
            self._sessions[session.session_key] = _Session(
                key=session.session_key, episode_id=session.episode_id,
                continuation=getattr(record, "boundary", None), restored_pending=True)

    async def restored_pending(self) -> list[EpisodeId]:
        return [s.episode_id for s in self._sessions.values() if s.restored_pending]

    def status_extra(self) -> dict[str, Any]:
        return {"accepting": self.accepting}
