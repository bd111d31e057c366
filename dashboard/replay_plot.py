"""Before/after timelines of a capture and its replay: pure frames -> Bokeh figures.

Rule: the input is what ``rolloutscope.store.run_reads`` returns (``timeline_frames``: rows of
run, lane, kind, label, start_s, end_s, outcome on one simulated-time axis; ``incident_frame``:
incidents with their matching key), nothing here reads a store. Both sides are drawn on the same
lanes in the same order, so a rollout sits on the same row before and after and the eye compares
straight down; the view puts both on one x range, so a zoom on one moves the other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.core.properties import field
from bokeh.plotting import figure

from rolloutscope.dashboard import style
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard.timeline_plot import short_label
from rolloutscope.store import run_reads

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
TIME_LABEL = "time since each run's start (s)"
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
        "color": np.array([_color(k, lb, o) for k, lb, o in zip(f.kind, f.label, f.outcome)],
                          dtype=object),
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


def replay_marks(frame: pd.DataFrame, lanes: tuple[str, ...]) -> pd.DataFrame:
    """Every instant in one frame, each row with its kind's marker, size and colours
    (``INSTANT_STYLE``), kinds in that order (later ones on top)."""
    parts = []
    for kind, points in replay_instants(frame, lanes).items():
        st = INSTANT_STYLE[kind]
        parts.append(points.assign(marker=st["marker"], size=float(st["size"]),
                                   fill=st.get("fill_color", st.get("color")),
                                   line=st.get("line_color", st.get("color")),
                                   line_width=float(st.get("line_width", 1.0))))
    return pd.concat(parts, ignore_index=True)


def replay_timeline(frame: pd.DataFrame, lanes: tuple[str, ...], **kw) -> figure:
    """One side's timeline as a figure (``replay_layers``)."""
    return tf.render(replay_layers(frame, lanes, **kw))


def replay_layers(frame: pd.DataFrame, lanes: tuple[str, ...], *, title: str,
                  xlim: tuple[float, float], highlight: tuple[float, float] | None = None
                  ) -> tf.Plot:
    """One side's timeline; the same layers in the same order whatever the data:
    ``highlight`` (the selected incident's instant), ``intervals``, ``marks``."""
    top, bottom = 0.5, -len(lanes) + 0.5
    ticks = [-float(i) + 0.0 for i in range(len(lanes))]
    n = 1 if highlight else 0
    hl = pd.DataFrame({"t_replay": [highlight[0]] * n if n else [], "y": [bottom] * n,
                       "t_end": [highlight[1]] * n if n else [], "y_top": [top] * n},
                      dtype="float64")
    quad = dict(left="t_replay", right="t_end", bottom="y", top="y_top")
    return tf.Plot(
        height=style.lane_plot_height(len(lanes)) + 24,  # and the title
        xlim=xlim, ylim=(bottom, top), xlabel=TIME_LABEL, title=title,
        lanes=[(t, short_label(lane)) for t, lane in zip(ticks, lanes)], layers=[
            tf.Layer("highlight", "quad", tf.columns(hl),
                     dict(quad, color=style.INCIDENT_SPAN, alpha=0.25, line_alpha=0)),
            tf.Layer("intervals", "quad", tf.columns(replay_rects(frame, lanes, end_s=xlim[1])),
                     dict(quad, fill_color=field("color"), line_color="white", line_width=0.5),
                     TOOLTIPS, follow_mouse=True),
            tf.Layer("marks", "scatter", tf.columns(replay_marks(frame, lanes)),
                     dict(x="t_replay", y="y", marker=field("marker"), size=field("size"),
                          fill_color=field("fill"), line_color=field("line"),
                          line_width=field("line_width")), MARK_TOOLTIPS)])


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
    """The store's verdict table (``run_reads.incident_verdicts`` over the
    ``run_reads.incident_frame`` rows of each side) as the Replay tab shows it: one summary, the
    side the incident was seen on."""
    v = run_reads.incident_verdicts(before, after)
    return pd.DataFrame({
        "status": v.status, "kind": v.kind, "subject": v.key_subject,
        "before (s)": v.start_s_a, "after (s)": v.start_s_b,
        "summary": [b if status == "appeared" else a
                    for status, a, b in zip(v.status, v.summary_a, v.summary_b, strict=True)]},
        columns=VERDICT_COLUMNS)
