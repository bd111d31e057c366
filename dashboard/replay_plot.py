"""Before/after timelines of a capture and its replay: pure frames -> HoloViews builders.

Rule: the input is what ``rolloutscope.store.runs`` returns (``timeline_frames``: rows of
run, lane, kind, label, start_s, end_s, outcome on one simulated-time axis; ``incident_frame``:
incidents with their matching key), nothing here reads a store. Both sides are drawn on the same
lanes in the same order, so a rollout sits on the same row before and after and the eye compares
straight down; the time axis is named ``t_replay`` so Panel links the two plots with each other
and with nothing on the other tabs.
"""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd

from rolloutscope.dashboard import style
from rolloutscope.dashboard.timeline_plot import frame_hook, short_label, text_columns
from rolloutscope.store import runs

HALF = 0.38
MAX_ROLLOUT_LANES = 30
FIXED_LANES = ("snapshots", "incidents")
INTERVAL_KINDS = ("try", "parked", "snapshot", "shard_state")
INSTANT_STYLE = {
    "deadline_fired": {"marker": "x", "color": style.ERROR, "size": 13, "line_width": 3},
    "completion": {"marker": "circle", "color": "#2f6f8f", "size": 8},
    "unacknowledged": {"marker": "circle", "fill_color": "white", "line_color": style.ERROR,
                       "line_width": 2.5, "size": 11},
    "incident": {"marker": "inverted_triangle", "color": style.WARN, "size": 12},
}
TIME = hv.Dimension("t_replay", label="time since each run's start (s)")
Y = "y_replay"  # the y dimension, named apart from every other tab's (Panel links by name)
TOOLTIPS = [("lane", "@lane"), ("", "@what"), ("", "@detail"), ("from (s)", "@t_replay{0,0.0}"),
            ("to (s)", "@t_end{0,0.0}")]
MARK_TOOLTIPS = [("lane", "@lane"), ("", "@what"), ("", "@detail"), ("at (s)", "@t_replay{0,0.0}")]
VERDICT_COLUMNS = ["status", "kind", "subject", "before (s)", "after (s)", "summary"]


def replay_lanes(before: pd.DataFrame, after: pd.DataFrame,
                 cap: int = MAX_ROLLOUT_LANES) -> tuple[tuple[str, ...], int]:
    """Lanes both sides draw: snapshots, shards, rollouts, incidents; and how many rollout
    lanes there were before the cap. Rollouts where something happened come first (a fired
    deadline, a parked stay, an unacknowledged completion, a failed try, on either side: what a
    fix changes), then the rest, first seen first."""
    rows = pd.concat([before, after], ignore_index=True)
    rows = rows[rows.lane.notna()]
    first = rows.groupby("lane").start_s.min().sort_values(kind="stable")
    shards = sorted((lane for lane in first.index if lane.startswith("shard ")),
                    key=lambda s: (len(s), s))
    rollouts = [lane for lane in first.index
                if lane not in FIXED_LANES and not lane.startswith("shard ")]
    eventful = rows[rows.kind.isin(["deadline_fired", "parked"])
                    | (rows.kind.eq("completion") & rows.outcome.eq("unacknowledged"))
                    | (rows.kind.eq("try") & rows.outcome.isin(["failed", "cancelled"]))]
    marked = set(eventful.lane)
    ordered = [lane for lane in rollouts if lane in marked] + \
              [lane for lane in rollouts if lane not in marked]
    return ("snapshots", *shards, *ordered[:cap], "incidents"), len(rollouts)


def _color(kind: str, label: str, outcome: object) -> str:
    if kind == "parked":
        return style.PARKED
    if kind == "shard_state":
        return style.shard_color(label)
    if kind == "try" and outcome == "committed":
        return style.ROLLOUT_RUNNING
    return style.outcome_color("open" if outcome is None or pd.isna(outcome) else outcome)


def replay_rects(frame: pd.DataFrame, lanes: tuple[str, ...], *, end_s: float) -> pd.DataFrame:
    """One bar per interval row on a known lane; open intervals reach ``end_s``."""
    y = {lane: -float(i) for i, lane in enumerate(lanes)}
    f = frame[frame.kind.isin(INTERVAL_KINDS) & frame.lane.isin(y) & frame.start_s.notna()]
    ends = pd.to_numeric(f.end_s, errors="coerce").fillna(end_s).to_numpy(dtype="float64")
    mid = f.lane.map(y).to_numpy(dtype="float64")
    half = np.where(f.kind.eq("parked"), HALF / 2, HALF)
    return pd.DataFrame({
        "t_replay": f.start_s.to_numpy(dtype="float64"), "y": mid - half, "t_end": ends,
        "y_top": mid + half,
        "color": [_color(k, lb, o) for k, lb, o in zip(f.kind, f.label, f.outcome)],
        "lane": f.lane.astype(str).to_numpy(), "what": f.label.astype(str).to_numpy(),
        "detail": f.outcome.fillna("open").astype(str).to_numpy()})


def replay_instants(frame: pd.DataFrame, lanes: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    """Instants by marker kind: fired deadlines, completions (unacknowledged apart), incidents."""
    y = {lane: -float(i) for i, lane in enumerate(lanes)}
    f = frame[frame.lane.isin(y) & frame.start_s.notna()]
    marker = np.where(f.kind.eq("completion") & f.outcome.eq("unacknowledged"),
                      "unacknowledged", f.kind)
    out = {}
    for kind in INSTANT_STYLE:
        g = f[marker == kind]
        out[kind] = pd.DataFrame({
            "t_replay": g.start_s.to_numpy(dtype="float64"),
            "y": g.lane.map(y).to_numpy(dtype="float64"),
            "lane": g.lane.astype(str).to_numpy(), "what": g.label.astype(str).to_numpy(),
            "detail": g.outcome.fillna("").astype(str).to_numpy()})
    return out


def replay_timeline(frame: pd.DataFrame, lanes: tuple[str, ...], *, title: str,
                    xlim: tuple[float, float], highlight: tuple[float, float] | None = None
                    ) -> hv.Overlay:
    """One side's timeline; the same layers in the same order whatever the data."""
    top, bottom = 0.5, -len(lanes) + 0.5
    common = dict(xlim=xlim, ylim=(bottom, top), framewise=True)
    kd = [TIME, Y, "t_end", "y_top"]
    n = 1 if highlight else 0
    hl = pd.DataFrame({"t_replay": [highlight[0]] * n if n else [], Y: [bottom] * n,
                       "t_end": [highlight[1]] * n if n else [], "y_top": [top] * n},
                      dtype="float64")
    layers = [
        hv.Rectangles(hl, kd, group="Highlight", label="selected incident").opts(
            color=style.INCIDENT_SPAN, alpha=0.25, line_alpha=0, **common),
        hv.Rectangles(text_columns(replay_rects(frame, lanes, end_s=xlim[1])
                                   .rename(columns={"y": Y})), kd,
                      ["color", "lane", "what", "detail"], group="Intervals").opts(
            color="color", line_color="white", line_width=0.5, tools=["hover"],
            hover_tooltips=TOOLTIPS, **common)]
    for kind, points in replay_instants(frame, lanes).items():
        layers.append(hv.Points(text_columns(points.rename(columns={"y": Y})), [TIME, Y],
                                ["lane", "what", "detail"], label=kind.replace("_", " ")).opts(
            tools=["hover"], hover_tooltips=MARK_TOOLTIPS, **INSTANT_STYLE[kind], **common))
    h = style.lane_plot_height(len(lanes)) + 24  # and the title
    return hv.Overlay(layers).opts(hv.opts.Overlay(
        title=title, yticks=[(-float(i), short_label(lane)) for i, lane in enumerate(lanes)],
        ylabel="", height=h, responsive=True, show_legend=False, show_grid=True,
        hooks=[frame_hook],
        fontsize={"yticks": "9pt", "xticks": "9pt", "title": "10pt"},
        active_tools=["xwheel_zoom", "xpan"],
        default_tools=["xpan", "xwheel_zoom", "xbox_zoom", "reset", "save"]))


REPLAY_KEY = [("try committed", "■", style.ROLLOUT_RUNNING), ("failed", "■", style.ERROR),
              ("parked", "■", style.PARKED), ("snapshot committed", "■", style.OK),
              ("deadline fired", "✖", style.ERROR), ("completed", "●", "#2f6f8f"),
              ("completed, unacknowledged", "○", style.ERROR), ("incident", "▼", style.WARN)]


def span_of(before: pd.DataFrame, after: pd.DataFrame) -> tuple[float, float]:
    """The simulated-time range both sides cover."""
    times = pd.concat([before.start_s, before.end_s, after.start_s, after.end_s])
    times = pd.to_numeric(times, errors="coerce").dropna()
    return (0.0, max(float(times.max()), 1.0)) if len(times) else (0.0, 1.0)


def incident_verdicts(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """The store's verdict table (``runs.incident_verdicts`` over ``runs.incident_frame`` rows
    of each side) as the Replay tab shows it: one summary, the side the incident was seen on."""
    v = runs.incident_verdicts(before, after)
    return pd.DataFrame({
        "status": v.status, "kind": v.kind, "subject": v.key_subject,
        "before (s)": v.start_s_a, "after (s)": v.start_s_b,
        "summary": [b if status == "appeared" else a
                    for status, a, b in zip(v.status, v.summary_a, v.summary_b, strict=True)]},
        columns=VERDICT_COLUMNS)
