"""The two pieces of state that more than one side of the simulated system reads.

Everything else a side knows it holds itself, and everything it asks of another side goes
through that side's protocol (``ports``). These two are shared because in the real system they
are shared too, and because without them the sides would need each other to be built first:

- ``RunEnd``: the controller raised, and the run ends after the current event. The controller's
  own rollout loop raises, and so does the fleet's probe pump (``GenerationFleetExhausted``).
- ``PrepareWatch``: whether the snapshot transaction is waiting on a prepare. Gym's runs and the
  controller's ACKs move what a prepare waits on, so they say when they did.
"""

from __future__ import annotations

from collections.abc import Callable


class RunEnd:
    """The terminal controller error, once one is raised; the first error is the one that ends
    the run (the scheduler stops after the event that raised it)."""

    __slots__ = ("raised", "_stop")

    def __init__(self, *, stop: Callable[[], None]) -> None:
        self.raised: str | None = None
        self._stop = stop

    def raise_error(self, error: str) -> None:
        if self.raised is None:
            self.raised = error
        self._stop()


def _nobody() -> None:
    return None


class PrepareWatch:
    """Whether a snapshot prepare is under way, and whom to poke when Gym moves meanwhile."""

    __slots__ = ("preparing", "_poke")

    def __init__(self) -> None:
        self.preparing = False
        self._poke: Callable[[], None] = _nobody

    def watched_by(self, poke: Callable[[], None]) -> None:
        """The snapshot process registers how to re-check its prepare (once, when built)."""
        self._poke = poke

    def gym_changed(self) -> None:
        """A run, a stream or an ACK moved: a waiting prepare may be ready now."""
        if self.preparing:
            self._poke()
