"""Built-in scenarios: each reproduces an incident pattern with its source's numbers.

The patterns, their sources and which scenario reproduces which are in docs/domain/incidents.md.

Each builder's docstring cites its source and the numbers it uses. ``get(name)`` returns a
validated ``Scenario``; ``names()`` lists them in the order ``rolloutscope scenario list`` prints.
"""

from __future__ import annotations

from collections.abc import Callable

from rolloutscope.replay.errors import UnknownScenarioError
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.scenarios import fleet, incidents

_BUILDERS: dict[str, Callable[[], Scenario]] = {
    "snapshot-outlasts-deadline": incidents.snapshot_outlasts_deadline,
    "lost-reply": incidents.lost_reply,
    "prepare-blocked-by-streaming": incidents.prepare_blocked_by_streaming,
    "worker-lost-in-commit": incidents.worker_lost_in_commit,
    "lease-expiry": incidents.lease_expiry,
    "healthy-baseline": incidents.healthy_baseline,
    "scale-16k": incidents.scale_16k,
    "chaos-kill-idle": fleet.chaos_kill_idle,
    "chaos-kill-serving": fleet.chaos_kill_serving,
    "two-shard-failover": fleet.two_shard_failover,
    "hung-weight-sync": fleet.hung_weight_sync,
    "wedged-engine": fleet.wedged_engine,
    "retry-504-storm": fleet.retry_504_storm,
    "stale-weights-serving": fleet.stale_weights_serving,
    "fleet-exhausted": fleet.fleet_exhausted,
    "demo": fleet.demo,
}


def names() -> tuple[str, ...]:
    return tuple(_BUILDERS)


def get(name: str) -> Scenario:
    builder = _BUILDERS.get(name)
    if builder is None:
        raise UnknownScenarioError(name, names())
    return builder()


def summary(name: str) -> str:
    doc = (_BUILDERS[name].__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""
