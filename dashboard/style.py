"""Colours and sizes shared by every plot and view, in one place.

The palette is chosen for a dark-on-light second screen: outcomes that need attention (error,
fired, dead, failed) are the only saturated warm colours, healthy states are muted, and anything
still open is drawn in the same colour as its kind with a hatch so it reads as "not finished".
"""

from __future__ import annotations

OK = "#4c9a6a"
ERROR = "#d1495b"
WARN = "#e8a33d"
OPEN = "#7a8fa6"
NEUTRAL = "#9aa5b1"
INFO = "#5b7db1"
PARKED = "#8e6bbf"
STALL = "#d1495b"
EVIDENCE = "#111111"
INCIDENT_SPAN = "#f2c14e"

# checkpoint operation / window outcomes
OUTCOME_COLORS: dict[str, str] = {
    "ok": OK, "committed": OK, "completed": OK, "published": OK, "finished": OK,
    "error": ERROR, "failed": ERROR, "fired": ERROR, "raised": ERROR,
    "aborted": WARN, "cancelled": WARN, "skipped": WARN,
    "open": OPEN,
}

# generation shard states (docs/domain/fleet-health.md#states-and-the-serving-set): serving
# states muted, out-of-service ones loud
SHARD_COLORS: dict[str, str] = {
    "healthy": "#7fb08f",
    "suspect": WARN,
    "dead": ERROR,
    "restarting": INFO,
    "stale": "#b07aa1",
    "retired": NEUTRAL,
}

SEVERITY_COLORS: dict[str, str] = {"critical": ERROR, "warning": WARN, "info": INFO}

ROLLOUT_RUNNING = "#a8bfd6"


def outcome_color(outcome: object) -> str:
    return OUTCOME_COLORS.get(str(outcome), NEUTRAL)


def shard_color(state: object) -> str:
    return SHARD_COLORS.get(str(state), NEUTRAL)


# lane plot geometry
LANE_HEIGHT_PX = 16
MIN_PLOT_HEIGHT_PX = 260
MAX_PLOT_HEIGHT_PX = 1400
LABEL_WIDTH_CHARS = 28
