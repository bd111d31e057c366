"""One Gym /run of a row, as the simulation tracks it (the Gym side's record, and what the
controller and the fleet hold on to)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Protocol

from rolloutscope.vocabulary import Attr
from rolloutscope.replay.event_engine import Timer
from rolloutscope.replay.participants.agent import CompletionReceipt, ExecutionKey
from rolloutscope.replay.participants.rollouts import Failure
from rolloutscope.replay.scenario import Row


class Activity(IntEnum):
    SETUP = 0
    MODEL = 1
    TOOL = 2
    TOOL_WAIT = 3
    PARKED = 4
    DONE = 5


class RunOwner(Protocol):
    """Who reads a run's reply: the controller's RL try that dispatched the row."""

    def on_row_done(self, run: Run | RefusedRun, receipt: CompletionReceipt | None,
                    failure: Failure | None) -> None: ...


class Run:
    __slots__ = ("key", "episode", "call_prefix", "owner", "prompt_idx", "row_idx",
                 "rl_attempt", "row", "turns", "turn", "activity", "call_id", "parked", "span",
                 "rollout_span", "parked_span", "timer", "abandoned", "lost_reply", "fault_timer",
                 "fleet_call", "gen_call")

    def __init__(self, key: ExecutionKey, owner: RunOwner, prompt_idx: int, row_idx: int,
                 rl_attempt: int, row: Row) -> None:
        self.key = key
        # the key's episode, built once: every policy call names it
        self.episode = key.episode
        # each policy call's id is this and the turn's index
        self.call_prefix = f"{self.episode.capture_key}.g{key.generation}.t"
        self.owner = owner
        self.prompt_idx = prompt_idx
        self.row_idx = row_idx
        self.rl_attempt = rl_attempt
        self.row = row
        # the row's turns, read at every step of the run: held here, a step reads its turn
        # without going through the row (one object fewer to fetch, at 16,000 runs mostly
        # from main memory)
        self.turns = row.turns
        self.turn = 0  # the index of the current turn in ``turns``
        self.activity = Activity.SETUP
        self.call_id: str | None = None
        self.parked = False  # parked at a boundary by a snapshot, until the agent releases it
        # telemetry handles (GymRecorder's)
        self.span: Any = None
        self.rollout_span: Any = None
        self.parked_span: Any = None
        self.timer: Timer | None = None
        self.abandoned = False  # RL stopped reading it; it keeps running
        self.lost_reply = False
        self.fault_timer: Timer | None = None
        self.fleet_call: Any = None  # the policy call in the generation fleet, when modelled
        self.gen_call: Any = None  # the policy call on a real engine, without a fleet

    def ids(self) -> dict[str, Any]:
        return {Attr.ROLLOUT_ID: self.key.rollout_id, Attr.PROMPT_IDX: self.prompt_idx,
                Attr.RL_ATTEMPT: self.rl_attempt}


class RefusedRun:
    """Stands in for a run the agent refused to start, so the owner can count the row."""

    __slots__ = ("prompt_idx", "row_idx", "rl_attempt", "abandoned", "key")

    def __init__(self, prompt_idx: int, row_idx: int, rl_attempt: int) -> None:
        self.prompt_idx, self.row_idx, self.rl_attempt = prompt_idx, row_idx, rl_attempt
        self.abandoned = False
        self.key = None
