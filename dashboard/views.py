"""The dashboard's views. Each reads its DataStore and only draws (``__panel__``).

The same objects render in the served app and in a notebook cell. A view draws the DataStore's
``version`` only while ``shown`` (the app clears it for tabs off screen): a live tick then
redraws one tab, and a hidden view catches up when it is shown again. Within a view, an element
redraws only when a frame it reads changed (``DataStore.frame_versions``).

Two plots that share a time axis are two HoloViews panes in a Column, linked by Panel's
``linked_axes`` through their common ``t`` dimension, never one HoloViews ``Layout``: Bokeh
lays out the ``GridPlot`` a Layout becomes at zero width when it sits in a tab that was hidden
at first render beside another plot, inside a page-wide Column (bokeh/bokeh#13384), and never
lays it out again; every plot of the Fleet tab drew nothing.

Text from the data (span
attributes, incident summaries) is only ever shown escaped: HTML panes get ``html.escape``d
strings, tables use Tabulator's ``plaintext``/``textarea`` formatters, which sanitise.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime

import holoviews as hv
import pandas as pd
import panel as pn
import param

from rolloutscope.dashboard import plots, style, tables
from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.dashboard.datastore import MAX_DETAIL_ROWS, DataStore
from rolloutscope.dashboard.story import incident_story, story_html

# load the Bokeh backend (and its option names) without notebook side effects
hv.renderer("bokeh")

S = 1e9
CSS = """
.rs-header {font-size: 13px; line-height: 1.45; margin: 0}
.rs-header b {font-weight: 600}
.rs-kv {display: inline-block; margin-right: 14px; white-space: nowrap}
.rs-stats {display: flex; flex-wrap: wrap; gap: 6px; margin: 2px 0}
.rs-stat {border: 1px solid #d5dbe1; border-radius: 4px; padding: 3px 9px; min-width: 92px;
          background: #fbfcfd}
.rs-stat .v {font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums}
.rs-stat .k {font-size: 11px; color: #5d6d7e}
.rs-stat.bad .v {color: #d1495b}
.rs-note {font-size: 12px; color: #5d6d7e}
.rs-story {font-size: 13px; line-height: 1.5; max-width: 760px}
.rs-story h3 {margin: 4px 0 6px 0; text-transform: capitalize}
.rs-story h3 small {text-transform: none; color: #5d6d7e; font-weight: 400; margin-left: 6px}
.rs-story .rs-t {display: inline-block; min-width: 70px; color: #5d6d7e;
                 font-variant-numeric: tabular-nums}
.rs-story ol {padding-left: 22px; margin: 4px 0}
.rs-critical {color: #d1495b} .rs-warning {color: #b7791f} .rs-info {color: #5b7db1}
.rs-muted {color: #5d6d7e}
"""

TEXT_COLUMNS_WIDE = {"summary", "error", "failure_reason", "detail", "subject",
                     "span attributes"}


def text_table(df: pd.DataFrame, **kw) -> pn.widgets.Tabulator:
    """A read-only table whose text cells render as text, never as markup."""
    formatters = {c: {"type": "textarea" if c in TEXT_COLUMNS_WIDE else "plaintext"}
                  for c in df.columns if df[c].dtype == object or str(df[c].dtype) == "string"}
    kw.setdefault("pagination", "remote")
    kw.setdefault("page_size", 25)
    return pn.widgets.Tabulator(df, formatters=formatters, disabled=True, show_index=False,
                                layout="fit_data_stretch", theme="simple",
                                sizing_mode="stretch_width", **kw)


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / S, tz=UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def holdings(data: DataStore) -> str:
    """One sentence on what the run holds, from its span catalogue."""
    cat = data.frames["span_catalog"]
    if not len(cat):
        return "it holds no spans yet"
    spans, names = int(cat.spans.sum()), cat.name.nunique()
    services = cat.service.nunique()
    by = cat.groupby("dialect").spans.sum()
    parts = [f"{int(by[d]):,} {label}" for d, label in (
        ("gym", "released Gym spans (gym.*)"), ("rl", "rolloutscope RL-side spans"),
        ("otel", "other OTel spans (HTTP server / client, SDKs)")) if d in by]
    return (f"it holds {spans:,} spans of {names} names from {services} process"
            f"{'es' if services != 1 else ''}: " + ", ".join(parts))


def empty_note(data: DataStore, missing: str, hint: str) -> pn.pane.HTML:
    """What a tab shows when its views have no row for this run: what is missing, what the
    run holds instead, and where to look."""
    if data.state() == "no_runs":
        return pn.pane.HTML(f"<div class='rs-note'>{html.escape(waiting_text(data))}</div>",
                            stylesheets=[CSS])
    text = (f"No {missing} in this run; {holdings(data)}. {hint} The Traces tab shows every "
            f"span of any trace.")
    return pn.pane.HTML(f"<div class='rs-note rs-empty'>{html.escape(text)}</div>",
                        stylesheets=[CSS], sizing_mode="stretch_width")


def waiting_text(data: DataStore) -> str:
    if data.live:
        where = f" on {data.waiting_for}" if data.waiting_for else ""
        return (f"Waiting for the first span{where}. Point an OTel SDK there "
                f"(OTEL_EXPORTER_OTLP_ENDPOINT); a run appears here as soon as it sends.")
    unnamed = data.unnamed_spans()
    if unnamed:
        return (f"{unnamed:,} span(s) in this file name no run: a writer older than the rule "
                f"that files them under the store's default run wrote them, and no view shows "
                f"them (rolloutscope info counts them).")
    return (f"{data.store.path} holds no run: nothing was ever written to it. Collect into it "
            f"with rolloutscope serve --db {data.store.path}, or import a capture.")


class View(pn.viewable.Viewer):
    data = param.ClassSelector(class_=DataStore)
    shown = param.Boolean(default=True, doc="on screen: follows the data; hidden views wait")
    revision = param.Integer(default=0, doc="the DataStore version this view last drew")

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data=data, **params)
        self.revision = data.version
        self._drawn: dict[str, tuple] = {}
        data.param.watch(self._catch_up, "version")
        self.param.watch(self._catch_up, "shown")

    def _catch_up(self, *_) -> None:
        if self.shown and self.revision != self.data.version:
            self.revision = self.data.version

    def _changed(self, element: str, *frames: str, also: tuple = ()) -> bool:
        """Whether ``element`` must redraw: a frame it reads (or ``also``) changed since."""
        mark = tuple(self.data.frame_versions[f] for f in frames) + (self.data.run_id, *also)
        if self._drawn.get(element) == mark:
            return False
        self._drawn[element] = mark
        return True

    def _frames(self, *, rollout_ids=(), evidence=frozenset(), keep=None) -> tl.TimelineFrames:
        f = self.data.frames
        sub = {name: f[name] for name in ("checkpoint_windows", "checkpoint_ops",
                                          "shard_states", "rollout_attempts",
                                          "parked_intervals", "deadlines", "completions",
                                          "incidents")}
        ids = set(map(str, rollout_ids))
        for name in ("parked_intervals", "completions"):
            sub[name] = sub[name].assign(
                rollout_id=tl.group_rollout_ids(sub[name], sub["rollout_attempts"]))
        for name in ("rollout_attempts", "parked_intervals", "deadlines", "completions"):
            df = sub[name]
            sub[name] = df[df.rollout_id.astype(str).isin(ids)] if len(df) else df
        if keep is not None:
            for name in set(sub) - set(keep) - {"incidents"}:
                sub[name] = sub[name].iloc[:0]
        return tl.TimelineFrames(**sub, rollout_ids=tuple(rollout_ids), evidence=evidence)

    def _t0(self) -> int:
        return self.data.origin_ns()


class Overview(View):
    """Run header, live indicators, and the incident list (newest first, one sentence each)."""

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._table = text_table(self._incident_rows(), selectable=1, page_size=15,
                                 widths={"summary": 720})
        self._catalog = text_table(self._catalog_rows(), page_size=12)
        self._services = text_table(self._service_rows(), page_size=10)
        self._changed("incidents", "incidents", "run_thresholds")
        self._changed("holdings", "span_catalog", "services")
        self._table.param.watch(self._on_select, "selection")
        self.param.watch(self._on_version, "revision")

    def _catalog_rows(self) -> pd.DataFrame:
        return tables.catalog_rows(self.data.frames["span_catalog"])

    def _service_rows(self) -> pd.DataFrame:
        return tables.service_rows(self.data.frames["services"])

    def _incident_rows(self) -> pd.DataFrame:
        inc = self.data.incidents()
        t0 = self._t0()
        return pd.DataFrame({
            "t (s)": ((inc.start_ns.astype("float64") - t0) / S).round(1).to_numpy(),
            "severity": inc.severity.astype(str).to_numpy(),
            "kind": inc.kind.astype(str).to_numpy(),
            "subject": inc.subject.astype(str).to_numpy(),
            "summary": inc.summary.astype(str).to_numpy(),
            "incident_id": inc.incident_id.astype(str).to_numpy(),
        })

    def _on_version(self, event) -> None:
        if self._changed("incidents", "incidents", "run_thresholds"):
            self._table.value = self._incident_rows()
        if self._changed("holdings", "span_catalog", "services"):
            self._catalog.value = self._catalog_rows()
            self._services.value = self._service_rows()

    def _on_select(self, event) -> None:
        if event.new:
            self.data.incident = str(self._table.value.incident_id.iloc[event.new[0]])

    @param.depends("revision")
    def header(self) -> pn.pane.HTML:
        d, e = self.data, html.escape
        if d.state() == "no_runs":
            return pn.pane.HTML(f"<div class='rs-header rs-waiting'>{e(waiting_text(d))}</div>",
                                sizing_mode="stretch_width", stylesheets=[CSS])
        t0, now = d.origin_ns(), d.last_seen_ns()
        kv = [("run", d.run_id), ("from", _utc(t0) if t0 else "-"),
              ("to", _utc(now) if now else "-"), ("length", f"{(now - t0) / S:,.1f} s")]
        th = d.thresholds()
        cfg = [(k, f"{v:g}" if isinstance(v, float) else str(v)) for k, v in th.items()]
        if not cfg:
            cfg = [(k, str(v)) for k, v in list(d.config.items())[:10]
                   if not isinstance(v, (dict, list))]
        mode = "live" if d.live else "finished run (read-only)"
        top = "".join(f"<span class='rs-kv'><b>{e(k)}</b> {e(str(v))}</span>" for k, v in kv)
        conf = "".join(f"<span class='rs-kv'>{e(k)} = <b>{e(v)}</b></span>" for k, v in cfg)
        probs = "".join(f"<div class='rs-note'>{e(p)}</div>" for p in d.problems)
        said = holdings(d)
        said = said[:1].upper() + said[1:]
        holds = f"<div class='rs-note'>{e(said)}.</div>"
        if d.state() == "no_rows":
            holds = (f"<div class='rs-note rs-empty'>No rollout, checkpoint, fleet or incident "
                     f"rows in this run: its spans are none the model views read. "
                     f"{e(said)}; the table below lists them, and the Traces tab draws any "
                     f"trace.</div>")
        return pn.pane.HTML(f"<div class='rs-header'>{top}<span class='rs-kv rs-note'>{mode}"
                            f"</span><br>{conf}{holds}{probs}</div>",
                            sizing_mode="stretch_width", stylesheets=[CSS])

    @param.depends("revision")
    def indicators(self) -> pn.pane.HTML:
        d = self.data
        n = d.indicators()
        dialects = d.dialects()
        cells = []
        if "rl" in dialects or not dialects:
            cells.append(("rollouts committed", n["committed"], False))
        if "gym" in dialects:
            cells.append(("Gym rollouts finished", n["finished"], False))
        cells += [
            ("in flight", n["in_flight"], False),
            ("parked", n["parked"], False),
            ("redispatches", n["redispatches"], n["redispatches"] > 0),
            ("failed tries", n["failed_tries"], n["failed_tries"] > 0),
        ]
        if n["model_calls"]:
            cells += [("model calls", n["model_calls"], False),
                      ("model call errors", n["model_call_errors"], n["model_call_errors"] > 0)]
        cells += [
            ("snapshots ok", n["snapshots_ok"], False),
            ("snapshots failed", n["snapshots_failed"], n["snapshots_failed"] > 0),
            ("serving shards", f"{n['serving']} / {n['shards']}", n["serving"] < n["shards"]),
            ("incidents", n["incidents"], n["incidents"] > 0),
        ]
        body = "".join(f"<div class='rs-stat{' bad' if bad else ''}'><div class='v'>"
                       f"{html.escape(str(v))}</div><div class='k'>{k}</div></div>"
                       for k, v, bad in cells)
        return pn.pane.HTML(f"<div class='rs-stats'>{body}</div>", sizing_mode="stretch_width",
                            stylesheets=[CSS])

    def __panel__(self):
        holdings = pn.Card(
            pn.pane.HTML("<b>Processes</b> <span class='rs-note'>one row per service and "
                         "process id (Gym's service.instance.id is the same in every Gym "
                         "process)</span>", stylesheets=[CSS]),
            self._services,
            pn.pane.HTML("<b>Spans by name</b>", stylesheets=[CSS]), self._catalog,
            # open where the model views say little: no run model of ours, only spans
            title="What this run holds",
            collapsed=self.data.state() == "ok" and "rl" in self.data.dialects(),
            sizing_mode="stretch_width")
        return pn.Column(self.header, self.indicators,
                         pn.pane.HTML("<b>Incidents</b> <span class='rs-note'>newest first; "
                                      "select one to follow it on the timeline</span>",
                                      stylesheets=[CSS]),
                         self._table, holdings, sizing_mode="stretch_width")


class Timeline(View):
    """Checkpoint windows, participants, shards and rollouts on one linked time axis."""

    follow = param.Boolean(default=True, doc="keep the x-range on the whole run as it grows")

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._user_range: tuple[float, float] | None = None
        self._shown_range: tuple[float, float] | None = None
        self._focus_for: str | None = None
        streams = [hv.streams.Params(self, ["revision"]),
                   hv.streams.Params(data, ["incident", "rollout_filter", "failure_class"])]
        self.lanes = hv.DynamicMap(self._lanes, streams=streams)
        self.serving = hv.DynamicMap(self._serving, streams=streams)
        self._range = hv.streams.RangeX(source=self.lanes)
        self._range.add_subscriber(self._on_range)
        self.whole = pn.widgets.Button(label="Whole run", width=100)
        self.whole.on_click(self._whole_run)

    # the time window the plot shows
    def _on_range(self, x_range=None, **_) -> None:
        if x_range is not None and x_range != self._shown_range:
            self._user_range = tuple(float(v) for v in x_range)

    def _whole_run(self, *_):
        d = self.data
        self._user_range = (0.0, max((d.last_seen_ns() - d.origin_ns()) / S, 1.0))
        self._focus_for = None
        if self.data.incident is None:
            self.data.param.trigger("version")
        else:
            self.data.incident = None

    def xlim(self) -> tuple[float, float]:
        d = self.data
        t0, now = d.origin_ns(), d.last_seen_ns()
        whole = (0.0, max((now - t0) / S, 1.0))
        inc = d.selected_incident()
        if inc is not None and self._focus_for != d.incident:
            self._focus_for = d.incident
            self._user_range = None
            rng = tl.focus_range(inc, self._frames(
                rollout_ids=d.rollout_lanes()[0], evidence=d.evidence(inc)), t0_ns=t0,
                now_ns=now)
        elif inc is None and self._focus_for is not None:
            self._focus_for = None
            self._user_range = None
            rng = whole
        elif self._user_range is not None:
            rng = self._user_range
        elif inc is not None and self._shown_range is not None:
            rng = self._shown_range
        else:
            rng = self._drawn_extent(whole)
        self._shown_range = rng
        return rng

    def _drawn_extent(self, whole: tuple[float, float]) -> tuple[float, float]:
        """Where the bars are, padded, within the whole run: a run whose rows fill only part
        of its time (a Gym deployment's rollouts after a minute of start-up) opens on them;
        one whose rows span it (a shard's stay) opens on the whole run. "Whole run" resets."""
        d = self.data
        t0, now = d.origin_ns(), d.last_seen_ns()
        frames = self._frames(rollout_ids=d.rollout_lanes()[0])
        rects = tl.interval_rects(frames, tl.lanes_for(frames), t0, now)
        if not len(rects):
            return whole
        lo, hi = float(rects.x0.min()), float(rects.x1.max())
        pad = max((hi - lo) * 0.05, 1e-3)
        return (max(whole[0], lo - pad), min(whole[1], hi + pad))

    def _lanes(self, revision, incident, rollout_filter, failure_class):
        d = self.data
        ids, total = d.rollout_lanes()
        frames = self._frames(rollout_ids=ids, evidence=d.evidence())
        inc = d.selected_incident()
        t0, now = d.origin_ns(), d.last_seen_ns()
        highlight = None
        if inc is not None:
            end = inc["end_ns"] if pd.notna(inc["end_ns"]) else now
            highlight = ((inc["start_ns"] - t0) / S, (end - t0) / S)
        return tl.lane_plot(frames, t0_ns=t0, now_ns=now, xlim=self.xlim(),
                            highlight=highlight)

    @param.depends("revision", "data.incident", "data.rollout_filter", "data.failure_class")
    def note(self) -> pn.pane.HTML:
        d = self.data
        ids, total = d.rollout_lanes()
        if d.state() != "ok":
            return empty_note(d, "rollout, checkpoint or fleet rows to draw",
                              "The timeline draws rollout attempts (RL tries, Gym's "
                              "gym.rollout), checkpoint operations and shard states.")
        shown = f"showing {len(ids):,} of {total:,} rollouts" if total else "no rollouts"
        which = d.rollout_filter + (f", {d.failure_class}" if d.failure_class != "any" else "")
        return pn.pane.HTML(f"<span class='rs-note'>{html.escape(shown)} ({html.escape(which)})"
                            "; wheel zooms time, drag pans; dashed outline = still open</span>",
                            stylesheets=[CSS], sizing_mode="stretch_width")

    def _serving(self, revision, incident, rollout_filter, failure_class):
        d = self.data
        t0, now = d.origin_ns(), d.last_seen_ns()
        return tl.serving_plot(d.frames["shard_states"], t0_ns=t0, now_ns=now,
                               xlim=self._shown_range,
                               router=plots.router_samples(d.frames["serving_samples"], t0))

    def incident_select(self) -> pn.widgets.Select:
        return incident_selector(self.data)

    def __panel__(self):
        controls = pn.Row(
            self.incident_select(),
            pn.widgets.Select.from_param(self.data.param.rollout_filter, label="rollouts",
                                         width=150),
            pn.widgets.Select.from_param(self.data.param.failure_class, label="failure class",
                                         width=110),
            self.whole, sizing_mode="stretch_width")
        return pn.Column(controls, self.note, *linked_plots(self.lanes, self.serving),
                         sizing_mode="stretch_width")


def linked_plots(*plots) -> list[pn.pane.HoloViews]:
    """One page-wide pane per plot; Panel links their x-ranges through the shared ``t``."""
    return [pn.pane.HoloViews(plot, sizing_mode="stretch_width", linked_axes=True)
            for plot in plots]


def newest_critical(data: DataStore) -> str | None:
    """The incident a view shows when none is selected: the newest critical one."""
    inc = data.incidents()
    crit = inc[inc.severity == "critical"]
    return str(crit.incident_id.iloc[0]) if len(crit) else None


def incident_selector(data: DataStore, *, fallback=None) -> pn.widgets.Select:
    """A drop-down of incidents bound both ways to ``data.incident``.

    ``fallback`` (DataStore -> incident id or None) names the incident shown while none is
    selected; the drop-down shows it without selecting it for the other views.
    """
    def options():
        inc = data.incidents()
        t0 = data.origin_ns()
        opts = {} if fallback is not None and fallback(data) else {"(none)": ""}
        for r in inc.itertuples(index=False):
            opts[f"{(r.start_ns - t0) / S:,.1f} s  {r.severity}  {r.kind}  {r.subject}"] = \
                str(r.incident_id)
        return opts

    def current() -> str:
        return data.incident or (fallback(data) if fallback is not None else None) or ""

    sel = pn.widgets.Select(label="incident", options=options(), value=current(), width=420)
    echo = [False]  # a value set from the data is not the user's choice

    def to_data(event):
        if not echo[0] and event.new != current():
            data.incident = event.new or None

    def from_data(event):
        echo[0] = True
        try:
            if event.name == "version":
                sel.options = options()
            sel.value = current()
        finally:
            echo[0] = False

    sel.param.watch(to_data, "value")
    data.param.watch(from_data, ["incident", "version"])
    return sel


class Checkpoints(View):
    """Every checkpoint's per-participant phases, blockers, outcome; duration distributions."""

    FRAMES = ("checkpoint_ops", "checkpoint_windows", "run_thresholds", "checkpoint_steps",
              "span_catalog")

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._phases = text_table(self._phase_rows(), page_size=20)
        self._windows = text_table(self._window_rows(), page_size=10)
        self._steps = text_table(self._step_rows(), page_size=15)
        self._distribution = pn.pane.HoloViews(self._distribution_plot(),
                                               sizing_mode="stretch_width")
        self._empty = pn.Column(sizing_mode="stretch_width")
        self._show_empty()
        self._changed("tables", *self.FRAMES)
        self.param.watch(self._update, "revision")

    def _show_empty(self) -> None:
        f = self.data.frames
        if len(f["checkpoint_ops"]) or len(f["checkpoint_windows"]):
            self._empty[:] = []
            return
        self._empty[:] = [empty_note(
            self.data, "checkpoint telemetry",
            "Checkpoint rows come from the draft gym.checkpoint.* spans (span group "
            "checkpoint: span_groups 'default,checkpoint'), from rolloutscope's Gym middleware "
            "or from RL's rl.rollout_snapshot spans; see docs/gym-telemetry.md.")]

    def _step_rows(self) -> pd.DataFrame:
        return tables.step_rows(self.data.frames["checkpoint_steps"], self._t0())

    def _phase_rows(self) -> pd.DataFrame:
        out = plots.phase_durations(self.data.frames["checkpoint_ops"])
        for c in plots.PHASES:
            out[c] = pd.to_numeric(out[c], errors="coerce").round(3)
        out["blockers"] = pd.to_numeric(out["blockers"], errors="coerce").astype("Int64")
        return out.astype({"checkpoint_id": str, "participant": str, "outcome": str,
                           "code": str})

    def _window_rows(self) -> pd.DataFrame:
        w = self.data.frames["checkpoint_windows"].sort_values("start_ns")
        t0 = self._t0()
        return pd.DataFrame({
            "checkpoint_id": w.checkpoint_id.astype(str).to_numpy(),
            "opened (s)": ((w.start_ns - t0) / S).round(1).to_numpy(),
            "admission closed for (s)": pd.to_numeric(w.duration_s).round(2).to_numpy(),
            "outcome": w.outcome.astype(str).to_numpy()})

    def _distribution_plot(self):
        return plots.duration_distribution(self.data.frames["checkpoint_ops"])

    def _update(self, event) -> None:
        if self._changed("tables", *self.FRAMES):
            self._phases.value = self._phase_rows()
            self._windows.value = self._window_rows()
            self._steps.value = self._step_rows()
            self._distribution.object = self._distribution_plot()
            self._show_empty()

    def __panel__(self):
        return pn.Column(
            self._empty,
            pn.Row(pn.Column("**Snapshot windows** (admission closed → reopened)",
                             self._windows, sizing_mode="stretch_width"),
                   pn.Column(self._distribution, sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            "**Phases per checkpoint and participant** (seconds; worst outcome; blockers)",
            self._phases,
            "**Steps inside operations** (wait_ready, export, write, read, install; the "
            "controller's prepare stages)",
            self._steps, sizing_mode="stretch_width")


# the Fleet's own time axis: linked between its two plots, not with the Timeline's
FLEET_TIME = hv.Dimension("t_fleet", label="time since run start (s)")


class Fleet(View):
    """Shard lanes, transitions with triggers, probe vs reported failures, router vs fleet."""

    FRAMES = ("shard_states", "serving_samples", "run_thresholds", "model_calls",
              "span_catalog")

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._transitions = text_table(self._rows(), page_size=15)
        self._streaks = pn.pane.HoloViews(plots.failure_streaks(data.frames["shard_states"]),
                                          sizing_mode="stretch_width")
        self._router_note = pn.pane.HTML(self._router_text(), stylesheets=[CSS])
        self._backends = text_table(self._backend_rows(), page_size=10)
        self._empty = pn.Column(sizing_mode="stretch_width")
        self._show_empty()
        self._changed("tables", *self.FRAMES)
        self.param.watch(self._update, "revision")

    def _rows(self) -> pd.DataFrame:
        return plots.transitions_table(self.data.frames["shard_states"], self._t0())

    def _backend_rows(self) -> pd.DataFrame:
        return plots.backend_summary(self.data.frames["model_calls"], self._t0())

    def _show_empty(self) -> None:
        if len(self.data.frames["shard_states"]):
            self._empty[:] = []
            return
        backends = self.data.frames["model_calls"].backend.nunique()
        seen = (f" The model backends its model calls reached ({backends}) are listed below."
                if backends else "")
        self._empty[:] = [empty_note(
            self.data, "generation-fleet health telemetry",
            "Shard states come from rl.gen_fleet.* spans (rolloutscope's fleet-health wrapper "
            "or the RL log importer)." + seen)]

    def _update(self, event) -> None:
        if self._changed("tables", *self.FRAMES):
            self._transitions.value = self._rows()
            self._streaks.object = plots.failure_streaks(self.data.frames["shard_states"])
            self._router_note.object = self._router_text()
            self._backends.value = self._backend_rows()
            self._show_empty()

    def _lanes(self, revision):
        d = self.data
        frames = self._frames(keep=("checkpoint_windows", "shard_states"))
        return tl.lane_plot(frames, t0_ns=d.origin_ns(), now_ns=d.last_seen_ns(),
                            markers=False).redim(t=FLEET_TIME)

    def _serving(self, revision):
        d = self.data
        t0 = d.origin_ns()
        return tl.serving_plot(d.frames["shard_states"], t0_ns=t0, now_ns=d.last_seen_ns(),
                               router=plots.router_samples(d.frames["serving_samples"], t0)
                               ).redim(t=FLEET_TIME)

    def lanes(self) -> list[pn.pane.HoloViews]:
        streams = [hv.streams.Params(self, ["revision"])]
        return linked_plots(hv.DynamicMap(self._lanes, streams=streams),
                            hv.DynamicMap(self._serving, streams=streams))

    def _router_text(self) -> str:
        if self.data.frames["serving_samples"].router_serving.notna().any():
            return ""
        return "<span class='rs-note'>router serving backends: no samples in this run</span>"

    def __panel__(self):
        return pn.Column(self._empty, *self.lanes(), self._router_note, pn.Row(
            pn.Column("**Transitions** (trigger, streak counters, error)", self._transitions,
                      sizing_mode="stretch_width"),
            pn.Column(self._streaks, width=420)),
            "**Model backends** (from model_calls: each backend a traced model call reached; "
            "latency is the backend's, tries include retries)",
            self._backends, sizing_mode="stretch_width")


class Rollouts(View):
    """Attempts with outcome / failure-class filters; deadline-versus-snapshot overlap; Gym's
    own rollouts, model calls and counters where the run has them. Picking a rollout opens
    its trace."""

    FRAMES = ("rollout_attempts", "deadlines", "checkpoint_windows", "run_thresholds")
    GYM_FRAMES = ("gym_rollouts", "model_calls", "gym_metrics", "rollout_attempts",
                  "span_catalog")

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._table = text_table(self._rows(), page_size=20, selectable=1)
        self._overlap = pn.Column(self._overlap_pane(), sizing_mode="stretch_width")
        self._gym = text_table(self._gym_rows(), page_size=15, selectable=1)
        self._calls = text_table(self._call_rows(), page_size=15, selectable=1)
        self._counters = text_table(self._counter_rows(), page_size=10)
        self._gym_part = pn.Column(sizing_mode="stretch_width")
        self._empty = pn.Column(sizing_mode="stretch_width")
        self._show_parts()
        self._changed("table", *self.FRAMES, also=(data.outcomes, data.failure_class))
        self._changed("overlap", *self.FRAMES)
        self._changed("gym", *self.GYM_FRAMES)
        self.param.watch(self._update, "revision")
        data.param.watch(self._update, ["outcomes", "failure_class"])
        for table in (self._table, self._gym, self._calls):
            table.param.watch(self._open_trace, "selection")

    @property
    def overlap(self) -> pn.Column:
        """The deadline-versus-snapshot overlap plot on its own (e.g. for a notebook cell)."""
        return self._overlap

    def _rows(self) -> pd.DataFrame:
        a = self.data.attempts_table().sort_values("start_ns")
        t0 = self._t0()
        return pd.DataFrame({
            "dialect": a.dialect.astype(str).to_numpy(),
            "rollout_id": a.rollout_id.astype(str).to_numpy(),
            "try": a.attempt.astype("Int64").to_numpy(),
            "capture key": a.capture_key.fillna("").astype(str).to_numpy(),
            "group_id": a.group_id.fillna("").astype(str).to_numpy(),
            "start (s)": ((a.start_ns - t0) / S).round(3).to_numpy(),
            "duration (s)": pd.to_numeric(a.duration_s).round(3).to_numpy(),
            "outcome": a.outcome.astype(str).to_numpy(),
            "failure class": a.failure_class.fillna("").astype(str).to_numpy(),
            "failure_reason": a.failure_reason.fillna("").astype(str).to_numpy(),
            "trace_id": a.trace_id.fillna("").astype(str).to_numpy()})

    def _gym_rows(self) -> pd.DataFrame:
        return tables.gym_rollout_rows(self.data.frames["gym_rollouts"], self._t0())

    def _call_rows(self) -> pd.DataFrame:
        return tables.model_call_rows(self.data.frames["model_calls"], self._t0())

    def _counter_rows(self) -> pd.DataFrame:
        return tables.counter_rows(self.data.frames["gym_metrics"])

    def _open_trace(self, event) -> None:
        if not event.new:
            return
        table = event.obj
        trace = str(table.value.trace_id.iloc[event.new[0]])
        if trace:
            self.data.trace_id = trace

    def _show_parts(self) -> None:
        f = self.data.frames
        if any(len(f[n]) for n in ("gym_rollouts", "model_calls", "gym_metrics")):
            capped = [n for n in ("gym_rollouts", "model_calls")
                      if len(f[n]) >= MAX_DETAIL_ROWS]
            note = (f"<span class='rs-note'>{', '.join(capped)}: the latest "
                    f"{MAX_DETAIL_ROWS:,} rows are shown; the store holds more</span>"
                    if capped else "")
            self._gym_part[:] = [pn.pane.HTML(note, stylesheets=[CSS]),
                "**Gym rollouts** (gym.rollout: one agent /run each; select one to open its "
                "trace)", self._gym,
                "**Model calls** (gym.model.* spans with the backend they reached, and any "
                "client's calls to a generation route)", self._calls,
                "**Gym's own counters** (gym.* metrics: the latest cumulative point per "
                "process; gym.verify.success_rate counts verify calls that did not raise, not "
                "tasks passed)", self._counters]
        else:
            self._gym_part[:] = []
        self._empty[:] = [] if len(f["rollout_attempts"]) else [empty_note(
            self.data, "rollout attempts",
            "Attempts come from RL's rl.rollout.attempt spans and from released Gym's "
            "gym.rollout spans (span group rollout).")]

    def _overlap_pane(self):
        d = self.data
        ov = plots.deadline_overlaps(d.frames["deadlines"], d.frames["checkpoint_windows"],
                                     now_ns=d.last_seen_ns())
        if not len(ov):
            return pn.pane.HTML("<span class='rs-note'>No rollout deadline crossed a snapshot "
                                "window.</span>", stylesheets=[CSS])
        return pn.pane.HoloViews(plots.overlap_plot(ov), sizing_mode="stretch_width")

    def _update(self, event) -> None:
        if event.name in ("outcomes", "failure_class") and not self.shown:
            return  # a filter changed on another tab: drawn when this one is shown
        d = self.data
        if self._changed("table", *self.FRAMES, also=(tuple(d.outcomes), d.failure_class)):
            self._table.value = self._rows()
        if self._changed("overlap", *self.FRAMES):
            self._overlap[:] = [self._overlap_pane()]
        if self._changed("gym", *self.GYM_FRAMES):
            self._gym.value = self._gym_rows()
            self._calls.value = self._call_rows()
            self._counters.value = self._counter_rows()
            self._show_parts()

    def __panel__(self):
        filters = pn.Row(
            pn.widgets.CheckButtonGroup.from_param(self.data.param.outcomes, label="outcome"),
            pn.widgets.Select.from_param(self.data.param.failure_class, label="failure class",
                                         width=110))
        return pn.Column(self._empty, self._overlap,
                         "**Attempts** (RL tries and Gym rollout attempts; filter by outcome, "
                         "none selected = all; select one to open its trace)",
                         filters, self._table, self._gym_part, sizing_mode="stretch_width")


class IncidentDetail(View):
    """An incident as a numbered story beside a mini timeline: the selected one, else the
    newest critical one."""

    def shown_incident(self):
        d = self.data
        inc = d.selected_incident()
        if inc is None and (newest := newest_critical(d)) is not None:
            rows = d.frames["incidents"]
            inc = rows[rows.incident_id.astype(str) == newest].iloc[0].to_dict()
        return inc

    @param.depends("data.incident", "revision")
    def story(self):
        d = self.data
        inc = self.shown_incident()
        if inc is None:
            return pn.pane.HTML("<span class='rs-note'>No incident in this run yet; select one "
                                "when it appears.</span>", stylesheets=[CSS])
        incidents = d.frames["incidents"]
        st = incident_story(inc, d.frames, t0_ns=self._t0(), incidents=incidents)
        cause = None
        if st.caused_by:
            rows = incidents[incidents.incident_id == st.caused_by]
            cause = str(rows.summary.iloc[0]) if len(rows) else None
        note = "" if d.incident else ("<div class='rs-note'>the newest critical incident; pick "
                                      "another above</div>")
        return pn.pane.HTML(note + story_html(st, subject=str(inc["subject"]),
                                              caused_by_summary=cause),
                            stylesheets=[CSS], sizing_mode="stretch_width")

    @param.depends("data.incident", "revision")
    def mini_timeline(self):
        d = self.data
        inc = self.shown_incident()
        if inc is None:
            return pn.Spacer(height=0)
        ev = d.evidence(inc)
        ids = sorted(d.incident_rollouts(str(inc["incident_id"])))
        frames = self._frames(rollout_ids=ids, evidence=ev)
        ops = frames.checkpoint_ops
        cks = set(ops.checkpoint_id[ops.span_id.isin(ev)]) | set(
            d.frames["parked_intervals"].checkpoint_id[
                d.frames["parked_intervals"].span_id.isin(ev)])
        sh = frames.shard_states
        shards = set(sh.shard_idx[sh.span_id.isin(ev)])
        frames = tl.TimelineFrames(
            checkpoint_windows=frames.checkpoint_windows,
            checkpoint_ops=ops[ops.checkpoint_id.isin(cks) | ops.span_id.isin(ev)],
            shard_states=sh[sh.shard_idx.isin(shards)],
            rollout_attempts=frames.rollout_attempts, parked_intervals=frames.parked_intervals,
            deadlines=frames.deadlines, completions=frames.completions,
            incidents=frames.incidents, rollout_ids=frames.rollout_ids, evidence=ev)
        t0, now = self._t0(), d.last_seen_ns()
        end = inc["end_ns"] if pd.notna(inc["end_ns"]) else now
        plot = tl.lane_plot(frames, t0_ns=t0, now_ns=now,
                            xlim=tl.focus_range(inc, frames, t0_ns=t0, now_ns=now),
                            highlight=((inc["start_ns"] - t0) / S, (end - t0) / S))
        return pn.pane.HoloViews(plot, sizing_mode="stretch_width")

    def __panel__(self):
        return pn.Column(incident_selector(self.data, fallback=newest_critical),
                         pn.Row(pn.Column(self.story, width=620),
                                pn.Column(self.mini_timeline, sizing_mode="stretch_width"),
                                sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


__all__ = ["Overview", "Timeline", "Checkpoints", "Fleet", "Rollouts", "IncidentDetail",
           "style"]
