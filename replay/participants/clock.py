"""The clock participants read: injected, never the wall clock."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the start of the run."""
        ...


class ManualClock:
    """A clock that moves only when told to: the engine's virtual clock and the tests' clock."""

    __slots__ = ("t",)

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        if dt < 0:
            raise ValueError("a clock does not go backwards")
        self.t += dt

    def set(self, t: float) -> None:
        if t < self.t:
            raise ValueError(f"a clock does not go backwards ({t} < {self.t})")
        self.t = t
