"""The controller's checkpoint coordinator (``coordination.py``;
docs/domain/checkpoint-protocol.md#order-across-participants).

Rule: prepare goes stage by stage in ``PREPARE_ORDER`` and stops at the first stage that is not
prepared by the deadline (leaving admission closed: the caller must resume); commit and restore
fan out to everyone; restore is all-or-nothing (on failure the next attempts are retired
everywhere, then everything resumes); resume goes in reverse order, so no server reopens before
the servers it calls; retire and forget go callers before callees (``RETIRE_ORDER``).

Waiting is the engine's business: ``advance_prepare`` is called whenever a participant may have
become ready and at the deadline, and reports the stages it started and finished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rolloutscope.clock import Clock
from rolloutscope.vocabulary import ParticipantKind
from rolloutscope.replay.errors import ModelInvariantError
from rolloutscope.replay.participants.protocol import EpisodeId, Participant, Reply

PREPARE_ORDER = (ParticipantKind.ENVIRONMENT, ParticipantKind.MODEL, ParticipantKind.AGENT,
                 ParticipantKind.RESOURCES)
RESUME_ORDER = tuple(reversed(PREPARE_ORDER))
RETIRE_ORDER = ((ParticipantKind.ENVIRONMENT,), (ParticipantKind.AGENT,),
                (ParticipantKind.MODEL, ParticipantKind.RESOURCES))


@dataclass(frozen=True, kw_only=True)
class StageEvent:
    kind: ParticipantKind
    started: bool  # True: the stage began; False: it finished (prepared or stopped)
    at: float
    prepared: bool = False


@dataclass(frozen=True, kw_only=True)
class PrepareProgress:
    done: bool
    prepared: bool = False
    stopped_at: ParticipantKind | None = None
    events: tuple[StageEvent, ...] = ()
    replies: tuple[tuple[Participant, Reply], ...] = ()


@dataclass(frozen=True, kw_only=True)
class FanOut:
    ok: bool
    replies: tuple[tuple[Participant, Reply], ...] = field(default_factory=tuple)


class CheckpointCoordinator:
    def __init__(self, participants: Mapping[ParticipantKind, Sequence[Participant]],
                 clock: Clock) -> None:
        for kind, group in participants.items():
            for p in group:
                if p.kind is not kind:
                    raise ModelInvariantError(f"{p.instance} is a {p.kind}, filed as {kind}")
        self.participants = {k: tuple(participants.get(k, ())) for k in PREPARE_ORDER}
        self.clock = clock
        self.checkpoint_id: str | None = None
        self.deadline_ts = 0.0
        self._stage = 0
        self._preparing = False

    def all(self) -> tuple[Participant, ...]:
        return tuple(p for k in PREPARE_ORDER for p in self.participants[k])

    @property
    def stage(self) -> ParticipantKind | None:
        return PREPARE_ORDER[self._stage] if self._preparing else None

    # -- prepare ------------------------------------------------------------------------------
    def begin_prepare(self, checkpoint_id: str, deadline_ts: float) -> PrepareProgress:
        if self._preparing:
            raise ModelInvariantError(f"prepare of {self.checkpoint_id} is still running")
        self.checkpoint_id, self.deadline_ts = checkpoint_id, deadline_ts
        self._stage, self._preparing = 0, True
        return self.advance_prepare(_start=True)

    def advance_prepare(self, *, _start: bool = False) -> PrepareProgress:
        if not self._preparing:
            return PrepareProgress(done=True)
        now = self.clock.now()
        events: list[StageEvent] = []
        replies: list[tuple[Participant, Reply]] = []
        ck = self.checkpoint_id
        assert ck is not None
        if _start:
            replies += self._start_stage(events, now)
        while True:
            kind = PREPARE_ORDER[self._stage]
            group = self.participants[kind]
            ready = all(p.poll_ready() for p in group)  # every one polls: no short-circuit
            if not ready:
                if now >= self.deadline_ts:
                    self._preparing = False
                    events.append(StageEvent(kind=kind, started=False, at=now))
                    return PrepareProgress(done=True, prepared=False, stopped_at=kind,
                                           events=tuple(events), replies=tuple(replies))
                return PrepareProgress(done=False, events=tuple(events), replies=tuple(replies))
            events.append(StageEvent(kind=kind, started=False, at=now, prepared=True))
            if self._stage == len(PREPARE_ORDER) - 1:
                self._preparing = False
                return PrepareProgress(done=True, prepared=True, events=tuple(events),
                                       replies=tuple(replies))
            self._stage += 1
            replies += self._start_stage(events, now)

    def _start_stage(self, events: list[StageEvent], now: float
                     ) -> list[tuple[Participant, Reply]]:
        kind = PREPARE_ORDER[self._stage]
        events.append(StageEvent(kind=kind, started=True, at=now))
        assert self.checkpoint_id is not None
        return [(p, p.prepare(self.checkpoint_id, self.deadline_ts))
                for p in self.participants[kind]]

    # -- fan-outs -----------------------------------------------------------------------------
    def commit(self, checkpoint_id: str, deadline_ts: float) -> FanOut:
        replies = tuple((p, p.commit(checkpoint_id, deadline_ts)) for p in self.all())
        return FanOut(ok=all(r.ok for _, r in replies), replies=replies)

    def restore(self, checkpoint_id: str, deadline_ts: float,
                episodes: Iterable[EpisodeId]) -> FanOut:
        eps = tuple(episodes)
        replies = tuple((p, p.restore(checkpoint_id, deadline_ts, eps)) for p in self.all())
        if all(r.ok for _, r in replies):
            return FanOut(ok=True, replies=replies)
        # all or nothing: retire the next attempts everywhere, then resume everything
        nxt = tuple(EpisodeId(e.rollout_id, e.attempt + 1) for e in eps)
        extra = self.retire(nxt).replies + self.resume(checkpoint_id).replies
        return FanOut(ok=False, replies=replies + extra)

    def resume(self, checkpoint_id: str) -> FanOut:
        self._preparing = False
        replies = tuple((p, p.resume(checkpoint_id))
                        for k in RESUME_ORDER for p in self.participants[k])
        return FanOut(ok=all(r.ok for _, r in replies), replies=replies)

    def retire(self, episodes: Iterable[EpisodeId]) -> FanOut:
        eps = tuple(episodes)
        replies = tuple((p, p.retire(eps)) for stage in RETIRE_ORDER for k in stage
                        for p in self.participants[k])
        return FanOut(ok=all(r.ok for _, r in replies), replies=replies)

    def forget(self, rollout_ids: Iterable[str]) -> FanOut:
        rids = tuple(rollout_ids)
        replies = tuple((p, p.forget(rids)) for stage in RETIRE_ORDER for k in stage
                        for p in self.participants[k])
        return FanOut(ok=all(r.ok for _, r in replies), replies=replies)
