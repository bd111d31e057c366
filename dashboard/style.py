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
OPEN_OUTLINE = "#6b7785"  # the dashed outline of a bar still open at now
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

# generation engines (dashboard/engine_lanes.py): a request served, one mostly queued, and what
# a scrape of the engine's /metrics said it was doing
ENGINE_REQUEST = "#72b7b2"
ENGINE_QUEUED = WARN
ENGINE_STATE_COLORS: dict[str, str] = {
    "idle": "#d5dbe1",
    "serving": "#96c7b8",
    "backlog": WARN,
    "preempting": ERROR,
    "unread": NEUTRAL,
}


def outcome_color(outcome: object) -> str:
    return OUTCOME_COLORS.get(str(outcome), NEUTRAL)


def shard_color(state: object) -> str:
    return SHARD_COLORS.get(str(state), NEUTRAL)


# lane plot geometry: a lane is at least MIN_LANE_PX tall and at most MAX_LANE_PX; a plot of few
# lanes grows its lanes to fill TARGET_PLOT_HEIGHT_PX; one of many is as tall as its lanes need
# and scrolls past MAX_VISIBLE_PLOT_PX (the x axis stays below the visible lanes)
LANE_HEIGHT_PX = 18
MIN_LANE_PX = 13
MAX_LANE_PX = 34
TARGET_PLOT_HEIGHT_PX = 420
PLOT_CHROME_PX = 64  # x axis, its label and the frame's borders
MIN_PLOT_HEIGHT_PX = 150
MAX_PLOT_HEIGHT_PX = 2400
MAX_VISIBLE_PLOT_PX = 760
LABEL_WIDTH_CHARS = 30
GAUGE_HEIGHT_PX = 170
SERVING_HEIGHT_PX = 140


def lane_plot_height(lanes: int) -> int:
    """Pixels for a lane plot of ``lanes`` lanes: lanes fill the height, never thinner than
    MIN_LANE_PX or fatter than MAX_LANE_PX."""
    px = min(max(TARGET_PLOT_HEIGHT_PX / max(lanes, 1), MIN_LANE_PX), MAX_LANE_PX)
    return int(min(max(lanes * px + PLOT_CHROME_PX, MIN_PLOT_HEIGHT_PX), MAX_PLOT_HEIGHT_PX))
