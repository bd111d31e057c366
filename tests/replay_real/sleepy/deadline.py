"""A user's patched deadline that sleeps in wall time while entering (test input)."""

import time

from rolloutscope.replay.doubles.rl_rollout_manager import _Deadline


class SleepyDeadline(_Deadline):
    async def __aenter__(self):
        time.sleep(0.5)
        return await super().__aenter__()


class CrashingDeadline(_Deadline):
    async def __aenter__(self):
        raise RuntimeError("registry not configured")
