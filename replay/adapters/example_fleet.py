"""An example fleet-health plug-in: a stand-alone class with only the real public API.

``GenerationFleetHealth`` here is a minimal re-implementation written the way the real one is
used (docs/domain/fleet-health.md): the same method names and meanings, its own state enum and shard
record, no observer hook, no snapshot, nothing of rolloutscope imported. It is what a user's
real class looks like to the replayer, and ``make_fleet_health`` is the factory a user writes
for one: it receives the keyword arguments it names and builds the class unchanged.

    rolloutscope replay RUN.duckdb --out NEW.duckdb \\
        --participant fleet_health=rolloutscope.replay.adapters.example_fleet:make_fleet_health
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any


class ShardState(str, Enum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    DEAD = "dead"
    RESTARTING = "restarting"
    STALE = "stale"
    RETIRED = "retired"


SERVING = (ShardState.HEALTHY, ShardState.SUSPECT)


class GenerationFleetExhausted(RuntimeError):
    pass


@dataclass
class ShardHealth:
    dp_shard_idx: int
    base_url: str | None
    state: ShardState = ShardState.HEALTHY
    consecutive_probe_failures: int = 0
    consecutive_probe_successes: int = 0
    consecutive_reported_failures: int = 0
    restart_attempts: int = 0
    weight_version: int | None = None
    last_ok_at: float | None = None
    last_error: str | None = None


class GenerationFleetHealth:
    def __init__(self, *, unhealthy_threshold: int, healthy_threshold: int,
                 max_restart_attempts_per_shard: int, min_healthy_shards: int,
                 base_urls: Sequence[str], clock: Callable[[], float]) -> None:
        self._t, self._h = unhealthy_threshold, healthy_threshold
        self._max_restarts, self._min = max_restart_attempts_per_shard, min_healthy_shards
        self._clock = clock
        self._shards = [ShardHealth(i, url) for i, url in enumerate(base_urls)]
        self._epoch = 0

    @property
    def membership_epoch(self) -> int:
        return self._epoch

    def serving_shards(self) -> list[int]:
        return [s.dp_shard_idx for s in self._shards if s.state in SERVING]

    def shard(self, idx: int) -> ShardHealth:
        s = self._shards[idx]
        return ShardHealth(**vars(s))

    def shard_for_base_url(self, url: str) -> int | None:
        return next((s.dp_shard_idx for s in self._shards if s.base_url == url), None)

    def raise_if_exhausted(self) -> None:
        if len(self.serving_shards()) < self._min:
            raise GenerationFleetExhausted(
                f"only {len(self.serving_shards())} generation shard(s) serving, below "
                f"min_healthy_shards={self._min}")

    def record_probe(self, idx: int, ok: bool, error: Any = None) -> None:
        s = self._shards[idx]
        if s.state not in SERVING:
            return
        if ok:
            s.consecutive_probe_failures = 0
            s.consecutive_probe_successes += 1
            s.last_ok_at = self._clock()
            if s.state is ShardState.SUSPECT and s.consecutive_probe_successes >= self._h:
                self._move(s, ShardState.HEALTHY)
            return
        s.consecutive_probe_failures += 1
        s.consecutive_probe_successes = 0
        s.last_error = None if error is None else str(error)
        self._failed(s)

    def report_failure(self, idx: int, error: Any = None) -> None:
        s = self._shards[idx]
        if s.state not in SERVING:
            return
        s.consecutive_reported_failures += 1
        s.consecutive_probe_successes = 0
        s.last_error = None if error is None else str(error)
        self._failed(s)

    def report_success(self, idx: int) -> None:
        s = self._shards[idx]
        if s.state in SERVING:
            s.consecutive_reported_failures = 0

    def mark_restarting(self, idx: int) -> None:
        s = self._shards[idx]
        if s.state is ShardState.RETIRED:
            return
        s.restart_attempts += 1
        if s.restart_attempts > self._max_restarts:
            s.last_error = "restart attempts exhausted"
            self._move(s, ShardState.RETIRED)
        elif s.state is not ShardState.RESTARTING:
            self._move(s, ShardState.RESTARTING)

    def mark_loaded(self, idx: int) -> None:
        s = self._shards[idx]
        if s.state not in (ShardState.RETIRED, ShardState.STALE):
            self._move(s, ShardState.STALE)

    def report_refit(self, idx: int, weight_version: int) -> None:
        s = self._shards[idx]
        if s.state not in (*SERVING, ShardState.STALE):
            return
        s.weight_version = weight_version
        s.consecutive_probe_failures = s.consecutive_probe_successes = 0
        s.consecutive_reported_failures = 0
        if s.state is not ShardState.HEALTHY:
            self._move(s, ShardState.HEALTHY)

    def retire(self, idx: int, reason: str) -> None:
        s = self._shards[idx]
        if s.state is not ShardState.RETIRED:
            s.last_error = reason
            self._move(s, ShardState.RETIRED)

    def _failed(self, s: ShardHealth) -> None:
        if max(s.consecutive_probe_failures, s.consecutive_reported_failures) >= self._t:
            self._move(s, ShardState.DEAD)
        elif s.state is ShardState.HEALTHY:
            self._move(s, ShardState.SUSPECT)

    def _move(self, s: ShardHealth, to: ShardState) -> None:
        if (s.state in SERVING) != (to in SERVING):
            self._epoch += 1
        s.state = to


def make_fleet_health(*, num_shards: int, config: Any, clock: Callable[[], float],
                      base_urls: Sequence[str]) -> GenerationFleetHealth:
    """The factory ``--participant fleet_health=...`` names: builds the class unchanged."""
    if len(base_urls) != num_shards:
        raise ValueError(f"{len(base_urls)} base URLs for {num_shards} shards")
    return GenerationFleetHealth(
        unhealthy_threshold=config.unhealthy_threshold,
        healthy_threshold=config.healthy_threshold,
        max_restart_attempts_per_shard=config.max_restart_attempts_per_shard,
        min_healthy_shards=config.min_healthy_shards, base_urls=base_urls, clock=clock)
