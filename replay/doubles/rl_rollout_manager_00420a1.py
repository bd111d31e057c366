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
        self._scope: Optional[asyncio.Timeout] = None
        self._banked: Optional[float] = None

    async def __aenter__(self) -> "_Deadline":
        self._scope = asyncio.timeout(self._seconds)
        await self._scope.__aenter__()
        if self._registry is not None:
            self._registry.add(self)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> Optional[bool]:
        assert self._scope is not None
        if self._registry is not None:
            self._registry.discard(self)
        try:
            return await self._scope.__aexit__(exc_type, exc, tb)
        except TimeoutError as expired:
            if not self._scope.expired():
                raise
            raise RolloutTimeout(f"{self._description} exceeded {self._seconds}s") from expired

    def suspend(self) -> None:
        scope = self._scope
        if scope is None or self._banked is not None or scope.expired() or scope.when() is None:
            return
        self._banked = max(0.0, scope.when() - asyncio.get_running_loop().time())
        scope.reschedule(None)

    def resume(self) -> None:
        if self._scope is None or self._banked is None:
            return
        self._scope.reschedule(asyncio.get_running_loop().time() + self._banked)
        self._banked = None
