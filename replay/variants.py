"""Variant switches: each known fix from the seeds, named, off by default.

The reference models reproduce the systems the seeds describe; a variant turns one proposed fix
on so a replay can show the difference. Off by default because the seeds' systems lacked them.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from rolloutscope.replay.errors import UnknownVariantError


class Variant(StrEnum):
    # seed 004's proposal: suspend rollout deadlines while a Gym snapshot holds admission, with a
    # counted holder so a snapshot ending during a training switch does not restart clocks early
    PAUSE_DEADLINES_DURING_SNAPSHOT = "pause-deadlines-during-snapshot"
    # the registry counts holders and resumes only when the last one lets go (seed 004, §4.2);
    # without it a second suspend() is a no-op and any resume() restarts every live deadline
    COUNTED_DEADLINE_HOLDERS = "counted-deadline-holders"
    # the lost-reply fix: retire an abandoned attempt, and adopt (ACK) it when Gym answers that
    # the run already completed, so no finished result is stranded un-ACKed
    RETIRE_THEN_ADOPT = "retire-then-adopt"
    # the newer model gate: a new policy call at closed admission waits for resume instead of
    # being refused with 409 admission_closed
    CALLS_WAIT_AT_CLOSED_ADMISSION = "calls-wait-at-closed-admission"


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
