"""Participant notes into spans and Gym hooks, and the participants' lease timers.

Each checkpoint participant notes what happened to it (admission closed or reopened, a phase
change, a lease expiry, a refusal), whoever caused it; every operation that may have made notes
drains them here. Admission closing and reopening reach Gym's runs (park requests, releases,
held streams and waiting calls, tool steps); the rest is recorded only. A participant's lease
expiry is checked when it falls due.
"""

from __future__ import annotations

from typing import Any

from rolloutscope.vocabulary import ParticipantKind
from rolloutscope.replay.event_engine import Priority, Timer
from rolloutscope.replay.participants.environment import ResourcesParticipant
from rolloutscope.replay.participants.model import ModelParticipant
from rolloutscope.replay.participants.protocol import NoteKind, Participant
from rolloutscope.replay.sim.ports import Coordinator, GymForCheckpoint, Timeline
from rolloutscope.replay.sim.snapshot_recorder import SnapshotRecorder


class ParticipantNotes:
    def __init__(self, *, coordinator: Coordinator, gym: GymForCheckpoint, timeline: Timeline,
                 recorder: SnapshotRecorder) -> None:
        self._coordinator = coordinator
        self._gym = gym
        self._timeline = timeline
        self._rec = recorder
        self._lease_timers: dict[str, tuple[float, Timer]] = {}

    def drain(self, parent: Any = None) -> None:
        gym = self._gym
        for p in self._coordinator.all():
            for note in p.drain_notes():
                if note.kind is NoteKind.ADMISSION_CLOSED:
                    self._rec.admission_closed(p, note, parent)
                    if p.kind is ParticipantKind.AGENT:
                        gym.on_park_requested()
                elif note.kind is NoteKind.ADMISSION_OPENED:
                    self._rec.admission_opened(p, note)
                    if p.kind is ParticipantKind.AGENT:
                        gym.on_agent_released(p.released)
                    elif isinstance(p, ModelParticipant):
                        gym.on_model_reopened(p.delivered, p.admitted)
                    elif isinstance(p, ResourcesParticipant):
                        gym.on_tools_reopened()
                else:
                    self._rec.participant_noted(p, note)
        self._arm_leases()

    def _arm_leases(self) -> None:
        for p in self._coordinator.all():
            armed = self._lease_timers.get(p.instance)
            if p.lease_expires_at is None:
                if armed is not None:
                    armed[1].cancel()
                    del self._lease_timers[p.instance]
                continue
            if armed is not None and armed[0] == p.lease_expires_at:
                continue
            if armed is not None:
                armed[1].cancel()
            timer = self._timeline.at(p.lease_expires_at, self._lease_check, p,
                                      priority=Priority.CONTROL)
            self._lease_timers[p.instance] = (p.lease_expires_at, timer)

    def _lease_check(self, p: Participant) -> None:
        self._lease_timers.pop(p.instance, None)
        if p.tick():
            self.drain()
