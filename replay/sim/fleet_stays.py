"""Fleet-health calls and the shard stays they move: every call the simulation makes on the
fleet-health model goes through ``call``, and each transition it causes ends one stay of the
shard and opens the next.

A model with the reference model's observer hook reports its transitions itself; one without it
(``real.rl_fleet.RealFleetHealth`` built without an observer) has them derived by diffing
``snapshot()`` against the last one seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rolloutscope.vocabulary import ShardState, ShardTrigger
from rolloutscope.replay.participants.fleet_health import Transition
from rolloutscope.replay.sim.engines import Engine
from rolloutscope.replay.sim.fleet_recorder import FleetRecorder
from rolloutscope.replay.sim.ports import FleetHealthModel


class ShardStays:
    def __init__(self, *, engines: list[Engine], recorder: FleetRecorder) -> None:
        self._engines = engines
        self._rec = recorder
        self._pending: list[Transition] = []
        self._observed = False
        self._last_states: dict[int, ShardState] = {}
        self.health: Any = None

    def on_transition(self, transition: Transition) -> None:
        """The observer handed to the fleet-health model."""
        self._pending.append(transition)

    def adopt(self, health: FleetHealthModel) -> None:
        """The model was just built: its announcements (if any) say whether it observes."""
        self.health = health
        self._observed = bool(self._pending)  # the reference model announces each shard

    def open_initial(self) -> None:
        """The engines start with the trainer's initial weights, version 0: one stay each."""
        for e in self._engines:
            self.health.report_refit(e.idx, 0)
        self._pending.clear()
        for shard in self.shards():
            self._open(shard, None, ShardTrigger.INITIAL)

    # -- reading the model ------------------------------------------------------------------------
    def shards(self) -> tuple[Any, ...]:
        return tuple(self.health.snapshot().shards)

    def counts(self) -> dict[ShardState, int]:
        counts = dict.fromkeys(ShardState, 0)
        for shard in self.shards():
            counts[ShardState(str(shard.state))] += 1
        return counts

    def known(self, idx: int) -> bool:
        return idx in self._last_states

    # -- calling it -------------------------------------------------------------------------------
    def call(self, trigger: ShardTrigger, op: Callable[..., Any], *args: Any) -> set[int]:
        """One fleet-health call; its transitions become stays and events. Returns the shards
        that moved."""
        op(*args)
        moved: set[int] = set()
        if self._observed:
            pending, self._pending = self._pending, []
            for t in pending:
                self._close_and_open(t.shard, t.previous_state, t.trigger)
                moved.add(t.shard)
            return moved
        # a model without an observer hook: diff its snapshot against the last one seen
        for shard in self.shards():
            state = ShardState(str(shard.state))
            previous = self._last_states.get(shard.dp_shard_idx)
            if previous is not state:
                self._close_and_open(shard.dp_shard_idx, previous, trigger)
                moved.add(shard.dp_shard_idx)
        return moved

    def restay(self, idx: int) -> None:
        """A refit that keeps a shard in its state starts a new stay, so each stay carries the
        weights it served with (what the stale-weights check compares)."""
        self._close_and_open(idx, self._last_states[idx], ShardTrigger.REFIT)

    def _close_and_open(self, idx: int, previous: ShardState | None,
                        trigger: ShardTrigger) -> None:
        shard = next(s for s in self.shards() if s.dp_shard_idx == idx)
        self._rec.stay_ended(idx)
        self._open(shard, previous, trigger)

    def _open(self, shard: Any, previous: ShardState | None, trigger: ShardTrigger) -> None:
        idx = shard.dp_shard_idx
        state = ShardState(str(shard.state))
        self._last_states[idx] = state
        self._rec.stay_opened(shard, state, previous, trigger, url=self._engines[idx].url,
                              epoch=self.health.membership_epoch)
