"""Stand-in for NVIDIA-NeMo/RL ``nemo_rl/models/generation/fleet_health.py`` at 7ea279a.

A pure per-shard state machine: probes and reported request failures move a shard
HEALTHY -> SUSPECT -> DEAD on two separate streaks (a wedged engine answers probes, so only a
successful generation clears the reported streak); a restart goes RESTARTING -> STALE and only
a completed refit brings a shard back to HEALTHY; RETIRED is terminal. Transitions are printed,
``membership_epoch`` counts changes of the serving set. Keyword-only constructor, keyword-only
``ok``/``weight_version``/``reason``, ``report_failure`` takes an exception.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Callable, Optional


class ShardState(str, enum.Enum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    DEAD = "dead"
    RESTARTING = "restarting"
    STALE = "stale"
    RETIRED = "retired"


SERVING = frozenset({ShardState.HEALTHY, ShardState.SUSPECT})


@dataclass
class ShardHealth:
    dp_shard_idx: int
    base_url: Optional[str] = None
    state: ShardState = ShardState.HEALTHY
    consecutive_probe_failures: int = 0
    consecutive_probe_successes: int = 0
    consecutive_reported_failures: int = 0
    restart_attempts: int = 0
    weight_version: int = 0
    last_ok_at: float = 0.0
    last_error: str = ""

    @property
    def is_serving(self) -> bool:
        return self.state in SERVING


class GenerationFleetExhausted(RuntimeError):
    pass


@dataclass
class FleetHealthPolicy:
    unhealthy_threshold: int = 3
    healthy_threshold: int = 2
    max_restart_attempts_per_shard: int = 5
    min_healthy_shards: int = 1

    def __post_init__(self) -> None:
        if min(self.unhealthy_threshold, self.healthy_threshold, self.min_healthy_shards) < 1:
            raise ValueError(f"FleetHealthPolicy values must be >= 1: {self}")


class GenerationFleetHealth:
    def __init__(self, *, shard_count: int, policy: FleetHealthPolicy,
                 base_urls: Optional[list[Optional[str]]] = None,
                 clock: Optional[Callable[[], float]] = None) -> None:
        if shard_count < 1:
            raise ValueError(f"shard_count must be >= 1, got {shard_count}")
        if base_urls is not None and len(base_urls) != shard_count:
            raise ValueError(f"{len(base_urls)} base URLs for {shard_count} shards")
        self._now = clock or time.monotonic
        self._policy = policy
        urls = base_urls if base_urls is not None else [None] * shard_count
        self._shards = [ShardHealth(i, urls[i], last_ok_at=self._now())
                        for i in range(shard_count)]
        self._epoch = 0
        self._serving_set = frozenset(range(shard_count))

    # read side
    @property
    def membership_epoch(self) -> int:
        return self._epoch

    @property
    def shard_count(self) -> int:
        return len(self._shards)

    def snapshot(self) -> list[ShardHealth]:
        return list(self._shards)

    def serving_shards(self) -> list[int]:
        return [s.dp_shard_idx for s in self._shards if s.is_serving]

    def state_of(self, shard_idx: int) -> ShardState:
        return self._shards[shard_idx].state

    def serving_base_urls(self) -> list[str]:
        return [s.base_url for s in self._shards if s.is_serving and s.base_url]

    def counts_by_state(self) -> dict[ShardState, int]:
        counts = dict.fromkeys(ShardState, 0)
        for s in self._shards:
            counts[s.state] += 1
        return counts

    def as_metrics(self) -> dict[str, float]:
        out = {f"gen_fleet/shards/{k.value}": float(v) for k, v in self.counts_by_state().items()}
        out["gen_fleet/membership_epoch"] = float(self._epoch)
        out["gen_fleet/serving_shards"] = float(len(self.serving_shards()))
        for s in self._shards:
            out[f"gen_fleet/restart_attempts/{s.dp_shard_idx}"] = float(s.restart_attempts)
            out[f"gen_fleet/shard_weight_version/{s.dp_shard_idx}"] = float(s.weight_version)
        return out

    # write side
    def record_probe(self, shard_idx: int, *, ok: bool, error: str = "") -> None:
        s = self._shards[shard_idx]
        if not s.is_serving:
            return
        if ok:
            s.consecutive_probe_failures = 0
            s.consecutive_probe_successes += 1
            s.last_ok_at = self._now()
            if s.state is ShardState.SUSPECT and \
                    s.consecutive_probe_successes >= self._policy.healthy_threshold:
                self._move(s, ShardState.HEALTHY)
            return
        s.consecutive_probe_successes = 0
        s.consecutive_probe_failures += 1
        s.last_error = error
        self._failed(s, s.consecutive_probe_failures)

    def report_failure(self, shard_idx: int, error: BaseException) -> None:
        s = self._shards[shard_idx]
        if not s.is_serving:
            return
        s.consecutive_reported_failures += 1
        s.last_error = f"{type(error).__name__}: {error}"
        self._failed(s, s.consecutive_reported_failures)

    def report_success(self, shard_idx: int) -> None:
        self._shards[shard_idx].consecutive_reported_failures = 0

    def shard_for_base_url(self, url: str) -> Optional[int]:
        return next((s.dp_shard_idx for s in self._shards if s.base_url == url), None)

    def mark_restarting(self, shard_idx: int) -> None:
        s = self._shards[shard_idx]
        if s.state is ShardState.RETIRED:
            return
        s.restart_attempts += 1
        if s.restart_attempts > self._policy.max_restart_attempts_per_shard:
            self.retire(shard_idx, reason="restart attempts exhausted")
        else:
            self._move(s, ShardState.RESTARTING)

    def mark_loaded(self, shard_idx: int) -> None:
        s = self._shards[shard_idx]
        if s.state is not ShardState.RETIRED:
            self._move(s, ShardState.STALE)

    def report_refit(self, shard_idx: int, *, weight_version: int) -> None:
        s = self._shards[shard_idx]
        if s.state is ShardState.RETIRED:
            return
        s.weight_version = weight_version
        s.consecutive_probe_failures = s.consecutive_probe_successes = 0
        s.consecutive_reported_failures = 0
        s.last_ok_at = self._now()
        self._move(s, ShardState.HEALTHY)

    def retire(self, shard_idx: int, *, reason: str) -> None:
        s = self._shards[shard_idx]
        s.last_error = reason
        self._move(s, ShardState.RETIRED)

    def raise_if_exhausted(self) -> None:
        serving = len(self.serving_shards())
        if serving < self._policy.min_healthy_shards:
            counts = {k.value: v for k, v in self.counts_by_state().items() if v}
            raise GenerationFleetExhausted(
                f"only {serving} generation shard(s) serving, below min_healthy_shards="
                f"{self._policy.min_healthy_shards}; fleet state is {counts}")

    def _failed(self, s: ShardHealth, streak: int) -> None:
        if streak >= self._policy.unhealthy_threshold:
            self._move(s, ShardState.DEAD)
        elif s.state is ShardState.HEALTHY:
            self._move(s, ShardState.SUSPECT)

    def _move(self, s: ShardHealth, to: ShardState) -> None:
        if s.state is to:
            return
        was, s.state = s.state, to
        print(f"gen_fleet: shard {s.dp_shard_idx} {was.value} -> {to.value}"
              + (f" ({s.last_error})" if s.last_error else ""), flush=True)
        serving = frozenset(self.serving_shards())
        if serving != self._serving_set:
            self._serving_set = serving
            self._epoch += 1
