"""Stand-in for NVIDIA-NeMo/RL ``nemo_rl/experience/failures.py`` at 7ea279a: the rollout
failure hierarchy the deadline raises into (infra failures are retried, data failures are
not)."""

from __future__ import annotations


class RolloutFailure(Exception):
    pass


class RolloutInfraFailure(RolloutFailure):
    pass


class RolloutTimeout(RolloutInfraFailure):
    pass
