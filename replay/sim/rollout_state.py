"""The controller's records of its rollouts: one ``PromptGroup`` per prompt, one ``RLTry`` per
``generate_and_push`` iteration over it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rolloutscope.vocabulary import Attr
from rolloutscope.replay.event_engine import Timer
from rolloutscope.replay.participants.agent import CompletionReceipt
from rolloutscope.replay.participants.deadlines import Deadline
from rolloutscope.replay.participants.rollouts import Failure, PromptBudget, RowDispatch
from rolloutscope.replay.scenario import Prompt
from rolloutscope.replay.sim.gym_run import RefusedRun, Run

RowDone = Callable[["RLTry", "Run | RefusedRun", "CompletionReceipt | None", "Failure | None"],
                   None]


class PromptGroup:
    __slots__ = ("prompt", "rollout_id", "span", "budget", "tries", "current", "episode_attempt")

    def __init__(self, prompt: Prompt, budget: PromptBudget) -> None:
        self.prompt = prompt
        self.rollout_id = f"p{prompt.idx:05d}"
        self.span: Any = None
        self.budget = budget
        self.tries = 0
        self.current: RLTry | None = None
        # the Gym episode attempt each row is dispatched at; a retired attempt moves it on
        self.episode_attempt = [0] * len(prompt.rows)


class RLTry:
    """One RL try of a prompt group; the owner its rows' runs answer to."""

    __slots__ = ("_row_done", "group", "index", "span", "deadline", "deadline_span",
                 "fire_timer", "rows", "rows_span", "runs", "ended", "adopted")

    def __init__(self, group: PromptGroup, index: int, rows: RowDispatch, *,
                 row_done: RowDone) -> None:
        self._row_done = row_done
        self.group = group
        self.index = index
        self.span: Any = None
        self.deadline: Deadline | None = None
        self.deadline_span: Any = None
        self.fire_timer: Timer | None = None
        self.rows = rows
        self.rows_span: Any = None
        self.runs: list[Run] = []
        self.ended = False
        self.adopted = 0

    def attrs(self) -> dict[str, Any]:
        g = self.group
        return {Attr.PROMPT_IDX: g.prompt.idx, Attr.ROLLOUT_ID: g.rollout_id,
                Attr.RL_ATTEMPT: self.index}

    # RunOwner
    def on_row_done(self, run: Run | RefusedRun, receipt: CompletionReceipt | None,
                    failure: Failure | None) -> None:
        self._row_done(self, run, receipt, failure)
