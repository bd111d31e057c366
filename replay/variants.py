"""Variant switches: each known fix, named, off unless a scenario or a replay turns it on.

The reference models reproduce the systems the upstream sources describe; a variant turns one
fix on so a replay can show the difference (the table in docs/domain/incidents.md, "Fixes as
replay variants"). A scenario lists the fixes its system already had (``Scenario.fixes``):
NVIDIA-NeMo/RL #3590's merged system has all four fleet fixes (``MERGED_FLEET_FIXES``), so
its scenarios carry them and reproduce a pre-fix behaviour by leaving one out, while the
checkpoint scenarios (NVIDIA-NeMo/RL #4266, NVIDIA-NeMo/Gym #3883) carry none. A replay adds
variants to a scenario's fixes or takes them away.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from rolloutscope.replay.errors import UnknownVariantError


class Variant(StrEnum):
    # RL #4266's fix (proposed): suspend rollout deadlines while a snapshot holds admission, with a
    # counted holder so a snapshot ending during a training switch does not restart clocks early
    PAUSE_DEADLINES_DURING_SNAPSHOT = "pause-deadlines-during-snapshot"
    # the registry counts holders and resumes only when the last one lets go (RL #4266, P1);
    # without it a second suspend() is a no-op and any resume() restarts every live deadline
    COUNTED_DEADLINE_HOLDERS = "counted-deadline-holders"
    # the lost-reply fix (RL #4266's stack): retire an abandoned attempt, and adopt (ACK) it when
    # Gym answers that the run already completed, so no finished result is stranded un-ACKed
    RETIRE_THEN_ADOPT = "retire-then-adopt"
    # the newer model gate (Gym #3883): a new policy call at closed admission waits for resume
    # instead of being refused with 409 admission_closed
    CALLS_WAIT_AT_CLOSED_ADMISSION = "calls-wait-at-closed-admission"
    # RL #3590: generation fleet health with its router (probes, quarantine, least-outstanding
    # routing, membership pushes); without it Gym round-robins over a fixed backend list
    FLEET_HEALTH_ENABLED = "fleet-health-enabled"
    # RL #3590: reported failures keep their own streak, which only a successful generation or
    # a refit clears; without it each good probe wipes them and a wedged engine never condemns
    SEPARATE_REPORTED_FAILURE_STREAK = "separate-reported-failure-streak"
    # RL #3590: a failed backend call is a deliberate 500 with a local drop and a counted
    # failure; without it aiohttp answers a backend timeout with 504, which Gym retries for ever
    ROUTER_500_NOT_504 = "router-500-not-504"
    # RL #3590: probes run every probe_interval_s; without it they ride the 30 s watchdog tick
    # (detection at unhealthy_threshold x 30 s = 60-90 s)
    PROBE_AT_PROBE_INTERVAL = "probe-at-probe-interval"


    @property
    def changes(self) -> frozenset[str]:
        """The incident kinds this fix can remove or move, directly or through what follows
        from them; a replay with it on must reproduce every other kind its capture had."""
        return CHANGES[self]


# what follows a stranded completion: later snapshot prepares wait behind it (each until
# prepare_timeout_s), the rollouts those snapshots park outlive their deadlines, and nothing
# commits meanwhile (a stall)
_STRANDED_AND_AFTER = frozenset({"stranded_completion", "prepare_blocked",
                                 "deadline_fired_while_parked", "stall"})
# what follows a generation fleet's health: which shards are quarantined and when, the rows a
# dead or wedged backend fails, the retries they cause, and the stall when none can serve
_FLEET = frozenset({"quarantine", "wedged_backend", "retry_storm", "redispatch_exhausted",
                    "router_fleet_divergence", "stale_weights_serving", "stall"})

CHANGES: dict[Variant, frozenset[str]] = {
    # a deadline that does not fire while parked gives up no try, so none finishes un-ACKed
    Variant.PAUSE_DEADLINES_DURING_SNAPSHOT: _STRANDED_AND_AFTER,
    Variant.COUNTED_DEADLINE_HOLDERS: _STRANDED_AND_AFTER,
    Variant.RETIRE_THEN_ADOPT: _STRANDED_AND_AFTER | {"late_retired_attempt"},
    Variant.CALLS_WAIT_AT_CLOSED_ADMISSION: _STRANDED_AND_AFTER,
    Variant.FLEET_HEALTH_ENABLED: _FLEET,
    Variant.SEPARATE_REPORTED_FAILURE_STREAK: frozenset({"wedged_backend", "quarantine",
                                                         "redispatch_exhausted"}),
    # a counted failure can condemn the backend; a 504 Gym retries for ever cannot
    Variant.ROUTER_500_NOT_504: frozenset({"retry_storm", "wedged_backend", "quarantine"}),
    # probes at their own interval find a dead or wedged shard sooner
    Variant.PROBE_AT_PROBE_INTERVAL: frozenset({"quarantine", "wedged_backend",
                                                "redispatch_exhausted"}),
}


MERGED_FLEET_FIXES: frozenset[Variant] = frozenset({
    Variant.FLEET_HEALTH_ENABLED, Variant.SEPARATE_REPORTED_FAILURE_STREAK,
    Variant.ROUTER_500_NOT_504, Variant.PROBE_AT_PROBE_INTERVAL})


def parse_variants(names: Iterable[str]) -> frozenset[Variant]:
    known = tuple(v.value for v in Variant)
    out = set()
    for name in names:
        try:
            out.add(Variant(name))
        except ValueError:
            raise UnknownVariantError(name, known) from None
    return frozenset(out)


def ordered(variants: Iterable[Variant]) -> tuple[str, ...]:
    """Variant names in declaration order, for records that must not depend on set order."""
    chosen = set(variants)
    return tuple(v.value for v in Variant if v in chosen)
