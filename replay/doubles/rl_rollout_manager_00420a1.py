"""Stand-in for ``RequestDeadlineRegistry`` and the registry-aware ``_Deadline`` of
NVIDIA-NeMo/RL ``nemo_rl/experience/rollout_manager.py`` at 00420a1 (a branch; not on main).

The registry holds the live deadlines and one suspended flag: ``suspend`` banks every live
deadline's remaining budget and disarms it, ``resume`` re-arms it with what was banked; a second
``suspend`` is a no-op and the first ``resume`` re-arms everything (no holder counting). A
deadline registers after entering its timeout and leaves before exiting it; one added while the
registry is suspended starts suspended."""

from __future__ import annotations

import asyncio
from typing import Optional

from rolloutscope.replay.doubles.rl_failures import RolloutTimeout


class RequestDeadlineRegistry:
    def __init__(self) -> None:
        self._live: set["_Deadline"] = set()
        self.suspended = False

    def add(self, deadline: "_Deadline") -> None:
        self._live.add(deadline)
        if self.suspended:
            deadline.suspend()

    def discard(self, deadline: "_Deadline") -> None:
        self._live.discard(deadline)

    def suspend(self) -> None:
        if not self.suspended:
            self.suspended = True
            for deadline in list(self._live):
                deadline.suspend()

    def resume(self) -> None:
        if self.suspended:
            self.suspended = False
            for deadline in list(self._live):
                deadline.resume()


class _Deadline:
    def __init__(self, seconds: Optional[float], description: str,
                 registry: Optional[RequestDeadlineRegistry] = None) -> None:
        self._seconds = seconds
        self._description = description
        self._registry = registry
        self._timeout: Optional[asyncio.Timeout] = None
        self._remaining: Optional[float] = None

    async def __aenter__(self) -> "_Deadline":
        self._timeout = asyncio.timeout(self._seconds)
        await self._timeout.__aenter__()
        if self._registry is not None:
            self._registry.add(self)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> Optional[bool]:
        assert self._timeout is not None
        if self._registry is not None:
            self._registry.discard(self)
        try:
            return await self._timeout.__aexit__(exc_type, exc, tb)
        except TimeoutError as expired:
            if not self._timeout.expired():
                raise
            raise RolloutTimeout(f"{self._description} exceeded {self._seconds}s") from expired

    def suspend(self) -> None:
        scope = self._timeout
        if scope is None or self._remaining is not None or scope.expired() or scope.when() is None:
            return
        self._remaining = max(0.0, scope.when() - asyncio.get_running_loop().time())
        scope.reschedule(None)

    def resume(self) -> None:
        if self._timeout is None or self._remaining is None:
            return
        self._timeout.reschedule(asyncio.get_running_loop().time() + self._remaining)
        self._remaining = None
