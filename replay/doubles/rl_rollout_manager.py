"""Stand-in for ``_Deadline`` of NVIDIA-NeMo/RL ``nemo_rl/experience/rollout_manager.py`` at
7ea279a: an ``asyncio.timeout`` on the running loop's clock whose expiry is re-raised as
``RolloutTimeout("<description> exceeded <seconds>s")``; a ``TimeoutError`` of the body itself
passes through untouched; ``seconds=None`` disables it. It cannot be suspended."""

from __future__ import annotations

import asyncio
from typing import Optional

from rolloutscope.replay.doubles.rl_failures import RolloutTimeout


class _Deadline:
    def __init__(self, seconds: Optional[float], description: str) -> None:
        self._seconds = seconds
        self._description = description
        self._timeout: Optional[asyncio.Timeout] = None

    async def __aenter__(self) -> "_Deadline":
        self._timeout = asyncio.timeout(self._seconds)
        await self._timeout.__aenter__()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> Optional[bool]:
        assert self._timeout is not None
        try:
            return await self._timeout.__aexit__(exc_type, exc, tb)
        except TimeoutError as expired:
            if not self._timeout.expired():
                raise
            raise RolloutTimeout(f"{self._description} exceeded {self._seconds}s") from expired
