"""The rollout deadline of each RL try: one ``_Deadline`` over the try's whole row stream.

The registry (``DeadlineBook``: RL's ``RequestDeadlineRegistry``, the reference model by default)
keeps the budgets and the holders; this piece arms each running deadline on the timeline, re-arms
it when holders suspend or resume it, and tells the controller when one fires. A real
``_Deadline`` (an async context manager raising ``RolloutTimeout``) stands where ``start``,
``end`` and the firing are.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from rolloutscope.vocabulary import DeadlineHolder, DeadlineKind
from rolloutscope.replay.event_engine import Priority
from rolloutscope.replay.participants.deadlines import HolderChange
from rolloutscope.replay.participants.rollouts import Failure, rollout_timeout
from rolloutscope.replay.sim.controller_recorder import ControllerRecorder
from rolloutscope.replay.sim.ports import DeadlineBook, Timeline
from rolloutscope.replay.sim.rollout_state import RLTry


class TryDeadlines:
    def __init__(self, *, registry: DeadlineBook, timeline: Timeline,
                 recorder: ControllerRecorder, state_when: Callable[[list[Any]], str],
                 on_fired: Callable[[RLTry, Failure], None]) -> None:
        """``state_when``: what the try's runs were doing (Gym's answer, for the record);
        ``on_fired``: the controller failing the try with ``RolloutTimeout``."""
        self._registry = registry
        self._timeline = timeline
        self._rec = recorder
        self._state_when = state_when
        self._on_fired = on_fired
        self._open: dict[Hashable, RLTry] = {}  # deadline key -> the try it guards
        # a real _Deadline on the virtual-time runtime fires itself: it says so here instead
        # of being armed on the timeline (its due_at() is None)
        if getattr(registry, "fires_itself", False):
            registry.on_fire = self.fired

    def start(self, t: RLTry, budget_s: float) -> None:
        d = t.deadline = self._registry.add((t.group.prompt.idx, t.index),
                                            kind=DeadlineKind.ROLLOUT, budget_s=budget_s)
        self._open[d.key] = t
        self._rec.deadline_started(t, budget_s)
        self._arm(t)

    def end(self, t: RLTry, *, state_when_fired: str | None = None) -> None:
        """The try is over (committed, failed, or its deadline fired): the deadline ends."""
        d = t.deadline
        if d is None or d.key not in self._open:
            return
        if d.outcome is None:
            self._registry.complete(d.key)
        del self._open[d.key]
        if t.fire_timer is not None:
            t.fire_timer.cancel()
        self._rec.deadline_ended(t, d, state_when_fired=state_when_fired)

    def cancel(self, t: RLTry) -> None:
        """The try failed before its deadline did: the deadline is cancelled, not completed."""
        if t.deadline is not None and t.deadline.outcome is None:
            self._registry.cancel(t.deadline.key)

    def suspend(self, holder: DeadlineHolder) -> None:
        self._held(self._registry.suspend(holder), suspended=True)

    def resume(self, holder: DeadlineHolder) -> None:
        self._held(self._registry.resume(holder), suspended=False)

    def _held(self, change: HolderChange, *, suspended: bool) -> None:
        for d in change.changed:
            t = self._open.get(d.key)
            if t is None:
                continue
            self._rec.deadline_held(t, change, suspended=suspended)
            self._arm(t)

    def _arm(self, t: RLTry) -> None:
        if t.fire_timer is not None:
            t.fire_timer.cancel()
            t.fire_timer = None
        d = t.deadline
        due = d.due_at() if d is not None else None
        if due is not None:
            t.fire_timer = self._timeline.at(due, self._fire, t, priority=Priority.DEADLINE)

    def fired(self, key: Hashable) -> None:
        """A deadline that fires itself expired (posted by its runtime at the instant)."""
        t = self._open.get(key)
        if t is not None:
            self._fire(t)

    def _fire(self, t: RLTry) -> None:
        t.fire_timer = None
        d = t.deadline
        assert d is not None
        state = self._state_when(t.runs)
        self._registry.fire(d.key)
        self._rec.deadline_fired(t, state)
        self.end(t, state_when_fired=state)
        self._on_fired(t, rollout_timeout(d.budget_s))
