"""The environment and resources participants: simple, but present.

See docs/domain/checkpoint-protocol.md#order-across-participants.

Environments park first (episode steps hold at their boundary), so an environment is ready as
soon as its admission closes. Resources go last because agents call them until they park: a
resources server is ready once no tool call is in flight; a tool call at closed admission waits
for resume.
"""

from __future__ import annotations

from typing import Any

from rolloutscope.vocabulary import ParticipantKind
from rolloutscope.replay.participants.protocol import Participant, Report


class EnvironmentParticipant(Participant):
    kind = ParticipantKind.ENVIRONMENT


class ResourcesParticipant(Participant):
    kind = ParticipantKind.RESOURCES

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.inflight = 0
        self.waiting = 0
        self.admitted_waiting = 0  # tool calls admitted by the last reopening

    def begin_tool_call(self) -> bool:
        """True: the call runs now; False: it waits for resume."""
        if not self.admission_open:
            self.waiting += 1
            return False
        self.inflight += 1
        return True

    def end_tool_call(self) -> None:
        self.inflight -= 1

    def _on_open_admission(self) -> None:
        self.admitted_waiting, self.waiting = self.waiting, 0
        self.inflight += self.admitted_waiting

    def is_ready(self) -> bool:
        return self.inflight == 0

    def report(self) -> Report:
        return Report(ready=self.is_ready(), blocker_count=self.inflight,
                      counts={"inflight": self.inflight, "waiting": self.waiting})
