"""Stand-in for ``EpisodeId`` of NVIDIA-NeMo/Gym ``nemo_gym/episode_types.py`` at 05bf55a: one
physical attempt of a logical rollout. Keyword-only and frozen, as the pydantic model is; the
rollout id must match ``^[A-Za-z0-9][A-Za-z0-9._-]*$`` and must not end in the reserved
``-a<N>`` suffix that ``capture_key`` appends for attempts after the first."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

_ROLLOUT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ATTEMPT_SUFFIX = re.compile(r"-a([1-9][0-9]*)$")


@dataclass(frozen=True, kw_only=True, order=True)
class EpisodeId:
    rollout_id: str
    attempt: int = 0

    def __post_init__(self) -> None:
        if not _ROLLOUT_ID.match(self.rollout_id) or _ATTEMPT_SUFFIX.search(self.rollout_id):
            raise ValueError(f"invalid rollout_id {self.rollout_id!r}")
        if self.attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {self.attempt}")

    @property
    def capture_key(self) -> str:
        return self.rollout_id if self.attempt == 0 else f"{self.rollout_id}-a{self.attempt}"

    @classmethod
    def from_capture_key(cls, capture_key: str) -> "EpisodeId":
        match = _ATTEMPT_SUFFIX.search(capture_key)
        if match is None:
            return cls(rollout_id=capture_key)
        return cls(rollout_id=capture_key[:match.start()], attempt=int(match.group(1)))

    def model_copy(self, *, update: dict[str, Any]) -> "EpisodeId":
        return replace(self, **update)
