"""Each incident kind's known fix, and a captured run replayed with the fixes for its incidents.

``FIXES`` maps an incident kind to the variants that remove it (the table "Fixes as replay
variants" in docs/domain/incidents.md); kinds with no fix to switch (a stall behind a hung weight
sync, a quarantine, which is the fleet doing its job) have none. ``replay_fixes`` replays a
captured run once per fix its incidents call for, and once with all of them when there are
several, into the same store as new runs whose ``parent_run_id`` is the capture: what the
dashboard's Replay tab compares, and what ``rolloutscope demo`` writes after its live run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rolloutscope.replay.replay_capture import (
    ReplayOptions,
    ReplayRunResult,
    capture_from_store,
    iter_replays,
)
from rolloutscope.replay.variants import Variant
from rolloutscope.store import RunStore

FIXES: dict[str, tuple[Variant, ...]] = {
    "deadline_fired_while_parked": (Variant.PAUSE_DEADLINES_DURING_SNAPSHOT,
                                    Variant.COUNTED_DEADLINE_HOLDERS),
    "stranded_completion": (Variant.RETIRE_THEN_ADOPT,),
    "prepare_blocked": (Variant.CALLS_WAIT_AT_CLOSED_ADMISSION,),
    "wedged_backend": (Variant.SEPARATE_REPORTED_FAILURE_STREAK,),
    "retry_storm": (Variant.ROUTER_500_NOT_504,),
    "redispatch_exhausted": (Variant.FLEET_HEALTH_ENABLED,),
}


@dataclass(frozen=True)
class FixPlan:
    """One replay to run: the variants, and the incident kinds they are meant to remove."""

    variants: tuple[str, ...]
    kinds: tuple[str, ...]


def fix_plans(kinds: Iterable[str]) -> tuple[list[FixPlan], list[str]]:
    """The replays that fix these incident kinds (one per distinct fix, then all of them
    together when there is more than one), and the kinds no variant fixes."""
    seen = sorted(set(kinds))
    by_fix: dict[tuple[str, ...], list[str]] = {}
    for kind in seen:
        if kind in FIXES:
            by_fix.setdefault(tuple(v.value for v in FIXES[kind]), []).append(kind)
    plans = [FixPlan(v, tuple(k)) for v, k in by_fix.items()]
    if len(plans) > 1:
        every = tuple(dict.fromkeys(v for p in plans for v in p.variants))
        plans.append(FixPlan(every, tuple(k for p in plans for k in p.kinds)))
    return plans, [k for k in seen if k not in FIXES]


def replay_fixes(store: RunStore, run_id: str, plans: Iterable[FixPlan]
                 ) -> Iterator[tuple[FixPlan, ReplayRunResult]]:
    """Replay ``run_id`` of ``store`` (open for writing) once per plan into the same store,
    yielding each result as it lands. No determinism re-run: a fix replay is compared with its
    capture, and the engine's determinism is pinned by its own tests."""
    capture = capture_from_store(store, run_id)
    for plan in plans:
        for result in iter_replays([capture], out=store, variants=plan.variants,
                                   options=ReplayOptions(check_determinism=False)):
            yield plan, result
