"""The proposed fix for a snapshot that outlasts a rollout deadline, as a user would plug it.

NVIDIA-NeMo/RL #4266: while a Gym snapshot holds admission closed, a parked rollout cannot make
progress, yet its ``_Deadline`` keeps ticking and fires. The proposal: suspend live rollout
deadlines while the snapshot holds admission, with **counted holders**, so a snapshot ending
while a colocated engine is still training does not restart the training switch's clocks early
(RL's ``RequestDeadlineRegistry`` of 00420a1 keeps one flag: the first ``resume`` re-arms
everything).

``CountedRequestDeadlineRegistry`` is that registry. It works with any ``_Deadline`` that takes a
``registry`` and has ``suspend()``/``resume()`` (RL 00420a1's). RL main's ``_Deadline`` has
neither, so the registry also carries the patch that gives it both (``patch``), which the replay
applies when the plugged deadline class takes no registry::

    rolloutscope replay RUN.duckdb --out FIXED.duckdb --variant pause-deadlines-during-snapshot \\
        --participant deadline=nemo_rl \\
        --participant deadline_registry=rolloutscope.replay.examples.counted_deadlines:CountedRequestDeadlineRegistry

(``--variant pause-deadlines-during-snapshot`` is the controller's half: it suspends the
registry when the snapshot closes admission and resumes it when admission reopens.)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Optional


class CountedRequestDeadlineRegistry:
    """Live deadlines, suspended while any holder holds them."""

    def __init__(self) -> None:
        self._live: set[Any] = set()
        self._holders: Counter[str] = Counter()

    @property
    def suspended(self) -> bool:
        return sum(self._holders.values()) > 0

    @property
    def holders_count(self) -> int:
        return sum(self._holders.values())

    def add(self, deadline: Any) -> None:
        self._live.add(deadline)
        if self.suspended:
            deadline.suspend()

    def discard(self, deadline: Any) -> None:
        self._live.discard(deadline)

    def suspend(self, holder: str = "default") -> None:
        first = not self.suspended
        self._holders[holder] += 1
        if first:
            for deadline in list(self._live):
                deadline.suspend()

    def resume(self, holder: str = "default") -> None:
        if self._holders[holder] <= 0:
            raise RuntimeError(f"resume by {holder!r} without a matching suspend")
        self._holders[holder] -= 1
        if not self.suspended:
            for deadline in list(self._live):
                deadline.resume()

    @staticmethod
    def patch(deadline_cls: type) -> type:
        """RL main's ``_Deadline`` with a registry: it registers after entering its timeout,
        leaves before exiting, and banks its remaining budget while suspended."""

        class RegisteredDeadline(deadline_cls):  # type: ignore[misc, valid-type]
            def __init__(self, seconds: Optional[float], description: str,
                         registry: Optional[CountedRequestDeadlineRegistry] = None) -> None:
                super().__init__(seconds, description)
                self._registry = registry
                self._remaining: Optional[float] = None

            async def __aenter__(self) -> Any:
                entered = await super().__aenter__()
                if self._registry is not None:
                    self._registry.add(self)
                return entered

            async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Optional[bool]:
                if self._registry is not None:
                    self._registry.discard(self)
                return await super().__aexit__(exc_type, exc, tb)

            def suspend(self) -> None:
                timeout = self._timeout  # the asyncio.Timeout RL's _Deadline keeps
                if timeout is None or self._remaining is not None or timeout.expired() \
                        or timeout.when() is None:
                    return
                self._remaining = max(0.0, timeout.when() - asyncio.get_running_loop().time())
                timeout.reschedule(None)

            def resume(self) -> None:
                if self._timeout is None or self._remaining is None:
                    return
                self._timeout.reschedule(asyncio.get_running_loop().time() + self._remaining)
                self._remaining = None

        RegisteredDeadline.__qualname__ = f"{deadline_cls.__qualname__}+registry"
        RegisteredDeadline.__module__ = __name__
        return RegisteredDeadline
