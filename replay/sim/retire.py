"""Coordinated retire, for the controller's retire-then-adopt: every participant retires the
abandoned executions; the agent refuses a finished one and hands back its receipt instead."""

from __future__ import annotations

from rolloutscope.vocabulary import ParticipantKind
from rolloutscope.replay.participants.agent import CompletionReceipt
from rolloutscope.replay.participants.protocol import EpisodeId
from rolloutscope.replay.sim.ports import AgentServer, Coordinator, GymForCheckpoint, NoteDrain
from rolloutscope.replay.sim.snapshot_recorder import SnapshotRecorder

# a retire is only valid between checkpoints
_RETIRE_PHASES = ("idle", "restored")


class RetireCoordinator:
    def __init__(self, *, coordinator: Coordinator, agent: AgentServer, gym: GymForCheckpoint,
                 notes: NoteDrain, recorder: SnapshotRecorder) -> None:
        self._coordinator = coordinator
        self._agent = agent
        self._gym = gym
        self._notes = notes
        self._rec = recorder

    def coordinate_retire(self, episodes: tuple[EpisodeId, ...]
                          ) -> list[CompletionReceipt] | None:
        """Retire ``episodes`` everywhere; None if a checkpoint holds the participants.
        Returns the receipts of runs that had already completed (a finished run is refused)."""
        if self._agent.phase.value not in _RETIRE_PHASES:
            return None
        handle = self._rec.retire_started(len(episodes))
        fan = self._coordinator.retire(episodes)
        receipts: list[CompletionReceipt] = []
        for p, reply in fan.replies:
            self._rec.retire_replied(handle, p, reply, len(episodes))
            if p.kind is ParticipantKind.AGENT and reply.ok:
                self._gym.retired(reply.extra.get("retired", ()))
                receipts.extend(reply.extra.get("receipts", ()))
        self._notes.drain()
        self._rec.retire_ended(handle, fan.ok)
        return receipts
