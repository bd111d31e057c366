"""Rollout deadlines and the registry that suspends them.

See docs/domain/rollouts-and-deadlines.md#the-deadline-registry.

Rule: a deadline consumes its budget only while it is running; while suspended its due time is
undefined and it cannot fire. The registry suspends every live deadline for a holder (a colocated
engine switching to training; a Gym snapshot with the fix P1 needs).

RL's ``RequestDeadlineRegistry`` (NVIDIA-NeMo/RL #4265 / #4266) keeps a single on/off flag: a
second ``suspend`` is a no-op and any ``resume`` restarts every live deadline, so a snapshot that
ends while the engine is still training restarts the training switch's clocks early.
``counted=True`` is the fix: holders are counted and clocks restart only when the last holder lets
go. The transition that must never exist: a suspended deadline firing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from enum import StrEnum

from rolloutscope.clock import Clock
from rolloutscope.vocabulary import DeadlineHolder, DeadlineOutcome, DeadlineKind
from rolloutscope.replay.errors import ModelInvariantError


class DeadlineState(StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"
    DONE = "done"


class Deadline:
    """One ``_Deadline``: a budget over the guarded work, minus the time spent suspended."""

    __slots__ = ("key", "kind", "budget_s", "started_at", "state", "outcome", "suspended_s",
                 "_used_s", "_since", "version", "ended_at")

    def __init__(self, key: Hashable, *, kind: DeadlineKind, budget_s: float, now: float,
                 suspended: bool = False) -> None:
        self.key = key
        self.kind = kind
        self.budget_s = budget_s
        self.started_at = now
        self.state = DeadlineState.SUSPENDED if suspended else DeadlineState.RUNNING
        self.outcome: DeadlineOutcome | None = None
        self.suspended_s = 0.0
        self._used_s = 0.0  # budget consumed before the current stretch began
        self._since = now  # start of the current running or suspended stretch
        self.version = 0  # bumps whenever due_at() changes, so a stale timer is recognisable
        self.ended_at: float | None = None

    def remaining_s(self, now: float) -> float:
        used = self._used_s + (now - self._since if self.state is DeadlineState.RUNNING else 0.0)
        return self.budget_s - used

    def due_at(self) -> float | None:
        """When it fires if nothing changes; None while suspended or done."""
        if self.state is not DeadlineState.RUNNING:
            return None
        return self._since + (self.budget_s - self._used_s)

    def _suspend(self, now: float) -> None:
        if self.state is DeadlineState.RUNNING:
            self._used_s += now - self._since
            self._since = now
            self.state = DeadlineState.SUSPENDED
            self.version += 1

    def _resume(self, now: float) -> None:
        if self.state is DeadlineState.SUSPENDED:
            self.suspended_s += now - self._since
            self._since = now
            self.state = DeadlineState.RUNNING
            self.version += 1

    def _finish(self, now: float, outcome: DeadlineOutcome) -> None:
        if self.state is DeadlineState.SUSPENDED:
            self.suspended_s += now - self._since
        elif self.state is DeadlineState.RUNNING:
            self._used_s += now - self._since
        self._since = now
        self.state = DeadlineState.DONE
        self.outcome = outcome
        self.ended_at = now
        self.version += 1


@dataclass(frozen=True, slots=True)
class HolderChange:
    """What a suspend/resume call did: which deadlines changed state, and the holder count."""

    holder: DeadlineHolder
    holders_count: int
    changed: tuple[Deadline, ...]


class DeadlineRegistry:
    """``RequestDeadlineRegistry``: add/discard/suspend/resume over live deadlines."""

    def __init__(self, clock: Clock, *, counted: bool) -> None:
        self._clock = clock
        self.counted = counted
        self._live: dict[Hashable, Deadline] = {}
        self._holders: Counter[DeadlineHolder] = Counter()
        self._flag = False

    @property
    def suspended(self) -> bool:
        return sum(self._holders.values()) > 0 if self.counted else self._flag

    @property
    def holders_count(self) -> int:
        return sum(self._holders.values()) if self.counted else int(self._flag)

    def live(self) -> tuple[Deadline, ...]:
        return tuple(self._live.values())

    def add(self, key: Hashable, *, kind: DeadlineKind, budget_s: float) -> Deadline:
        if key in self._live:
            raise ModelInvariantError(f"deadline {key!r} is already live")
        # a deadline created while the registry is suspended starts suspended: its work cannot
        # progress while the holder has admission closed either
        d = Deadline(key, kind=kind, budget_s=budget_s, now=self._clock.now(),
                     suspended=self.suspended)
        self._live[key] = d
        return d

    def _take(self, key: Hashable) -> Deadline:
        d = self._live.pop(key, None)
        if d is None:
            raise ModelInvariantError(f"deadline {key!r} is not live")
        return d

    def complete(self, key: Hashable) -> Deadline:
        d = self._take(key)
        d._finish(self._clock.now(), DeadlineOutcome.COMPLETED)
        return d

    def cancel(self, key: Hashable) -> Deadline:
        d = self._take(key)
        d._finish(self._clock.now(), DeadlineOutcome.CANCELLED)
        return d

    def fire(self, key: Hashable) -> Deadline:
        """Fire a deadline whose budget is spent. Firing a suspended one is a model bug."""
        d = self._live.get(key)
        if d is None or d.state is not DeadlineState.RUNNING:
            raise ModelInvariantError(f"deadline {key!r} cannot fire: it is not running")
        now = self._clock.now()
        if d.remaining_s(now) > 1e-9:
            raise ModelInvariantError(f"deadline {key!r} fired with {d.remaining_s(now)}s left")
        del self._live[key]
        d._finish(now, DeadlineOutcome.FIRED)
        return d

    def suspend(self, holder: DeadlineHolder) -> HolderChange:
        now = self._clock.now()
        if self.counted:
            first = self.holders_count == 0
            self._holders[holder] += 1
        else:
            first = not self._flag  # RL's registry: a second suspend returns early
            self._flag = True
        changed = []
        if first:
            for d in self._live.values():
                d._suspend(now)
                changed.append(d)
        return HolderChange(holder, self.holders_count, tuple(changed))

    def resume(self, holder: DeadlineHolder) -> HolderChange:
        now = self._clock.now()
        if self.counted:
            if self._holders[holder] <= 0:
                raise ModelInvariantError(f"resume by {holder} without a matching suspend")
            self._holders[holder] -= 1
            last = self.holders_count == 0
        else:
            last = self._flag  # RL's registry: resume restarts every live deadline
            self._flag = False
        changed = []
        if last:
            for d in self._live.values():
                d._resume(now)
                changed.append(d)
        return HolderChange(holder, self.holders_count, tuple(changed))
