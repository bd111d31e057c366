"""Pure DataFrame -> HoloViews builders for the Checkpoints, Fleet and Rollouts views.

Each takes frames as the store's views return them (plus the run's ``t0_ns`` where time is
drawn) and returns an element; tests compare the elements as data.
"""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd

from rolloutscope.dashboard import style
from rolloutscope.dashboard.timeline_plot import participant_label, text_columns

S = 1e9
PHASES = ("prepare", "commit", "restore", "resume")


def phase_durations(ops: pd.DataFrame) -> pd.DataFrame:
    """Per checkpoint and participant: seconds spent in each phase, blockers, worst outcome."""
    cols = ["checkpoint_id", "participant", *PHASES, "blockers", "outcome", "code"]
    if not len(ops):
        return pd.DataFrame(columns=cols)
    ops = ops.assign(participant=[_participant(k, i) for k, i in
                                  zip(ops.participant_kind, ops.instance)])
    # groupby, not pivot_table: an operation still running (no duration) keeps its row
    dur = ops.groupby(["checkpoint_id", "participant", "op"]).duration_s.max().unstack("op")
    dur = dur.reindex(columns=list(PHASES))
    g = ops.groupby(["checkpoint_id", "participant"])
    rank = {"error": 2, "open": 1, "ok": 0}
    worst = g.outcome.agg(lambda s: max(s.fillna("open"), key=lambda o: rank.get(o, 0)))
    codes = g.code.agg(lambda s: ", ".join(sorted(set(s.dropna().astype(str)))))
    out = dur.assign(blockers=g.blockers.max(), outcome=worst, code=codes).reset_index()
    out.columns.name = None
    first = ops.groupby("checkpoint_id").start_ns.min()
    out = out.assign(_t=out.checkpoint_id.map(first)).sort_values(["_t", "participant"])
    return out.drop(columns="_t")[cols].reset_index(drop=True)


def _participant(kind, instance) -> str:
    """``agent`` for an agent whose instance is ``agent`` too (not ``agent agent``): the
    timeline's label."""
    return participant_label(kind, instance)


def duration_distribution(ops: pd.DataFrame) -> hv.Overlay:
    """Prepare / commit / restore durations: a box per phase with every operation on top."""
    d = ops[ops.op.isin(["prepare", "commit", "restore"]) & ops.duration_s.notna()]
    d = pd.DataFrame({"op": d.op.astype(str), "duration_s": d.duration_s.astype("float64"),
                      "participant": [_participant(k, i) for k, i in
                                      zip(d.participant_kind, d.instance)],
                      "checkpoint_id": d.checkpoint_id.astype(str),
                      "outcome": d.outcome.fillna("open").astype(str)})
    order = [p for p in ("prepare", "commit", "restore")]
    op_dim = hv.Dimension("op", label="phase", values=order)
    val = hv.Dimension("duration_s", label="duration (s)")
    box = hv.BoxWhisker(d, op_dim, val).opts(box_fill_color=style.ROLLOUT_RUNNING, box_line_color="#5d6d7e",
                                             whisker_color="#5d6d7e", outlier_alpha=0)
    pts = hv.Scatter(d.assign(color=d.outcome.map(style.outcome_color)), op_dim,
                     [val, "participant", "checkpoint_id", "outcome", "color"]).opts(
        color="color", size=6, alpha=0.8, jitter=0.3, tools=["hover"])
    return (box * pts).opts(hv.opts.Overlay(height=260, responsive=True, show_grid=True,
                                            title="operation durations by phase"))


BACKEND_COLUMNS = ["backend", "calls", "errors", "rate-limited tries", "statuses",
                   "median (ms)", "max (ms)", "first (s)", "last (s)", "servers"]


def backend_summary(calls: pd.DataFrame, t0_ns: int) -> pd.DataFrame:
    """Per model backend (scheme://host:port) the model calls reached: how many, how many
    failed or were rate-limited, the statuses seen, latency, when, and from which servers."""
    c = calls[calls.backend.notna()] if len(calls) else calls
    if not len(c):
        return pd.DataFrame(columns=BACKEND_COLUMNS)
    rows = []
    for backend, g in c.groupby("backend", sort=True):
        latency = pd.to_numeric(g.backend_s.fillna(g.duration_s), errors="coerce") * 1e3
        statuses = g.http_status.dropna().astype(int).value_counts().sort_index()
        rows.append({
            "backend": str(backend), "calls": len(g),
            "errors": int((g.outcome == "error").sum()),
            "rate-limited tries": int(pd.to_numeric(g.rate_limited).fillna(0).sum()),
            "statuses": ", ".join(f"{k}×{v}" for k, v in statuses.items()),
            "median (ms)": round(float(latency.median()), 2) if latency.notna().any() else None,
            "max (ms)": round(float(latency.max()), 2) if latency.notna().any() else None,
            "first (s)": round((int(g.start_ns.min()) - t0_ns) / S, 3),
            "last (s)": round((int(g.start_ns.max()) - t0_ns) / S, 3),
            "servers": ", ".join(sorted(set(g.server_name.dropna().astype(str))
                                        or set(g.service.dropna().astype(str))))})
    return pd.DataFrame(rows, columns=BACKEND_COLUMNS)


def transitions_table(shards: pd.DataFrame, t0_ns: int) -> pd.DataFrame:
    """Fleet transitions: one row per shard state stay, in time order, with its trigger."""
    s = shards.sort_values(["start_ns", "shard_idx"])
    return pd.DataFrame({
        "t (s)": ((s.start_ns - t0_ns) / S).round(2).to_numpy(),
        "shard": s.shard_idx.astype("Int64").to_numpy(),
        "from": s.previous_state.fillna("").astype(str).to_numpy(),
        "to": s.state.astype(str).to_numpy(),
        "trigger": s.trigger.fillna("").astype(str).to_numpy(),
        "probe fails": s.probe_failures.astype("Int64").to_numpy(),
        "reported fails": s.reported_failures.astype("Int64").to_numpy(),
        "epoch": s.membership_epoch.astype("Int64").to_numpy(),
        "error": s.last_error.fillna("").astype(str).to_numpy(),
    })


def _streaks(shards: pd.DataFrame) -> pd.DataFrame:
    g = shards.groupby("shard_idx")
    return pd.DataFrame({"probe": g.probe_failures.max(),
                         "reported": g.reported_failures.max()}).fillna(0)


def quiet_shards(shards: pd.DataFrame) -> int:
    """Shards whose probe and reported failure streaks never left zero."""
    if not len(shards):
        return 0
    d = _streaks(shards)
    return int(((d.probe == 0) & (d.reported == 0)).sum())


def failure_streaks(shards: pd.DataFrame) -> hv.Bars:
    """Probe failures against reported failures per shard (the worst streak each reached), for
    the shards that failed at all, one row per shard (readable at dozens of shards).

    A wedged engine shows reported failures with no probe failures (P5, docs/domain/incidents.md).
    """
    if len(shards):
        d = _streaks(shards)
        d = d[(d.probe > 0) | (d.reported > 0)]
        d = d.reset_index().melt(id_vars="shard_idx", var_name="source",
                                 value_name="failures")
        d["shard"] = "shard " + d.shard_idx.astype(int).astype(str)
        d = d[["shard", "source", "failures"]].astype({"failures": "float64"})
    else:
        d = pd.DataFrame({"shard": [], "source": [], "failures": []})
    # colour per source; categorize() fails on an empty frame, so a constant then
    color = (hv.dim("source").categorize({"probe": style.INFO, "reported": style.ERROR})
             if len(d) else style.INFO)
    rows = max(d.shard.nunique(), 1)
    return hv.Bars(d, ["shard", "source"], hv.Dimension("failures", label="worst streak")).opts(
        color=color, invert_axes=True, multi_level=False, show_legend=False,
        height=int(min(max(rows * 34 + 70, 150), 700)), responsive=True,
        tools=["hover"], show_grid=True, ylabel="", fontsize={"yticks": "9pt", "xticks": "9pt"})


def fleet_samples(samples: pd.DataFrame, t0_ns: int) -> pd.DataFrame:
    """The fleet's serving shards as the watchdog sampled them (gen_fleet/serving_shards), as
    (t, serving) steps: the fleet's line for a run recorded without shard stays."""
    s = samples[samples.fleet_serving.notna()].sort_values("ts_ns")
    return pd.DataFrame({"t": ((s.ts_ns - t0_ns) / S).to_numpy(dtype="float64"),
                         "serving": s.fleet_serving.to_numpy(dtype="float64")})


def router_samples(samples: pd.DataFrame, t0_ns: int) -> pd.DataFrame:
    """Router serving backends as (t, serving) steps for the serving plot."""
    s = samples[samples.router_serving.notna()].sort_values("ts_ns")
    return pd.DataFrame({"t": ((s.ts_ns - t0_ns) / S).to_numpy(dtype="float64"),
                         "serving": s.router_serving.to_numpy(dtype="float64")})


OVERLAP_COLUMNS = ["row", "rollout_id", "attempt", "budget_s", "x0", "x1", "kind",
                   "checkpoint_id", "detail"]


def deadline_overlaps(deadlines: pd.DataFrame, windows: pd.DataFrame, *, now_ns: int,
                      cap: int = 60) -> pd.DataFrame:
    """Each rollout deadline that a snapshot window crossed, aligned at its own start.

    Rows (seconds after the deadline started): the deadline's budget, each window that opened
    or was open during the deadline's life (to the window's end), and where it fired. Fired deadlines first, then by overlap length.
    """
    d = deadlines[(deadlines.kind == "rollout") & deadlines.budget_s.notna()]
    if not len(d) or not len(windows):
        return pd.DataFrame(columns=OVERLAP_COLUMNS)
    # the pairs that overlap, found window by window: snapshots are few and deadlines many
    # (a cross join of 720k deadlines and 300 windows is 200M rows), in deadline order
    d_start = d.start_ns.to_numpy(dtype="int64")
    d_end = d.end_ns.fillna(now_ns).to_numpy(dtype="int64")
    w_start = windows.start_ns.to_numpy(dtype="int64")
    w_end = windows.end_ns.fillna(now_ns).to_numpy(dtype="int64")
    d_pos, w_pos = [], []
    for j in range(len(windows)):
        hit = np.flatnonzero((w_start[j] < d_end) & (w_end[j] > d_start))
        d_pos.append(hit)
        w_pos.append(np.full(len(hit), j))
    d_pos, w_pos = np.concatenate(d_pos), np.concatenate(w_pos)
    if not len(d_pos):
        return pd.DataFrame(columns=OVERLAP_COLUMNS)
    order = np.lexsort((w_pos, d_pos))
    d_pos, w_pos = d_pos[order], w_pos[order]
    pairs = pd.DataFrame({
        "deadline_id": d.deadline_id.to_numpy()[d_pos],
        "start_ns": d_start[d_pos],
        "fired_ns": d.fired_ns.to_numpy()[d_pos],
        "checkpoint_id": windows.checkpoint_id.to_numpy()[w_pos],
        "start_ns_w": w_start[w_pos],
        "_wend": w_end[w_pos]})
    pairs = pairs.assign(
        ov0=(np.maximum(pairs.start_ns_w, pairs.start_ns) - pairs.start_ns) / S,
        # the window's whole length, past the deadline's end: a snapshot that outlasts the
        # remaining budget is the point of the plot (P1, docs/domain/incidents.md)
        ov1=(pairs._wend - pairs.start_ns) / S)
    per = pairs.groupby("deadline_id").agg(ov=("ov1", "max"), fired=("fired_ns", "count"))
    per = per.assign(score=per.fired * 1e9 + per.ov).sort_values("score", ascending=False)
    keep = list(per.index[:cap])
    rows = []
    for i, did in enumerate(keep):
        dl = d[d.deadline_id == did].iloc[0]
        label = f"{dl.rollout_id} try {int(dl.attempt) if pd.notna(dl.attempt) else '-'}"
        budget = float(dl.budget_s)
        suspended = float(dl.suspended_s) if pd.notna(dl.suspended_s) else 0.0
        rows.append((label, dl.rollout_id, dl.attempt, dl.budget_s, 0.0, budget, "budget", "",
                     f"{budget:g} s budget, {dl.outcome}"
                     + (f" ({suspended:g} s suspended on top)" if suspended > 0 else "")))
        if suspended > 0:  # the deadline lived past its budget by the time it stood still
            rows.append((label, dl.rollout_id, dl.attempt, dl.budget_s, budget,
                         budget + suspended, "suspended", "",
                         f"+{suspended:g} s past the {budget:g} s budget: time the deadline "
                         f"was suspended (its clock stood still)"))
        for p in pairs[pairs.deadline_id == did].itertuples(index=False):
            rows.append((label, dl.rollout_id, dl.attempt, dl.budget_s, p.ov0, p.ov1,
                         "snapshot", p.checkpoint_id, f"snapshot {p.checkpoint_id}"))
        if pd.notna(dl.fired_ns):
            t = (dl.fired_ns - dl.start_ns) / S
            rows.append((label, dl.rollout_id, dl.attempt, dl.budget_s, t, t, "fired", "",
                         f"fired while {dl.state_when_fired or 'unknown'}"))
    return pd.DataFrame(rows, columns=OVERLAP_COLUMNS)


def overlap_plot(overlaps: pd.DataFrame) -> hv.Overlay:
    """Deadline budget bars with the snapshot windows that crossed them and the firing."""
    rows = list(dict.fromkeys(overlaps.row))
    y = {r: -i for i, r in enumerate(rows)}
    o = overlaps.assign(y=overlaps.row.map(y).astype("float64"))
    kd = [hv.Dimension("x0", label="seconds since the deadline started"), "y0", "x1", "y1"]

    def bars(kind: str, half: float) -> pd.DataFrame:
        b = o[o.kind == kind]
        return pd.DataFrame({"x0": b.x0.astype("float64"), "y0": b.y - half,
                             "x1": b.x1.astype("float64"), "y1": b.y + half,
                             "row": b.row, "detail": b.detail})

    fired = o[o.kind == "fired"]
    tips = [("rollout", "@row"), ("", "@detail"), ("from (s)", "@x0{0.0}"),
            ("to (s)", "@x1{0.0}")]
    h = int(np.clip(len(rows) * 22 + 90, 200, 900))
    return hv.Overlay([
        hv.Rectangles(text_columns(bars("budget", 0.36)), kd, ["row", "detail"],
                      label="deadline budget")
        .opts(color="#c9d6e3", line_color="#7a8fa6", tools=["hover"], hover_tooltips=tips),
        hv.Rectangles(text_columns(bars("snapshot", 0.22)), kd, ["row", "detail"],
                      label="snapshot window (rollout parked)")
        .opts(color=style.PARKED, alpha=0.8, line_alpha=0, tools=["hover"],
              hover_tooltips=tips),
        hv.Points(text_columns(pd.DataFrame({"x": fired.x0.astype("float64"), "y": fired.y,
                                             "row": fired.row, "detail": fired.detail})),
                  ["x", "y"], ["row", "detail"], label="deadline fired")
        .opts(marker="x", size=14, line_width=3, color=style.ERROR, tools=["hover"]),
        hv.Rectangles(text_columns(bars("suspended", 0.36)), kd, ["row", "detail"],
                      label=SUSPENDED_LABEL)
        .opts(color=SUSPENDED_COLOR, line_color="#7a8fa6", line_dash="dashed",
              tools=["hover"], hover_tooltips=tips),
    ]).opts(hv.opts.Overlay(yticks=[(v, k) for k, v in y.items()], height=h, responsive=True,
                            show_legend=False, show_grid=True, ylabel="",
                            fontsize={"yticks": "9pt", "xticks": "9pt"}))


SUSPENDED_LABEL = "deadline suspended (past the budget: its clock stood still)"
SUSPENDED_COLOR = "#e4ebf2"
OVERLAP_KEY = [("deadline budget", "■", "#c9d6e3"),
               (SUSPENDED_LABEL, "■", SUSPENDED_COLOR),
               ("snapshot window (rollout parked)", "■", style.PARKED),
               ("deadline fired", "✖", style.ERROR)]
