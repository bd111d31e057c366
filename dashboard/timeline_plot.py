"""The timeline: pure DataFrame -> HoloViews builders for the lane plot and its step line.

Rule: nothing here queries, filters by user choice or reads a clock. The caller (the Timeline
view, the incident detail's mini timeline) hands over frames straight from the store's views,
already narrowed to the lanes it wants, plus ``t0_ns`` (the run's start, the x origin) and
``now_ns`` (the run's last seen time: where intervals still open are drawn to). The x axis is
seconds since the run started, the unit incident write-ups speak in ("the deadline fired at
180 s").

Every builder returns the same layers in the same order whatever the data, so a DynamicMap can
update the plot in place on a live tick instead of re-rendering it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import holoviews as hv
import numpy as np
import pandas as pd

from rolloutscope.dashboard import style

S = 1e9
RECT_COLUMNS = ["x0", "y0", "x1", "y1", "color", "lane", "what", "detail", "start_s", "end_s",
                "span_id"]
MARK_COLUMNS = ["x", "y", "lane", "what", "detail"]
HALF = 0.38  # half a lane's bar height


@dataclass(frozen=True)
class TimelineFrames:
    """The view rows a timeline draws (each a frame of the store view of the same name)."""

    checkpoint_windows: pd.DataFrame
    checkpoint_ops: pd.DataFrame
    shard_states: pd.DataFrame
    rollout_attempts: pd.DataFrame
    parked_intervals: pd.DataFrame
    deadlines: pd.DataFrame
    completions: pd.DataFrame
    incidents: pd.DataFrame
    rollout_ids: Sequence[str] = ()  # rollout lanes to draw, in order
    evidence: frozenset[str] = field(default_factory=frozenset)  # span ids to outline


def group_rollout_ids(frame: pd.DataFrame, attempts: pd.DataFrame) -> pd.Series:
    """The RL prompt group's rollout id for each row of a Gym-side frame (parked intervals,
    completions). Gym names each row's execution (``p7-0``), RL the group (``p7``); rows and
    their group share ``prompt_idx``, so a row draws on its group's lane."""
    if not len(frame) or "prompt_idx" not in frame or not len(attempts):
        return frame["rollout_id"] if "rollout_id" in frame else pd.Series(dtype="object")
    groups = (attempts.dropna(subset=["prompt_idx"]).drop_duplicates("prompt_idx")
              .set_index("prompt_idx").rollout_id)
    return frame.prompt_idx.map(groups).fillna(frame.rollout_id)


@dataclass(frozen=True)
class Lanes:
    labels: tuple[str, ...]

    def y(self, label: str) -> float:
        return -float(self.labels.index(label))

    @property
    def ticks(self) -> list[tuple[float, str]]:
        return [(-float(i), label) for i, label in enumerate(self.labels)]


def _sec(ns: pd.Series | np.ndarray, t0_ns: int) -> np.ndarray:
    return (np.asarray(ns, dtype="float64") - t0_ns) / S


def _ends(df: pd.DataFrame, now_ns: int, col: str = "end_ns") -> np.ndarray:
    """End times with open intervals (NULL end) drawn up to now."""
    ends = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return ends.fillna(float(now_ns)).to_numpy()


def participant_label(kind: object, instance: object) -> str:
    kind = str(kind) if kind is not None and not pd.isna(kind) else "participant"
    if instance is None or pd.isna(instance) or instance == "":
        return kind
    return f"{kind} {instance}"


def shard_label(idx: object) -> str:
    return f"shard {int(idx)}"


def rollout_label(rollout_id: object, attempt: object = None) -> str:
    if attempt is None or pd.isna(attempt):
        return f"{rollout_id}"
    return f"{rollout_id} try {int(attempt)}"


def attempt_label(r) -> str:
    """An attempt's lane: a Gym rollout attempt by the id Gym gave it (``0-0-a1``), an RL try
    as ``<rollout> try <n>``."""
    if getattr(r, "dialect", None) == "gym" and isinstance(getattr(r, "capture_key", None), str):
        return r.capture_key
    return rollout_label(r.rollout_id, r.attempt)


def lanes_for(frames: TimelineFrames) -> Lanes:
    labels: list[str] = ["checkpoint windows"]
    ops = frames.checkpoint_ops
    if len(ops):
        order = {"controller": 0, "environment": 1, "model": 2, "agent": 3, "resources": 4}
        parts = ops[["participant_kind", "instance"]].drop_duplicates()
        parts = parts.assign(
            _o=parts.participant_kind.map(order).fillna(9),
            _i=parts.instance.fillna("").astype(str)).sort_values(["_o", "_i"])
        labels += [participant_label(k, i) for k, i in zip(parts.participant_kind,
                                                           parts.instance)]
    if len(frames.shard_states):
        labels += [shard_label(i) for i in sorted(frames.shard_states.shard_idx.dropna().unique())]
    order = {str(r): i for i, r in enumerate(frames.rollout_ids)}
    cols = ["rollout_id", "attempt", "dialect", "capture_key"]
    tries = pd.concat([df.reindex(columns=cols) for df in (
        frames.rollout_attempts, frames.parked_intervals, frames.deadlines, frames.completions)
        if len(df)] or [pd.DataFrame({c: [] for c in cols})]).drop_duplicates()
    tries = tries[tries.rollout_id.astype(str).isin(order)]
    tries = tries.assign(_o=tries.rollout_id.astype(str).map(order),
                         _a=tries.attempt.fillna(-1)).sort_values(["_o", "_a"])
    labels += [attempt_label(r) for r in tries.itertuples(index=False)]
    return Lanes(tuple(dict.fromkeys(labels)))


def _rects(x0, x1, y, color, lane, what, detail, start_s, end_s, span_id) -> pd.DataFrame:
    y = np.asarray(y, dtype="float64")
    return pd.DataFrame({
        "x0": x0, "y0": y - HALF, "x1": x1, "y1": y + HALF, "color": color, "lane": lane,
        "what": what, "detail": detail, "start_s": start_s, "end_s": end_s,
        "span_id": span_id})


def _fmt_end(end_s: np.ndarray, is_open: np.ndarray) -> list[str]:
    return ["open" if o else f"{e:,.1f}" for e, o in zip(end_s, is_open)]


def interval_rects(frames: TimelineFrames, lanes: Lanes, t0_ns: int,
                   now_ns: int) -> pd.DataFrame:
    """One row per bar on the lane plot; ``end_s`` is the text 'open' for open intervals."""
    parts: list[pd.DataFrame] = []

    def add(df: pd.DataFrame, lane_of, color_of, what_of, detail_of) -> None:
        if not len(df):
            return
        lane = [lane_of(r) for r in df.itertuples(index=False)]
        keep = np.array([label in lanes.labels for label in lane])
        if not keep.any():
            return
        df = df[keep]
        lane = [label for label, k in zip(lane, keep) if k]
        rows = list(df.itertuples(index=False))
        x0 = _sec(df.start_ns, t0_ns)
        x1 = _sec(_ends(df, now_ns), t0_ns)
        is_open = df.end_ns.isna().to_numpy()
        parts.append(_rects(
            x0, x1, [lanes.y(label) for label in lane], [color_of(r) for r in rows], lane,
            [what_of(r) for r in rows], [detail_of(r) for r in rows], np.round(x0, 3),
            _fmt_end(x1, is_open), df.get("span_id", pd.Series([""] * len(df))).fillna("")
            .astype(str).to_numpy()))

    w = frames.checkpoint_windows
    if len(w):
        w = w.assign(span_id="window:" + w.checkpoint_id.astype(str))
    add(w, lambda r: "checkpoint windows", lambda r: style.outcome_color(r.outcome),
        lambda r: f"checkpoint {r.checkpoint_id}", lambda r: f"window {r.outcome}")
    add(frames.checkpoint_ops, lambda r: participant_label(r.participant_kind, r.instance),
        lambda r: style.outcome_color("open" if r.outcome is None or pd.isna(r.outcome)
                                      else r.outcome),
        lambda r: f"{r.op} {r.checkpoint_id}",
        lambda r: _op_detail(r))
    add(frames.shard_states, lambda r: shard_label(r.shard_idx),
        lambda r: style.shard_color(r.state), lambda r: f"{r.state}",
        lambda r: f"trigger {r.trigger or '-'}, epoch {_int(r.membership_epoch)}"
                  + (f", error {r.last_error}" if _present(r.last_error) else ""))
    att = frames.rollout_attempts
    add(att, attempt_label,
        lambda r: style.ROLLOUT_RUNNING if r.outcome in ("open", "committed", "finished")
        else style.outcome_color(r.outcome),
        lambda r: (f"Gym rollout {r.capture_key} {r.outcome}"
                   if getattr(r, "dialect", None) == "gym"
                   else f"try {_int(r.attempt)} {r.outcome}"),
        lambda r: (f"{r.failure_class}: {r.failure_reason}" if _present(r.failure_class)
                   else f"group {r.group_id}" if _present(r.group_id) else ""))
    n_before = len(parts)
    add(frames.parked_intervals, lambda r: rollout_label(r.rollout_id, r.attempt),
        lambda r: style.PARKED, lambda r: f"try {_int(r.attempt)} parked",
        lambda r: f"by checkpoint {r.checkpoint_id}")
    if len(parts) > n_before:  # parked bars sit inside the try's bar, which stays visible
        y = (parts[-1].y0 + parts[-1].y1) / 2
        parts[-1] = parts[-1].assign(y0=y - HALF / 2, y1=y + HALF / 2)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c[0] in "xy" else "object")
                             for c in RECT_COLUMNS})
    return pd.concat(parts, ignore_index=True)


def _present(v: object) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v)) and v is not pd.NA


def _int(v: object) -> str:
    return "-" if not _present(v) else str(int(v))


def _op_detail(r) -> str:
    out = "running" if not _present(r.outcome) else str(r.outcome)
    if _present(r.code):
        out += f" ({r.code})"
    if _present(r.blockers) and r.blockers:
        out += f", {int(r.blockers)} blockers"
    return out


def instants(frames: TimelineFrames, lanes: Lanes, t0_ns: int) -> dict[str, pd.DataFrame]:
    """Instants on rollout lanes: deadline start / fire, completion, ACK."""
    out: dict[str, list] = {k: [] for k in MARKER_STYLE}
    d = frames.deadlines
    for r in d.itertuples(index=False):
        lane = rollout_label(r.rollout_id, r.attempt)
        if lane not in lanes.labels:
            continue
        y = lanes.y(lane)
        out["deadline start"].append(((r.start_ns - t0_ns) / S, y, lane,
                                      f"{r.kind} deadline, budget {r.budget_s:g} s",
                                      f"try {_int(r.attempt)}"))
        if _present(r.fired_ns):
            out["deadline fired"].append(((r.fired_ns - t0_ns) / S, y, lane, "deadline fired",
                                          f"while {r.state_when_fired or 'unknown'}"))
    for r in frames.completions.itertuples(index=False):
        lane = rollout_label(r.rollout_id, r.attempt)
        if lane not in lanes.labels:
            continue
        y = lanes.y(lane)
        kind = "completed" if _present(r.ack_ns) else "completed, unacknowledged"
        out[kind].append(((r.completed_ns - t0_ns) / S, y, lane, kind,
                          f"try {_int(r.attempt)}"))
        if _present(r.ack_ns):
            out["acknowledged"].append(((r.ack_ns - t0_ns) / S, y, lane, "acknowledged",
                                        f"try {_int(r.attempt)}"))
    return {k: pd.DataFrame(v, columns=MARK_COLUMNS).astype({"x": "float64", "y": "float64"})
            for k, v in out.items()}


def shaded_periods(incidents: pd.DataFrame, kinds: Iterable[str], t0_ns: int,
                   now_ns: int) -> pd.DataFrame:
    """x-intervals of incidents of the given kinds (stalls), open ones to now."""
    inc = incidents[incidents.kind.isin(list(kinds))]
    return pd.DataFrame({
        "x0": _sec(inc.start_ns, t0_ns), "x1": _sec(_ends(inc, now_ns), t0_ns),
        "what": inc.kind.astype(str).to_numpy(), "detail": inc.summary.astype(str).to_numpy()})


RECT_TOOLTIPS = [("lane", "@lane"), ("", "@what"), ("", "@detail"), ("from (s)", "@start_s"),
                 ("to (s)", "@end_s")]
MARK_TOOLTIPS = [("lane", "@lane"), ("", "@what"), ("", "@detail"), ("at (s)", "@t{0,0.0}")]

MARKER_STYLE = {
    "deadline start": {"marker": "triangle", "color": "#3d3d3d", "size": 8},
    "deadline fired": {"marker": "x", "color": style.ERROR, "size": 13, "line_width": 3},
    "completed": {"marker": "circle", "color": "#2f6f8f", "size": 8},
    "completed, unacknowledged": {"marker": "circle", "fill_color": "white",
                                  "line_color": style.ERROR, "line_width": 2.5, "size": 11},
    "acknowledged": {"marker": "diamond", "color": style.OK, "size": 10},
}


def _span_rects(periods: pd.DataFrame, y0: float, y1: float) -> pd.DataFrame:
    return periods.assign(y0=y0, y1=y1)[["x0", "y0", "x1", "y1", "what", "detail"]]


def lane_plot(frames: TimelineFrames, *, t0_ns: int, now_ns: int,
              xlim: tuple[float, float] | None = None,
              highlight: tuple[float, float] | None = None,
              height: int | None = None, markers: bool = True) -> hv.Overlay:
    """The lane plot: windows, participants, shards and rollouts on one time axis.

    Layers, bottom to top: shaded stalls, the highlighted incident span, closed bars, open bars
    (faded, dashed outline), evidence outlines, then one marker layer per instant kind.
    """
    lanes = lanes_for(frames)
    rects = interval_rects(frames, lanes, t0_ns, now_ns)
    is_open = rects.end_s.eq("open")
    top, bottom = 0.5, -len(lanes.labels) + 0.5
    stalls = _span_rects(shaded_periods(frames.incidents, ["stall"], t0_ns, now_ns), bottom, top)
    hl = pd.DataFrame({"x0": [highlight[0]] if highlight else [],
                       "x1": [highlight[1]] if highlight else [],
                       "what": ["selected incident"] if highlight else [],
                       "detail": [""] if highlight else []})
    hl = _span_rects(hl, bottom, top)
    evid = rects[rects.span_id.isin(frames.evidence)] if frames.evidence else rects.iloc[:0]
    span = (0.0, max((now_ns - t0_ns) / S, 1.0))
    xlim = xlim or span
    ylim = (bottom, top)
    # named like the serving plot's axis, so a Layout links their x-ranges
    kdims = [hv.Dimension("t", label="time since run start (s)"), "y", "t_end", "y_top"]
    rects, stalls, hl, evid = (_axes(df) for df in (rects, stalls, hl, evid))
    common = dict(xlim=xlim, ylim=ylim, framewise=True)
    vd = ["color", "lane", "what", "detail", "start_s", "end_s", "span_id"]
    layers = [
        hv.Rectangles(stalls, kdims, ["what", "detail"], group="Stall", label="stall").opts(
            color=style.STALL, alpha=0.10, line_alpha=0, **common),
        hv.Rectangles(hl, kdims, ["what", "detail"], group="Highlight",
                      label="selected incident").opts(
            color=style.INCIDENT_SPAN, alpha=0.25, line_alpha=0, **common),
        hv.Rectangles(rects[~is_open], kdims, vd, group="Closed").opts(
            color="color", line_color="white", line_width=0.5, tools=["hover"],
            hover_tooltips=RECT_TOOLTIPS, **common),
        hv.Rectangles(rects[is_open], kdims, vd, group="Open").opts(
            color="color", fill_alpha=0.45, line_color="#6b7785", line_dash="dashed",
            line_width=1, tools=["hover"],
            hover_tooltips=RECT_TOOLTIPS, **common),
        hv.Rectangles(evid, kdims, vd, group="Evidence").opts(
            fill_alpha=0, line_color=style.EVIDENCE, line_width=2.5, **common),
    ]
    for kind, mk in (instants(frames, lanes, t0_ns).items() if markers else ()):
        layers.append(hv.Points(mk.rename(columns={"x": "t"}), ["t", "y"],
                                ["lane", "what", "detail"],
                                label=kind).opts(
            tools=["hover"], hover_tooltips=MARK_TOOLTIPS, **mk_style(kind), **common))
    h = height or int(np.clip(len(lanes.labels) * style.LANE_HEIGHT_PX + 90,
                              style.MIN_PLOT_HEIGHT_PX, style.MAX_PLOT_HEIGHT_PX))
    return hv.Overlay(layers).opts(
        hv.opts.Overlay(yticks=lanes.ticks, ylabel="", height=h, responsive=True,
                        legend_position="top", legend_cols=8, show_grid=True,
                        gridstyle={"ygrid_line_alpha": 0.0, "xgrid_line_alpha": 0.25},
                        fontsize={"yticks": "8pt", "xticks": "9pt", "legend": "8pt"},
                        active_tools=["xwheel_zoom", "xpan"],
                        default_tools=["xpan", "xwheel_zoom", "box_zoom", "reset", "save"]))


def _axes(df: pd.DataFrame) -> pd.DataFrame:
    return df.rename(columns={"x0": "t", "y0": "y", "x1": "t_end", "y1": "y_top"})


def focus_range(incident, frames: TimelineFrames, *, t0_ns: int, now_ns: int,
                pad: float = 0.12) -> tuple[float, float]:
    """The x-range that shows an incident: its own interval and every evidence bar, padded."""
    end = incident["end_ns"] if pd.notna(incident["end_ns"]) else now_ns
    lo, hi = (incident["start_ns"] - t0_ns) / S, (end - t0_ns) / S
    if frames.evidence:
        rects = interval_rects(frames, lanes_for(frames), t0_ns, now_ns)
        ev = rects[rects.span_id.isin(frames.evidence)]
        if len(ev):
            lo, hi = min(lo, float(ev.x0.min())), max(hi, float(ev.x1.max()))
    width = max(hi - lo, 10.0)
    return (max(lo - pad * width, 0.0) if lo >= 0 else lo - pad * width, hi + pad * width)


def mk_style(kind: str) -> dict:
    return dict(MARKER_STYLE[kind])


def serving_steps(shard_states: pd.DataFrame, *, t0_ns: int, now_ns: int) -> pd.DataFrame:
    """Serving shard count over time (a step function) from shard state stays.

    Each serving stay adds one at its start and removes one at its end; a stay still open
    counts up to now.
    """
    s = shard_states[shard_states.serving.fillna(False).astype(bool)]
    ups = pd.DataFrame({"ns": s.start_ns.astype("int64"), "d": 1})
    downs = pd.DataFrame({"ns": s.end_ns.dropna().astype("int64"), "d": -1})
    ev = pd.concat([ups, downs]).groupby("ns", as_index=False).d.sum().sort_values("ns")
    t = _sec(ev.ns, t0_ns)
    n = ev.d.cumsum().to_numpy()
    if len(t):
        t = np.append(t, (now_ns - t0_ns) / S)
        n = np.append(n, n[-1])
    return pd.DataFrame({"t": t, "serving": n.astype("float64")})


def serving_plot(shard_states: pd.DataFrame, *, t0_ns: int, now_ns: int,
                 xlim: tuple[float, float] | None = None,
                 router: pd.DataFrame | None = None, height: int = 130) -> hv.Overlay:
    """Serving shards (fleet) as a step line, with the router's serving backends if known and
    the fleet's total shard count as a dashed reference."""
    steps = serving_steps(shard_states, t0_ns=t0_ns, now_ns=now_ns)
    total = float(shard_states.shard_idx.nunique()) if len(shard_states) else 0.0
    span = (0.0, max((now_ns - t0_ns) / S, 1.0))
    xlim = xlim or span
    ymax = max(total, steps.serving.max() if len(steps) else 0.0,
               router.serving.max() if router is not None and len(router) else 0.0, 1.0)
    common = dict(xlim=xlim, ylim=(0, ymax * 1.15), framewise=True)  # legend sits outside
    tdim = hv.Dimension("t", label="time since run start (s)")
    rt = router if router is not None else pd.DataFrame({"t": [], "serving": []})
    layers = [
        hv.Curve(pd.DataFrame({"t": list(span), "serving": [total, total]}), tdim,
                 "serving", label="shards in fleet").opts(
            color=style.NEUTRAL, line_dash="dashed", line_width=1, **common),
        hv.Curve(steps, tdim, hv.Dimension("serving", label="serving"),
                 label="fleet serving shards").opts(
            interpolation="steps-post", color=style.OK, line_width=2, tools=["hover"],
            **common),
        hv.Curve(rt, tdim, "serving", label="router serving backends").opts(
            interpolation="steps-post", color=style.INFO, line_width=1.5, line_dash="dotdash",
            tools=["hover"], **common),
    ]
    return hv.Overlay(layers).opts(
        hv.opts.Overlay(height=height, responsive=True, legend_position="right",
                        legend_cols=1, fontsize={"legend": "8pt"}, show_grid=True,
                        ylabel="shards", default_tools=["xpan", "xwheel_zoom", "reset"]))
