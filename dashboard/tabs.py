"""The dashboard's views. Each reads its DataStore and only draws (``__panel__``).

The same objects render in the served app and in a notebook cell. A view draws the DataStore's
``version`` only while ``shown`` (the app clears it for tabs off screen): a live tick then
redraws one tab, and a hidden view catches up when it is shown again. Within a view, an element
redraws only when a frame it reads changed (``DataStore.frame_versions``).

The time plots (lanes, gauges, serving lines) are Bokeh figures built directly
(``time_figures``), each in its own pane; the plots of a tab share one x range model, so the
browser moves them together.

One time range for every tab (``TimeView``): a zoom or pan on any time plot becomes
``DataStore.time_range``; the plots of the same tab follow in the browser through their shared
axis, the other tabs draw it when they are next shown, and "Whole run" resets it.

Text from the data (span
attributes, incident summaries) is only ever shown escaped: HTML panes get ``html.escape``d
strings, tables use Tabulator's ``plaintext``/``textarea`` formatters, which sanitise.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import holoviews as hv
import pandas as pd
import panel as pn
import param
from bokeh.models import Range1d
from bokeh.plotting import figure

from rolloutscope.dashboard import plots, run_picture, style, tables
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.dashboard.datastore import DataStore

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
.rs-keys {font-size: 12px; line-height: 1.6; color: #33414e; margin: 2px 0 0 0}
.rs-key {display: inline-block; margin-right: 14px; white-space: nowrap}
.rs-key span {font-size: 14px}
.rs-plot-title {font-size: 13px; font-weight: 600; margin: 6px 0 0 0}
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


def window_text(data: DataStore) -> str:
    """What the window mode shows, in words ("" for a run read whole)."""
    shown = data.window_seconds()
    if shown is None:
        return ""
    t0 = data.origin_ns()
    lo, hi = (_utc(t0 + int(v * S))[11:19] for v in shown)
    length = max(data.last_seen_ns() - t0, 0) / S
    run = f"{length / 3600:,.1f} h" if length >= 3600 else f"{length / 60:,.0f} min"
    head = ", following its head" if data.window[1] is None and data.live else ""
    return (f"Rows of {lo}–{hi} UTC ({shown[0]:,.0f} s to {shown[1]:,.0f} s) of a {run} run"
            f"{head}: the run is large, so this tab reads one stretch of it. Pick another "
            f"stretch on the Overview (drag across the whole-run picture), pick an incident, "
            f"or zoom out on a time plot.")


class _ServedHTML(pn.pane.HTML):
    """An HTML pane that keeps its stylesheets on the server it is served from while a hidden
    tab holds its model. Dynamic tabs keep a hidden tab's models off the page (no document),
    and Panel 1.9 updating such a model resolves the stylesheets for no document: to its CDN,
    rewriting the session's shared ``loading.css`` stylesheet too, which a page served offline
    then fails to load. Resolved for the session's document instead."""

    def _get_properties(self, doc):
        return super()._get_properties(doc if doc is not None else pn.state.curdoc)


def window_note(data: DataStore) -> pn.pane.HTML:
    """The window mode's note (hidden for a run read whole), kept up as the window moves (on
    every tab, shown or not: ``_ServedHTML``)."""
    pane = _ServedHTML(stylesheets=[CSS], sizing_mode="stretch_width", margin=(0, 10))

    def show(*_):
        text = window_text(data)
        pane.object = (f"<div class='rs-note rs-window'>{html.escape(text)}</div>"
                       if text else "")
        pane.visible = bool(text)

    show()
    data.param.watch(show, ["window", "version"])
    return pane


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
        d = self.data
        names = ("checkpoint_windows", "checkpoint_ops", "shard_states", "rollout_attempts",
                 "parked_intervals", "deadlines", "completions", "incidents",
                 "engine_state", "engine_requests", "shard_engines")
        return d.derived(("lane_frames", tuple(rollout_ids), evidence,
                          None if keep is None else tuple(keep)), names,
                         lambda: self._select_frames(names, rollout_ids, evidence, keep))

    def _select_frames(self, names, rollout_ids, evidence, keep) -> tl.TimelineFrames:
        f = self.data.frames
        kept = set(names) if keep is None else set(keep) | {"incidents"}
        sub = {name: f[name] if name in kept else f[name].iloc[:0] for name in names}
        ids = set(map(str, rollout_ids))
        for name in ("rollout_attempts", "parked_intervals", "deadlines", "completions"):
            sub[name] = self.data.rows_of_rollouts(name, ids) if name in kept else sub[name]
        # the bars' text of the frames drawn whole, once per frame version: a live tick that
        # brings new tries redraws the lanes without remaking every shard's and operation's
        texts = {name: self.data.derived(("bar_texts", name), (name,),
                                         lambda name=name: tl.bar_texts(name, f[name]))
                 for name in ("checkpoint_windows", "checkpoint_ops", "shard_states",
                              "engine_requests")
                 if name in kept and len(f[name])}
        return tl.TimelineFrames(**sub, rollout_ids=tuple(rollout_ids), evidence=evidence,
                                 bar_texts=texts)

    def _t0(self) -> int:
        return self.data.origin_ns()


@dataclass
class _PlotSet:
    """The figures of one rendering of a view, on one x range, and what they last drew."""

    x_range: Range1d
    figures: list[tuple[Callable[[], tf.Plot], figure]]  # (its builder, the figure shown)
    mark: tuple


class TimeView(View):
    """A view whose time plots show the run's one time range (``DataStore.time_range``).

    Its plots (``time_plots``) are Bokeh figures on one ``Range1d``: a zoom or pan on one moves
    the others in the browser and becomes the DataStore's range; a range set anywhere else
    (another tab, an incident picked, "Whole run", a link) redraws this view's plots now if it
    is on screen, else when it is next shown (``view_range``). Its builders return plots as
    data (``time_figures.Plot``); the first is rendered as figures, and a redraw moves a fresh
    plot's data onto the figure on screen (``time_figures.redraw``), once per change of what it
    draws: the DataStore's version, the range, and the choices named in ``CHOICES`` (the
    DataStore's parameters the plots read)."""

    CHOICES: tuple[str, ...] = ()
    view_range = param.Integer(default=0, doc="bumped when the time range moved elsewhere")

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._shown_range: tuple[float, float] | None = None
        self._range_stale = False
        self._setting_range = False  # the range moves because this view drew it, not a zoom
        self._plot_sets: list[_PlotSet] = []
        data.param.watch(self._on_time_range, "time_range")
        self.param.watch(self._redraw, ["revision", "view_range"])
        if self.CHOICES:
            data.param.watch(self._on_choice, list(self.CHOICES))

    def _catch_up(self, *_) -> None:
        """On screen again (or a new version while on screen): the version and a range moved
        elsewhere in one update, so the plots redraw once."""
        if not self.shown:
            return
        moved = {}
        if self.revision != self.data.version:
            moved["revision"] = self.data.version
        if self._range_stale:
            self._range_stale = False
            moved["view_range"] = self.view_range + 1
        if moved:
            self.param.update(moved)
        else:
            self._redraw()  # a choice made on another tab

    def _on_time_range(self, event) -> None:
        if self.data.range_from(self):
            return
        if self.shown:
            self.view_range += 1
        else:
            self._range_stale = True

    def _on_choice(self, event) -> None:
        if self.shown:
            self._redraw()

    def _draw_mark(self) -> tuple:
        return (self.revision, self.view_range, *(getattr(self.data, c) for c in self.CHOICES))

    def time_plots(self, *builders: Callable[[], tf.Plot]) -> list[pn.pane.Bokeh]:
        """A page-wide pane for the plot each of ``builders`` makes, every one on the same
        x range (the first plot's), watched for the user's zooms and pans."""
        figures = [tf.render(build()) for build in builders]
        rng = Range1d(figures[0].x_range.start, figures[0].x_range.end, name="x")
        for fig in figures:
            fig.x_range = rng

        def moved(attr, old, new) -> None:
            if not self._setting_range:
                self._on_range(x_range=(rng.start, rng.end))

        rng.on_change("start", moved)
        rng.on_change("end", moved)
        self._shown_range = (rng.start, rng.end)
        self._plot_sets.append(_PlotSet(rng, list(zip(builders, figures)), self._draw_mark()))
        return [pn.pane.Bokeh(fig, sizing_mode="stretch_width") for fig in figures]

    def _redraw(self, *_) -> None:
        """Redraw each plot set whose mark moved, its model edits held and sent as one.

        ``pn.io.hold`` is what makes an edit of Bokeh models safe in every callback Panel runs:
        a click that reaches the server while a change from the browser is still pending is
        handled outside the Bokeh document lock, and a bare model edit there raises (Bokeh:
        "_pending_writes should be non-None…") half-way through the redraw."""
        mark = self._draw_mark()
        stale = [ps for ps in self._plot_sets if ps.mark != mark]
        if not stale:
            return
        with pn.io.hold():
            for ps in stale:
                ps.mark = mark
                fresh = [build() for build, _ in ps.figures]
                for (_, shown), new in zip(ps.figures, fresh):
                    tf.redraw(shown, new)
                self._shown_range = tuple(fresh[0].xlim)
                self._setting_range = True
                try:
                    ps.x_range.update(start=fresh[0].xlim[0], end=fresh[0].xlim[1])
                finally:
                    self._setting_range = False

    def _on_range(self, x_range=None, **_) -> None:
        if x_range is None or None in x_range:
            return
        rng = (float(x_range[0]), float(x_range[1]))
        if not all(math.isfinite(v) for v in rng):
            return  # a plot not laid out yet reports NaN
        shown = self._shown_range
        if shown is not None and all(abs(a - b) <= 1e-6 * max(1.0, abs(b))
                                     for a, b in zip(rng, shown)):
            return  # the range this view drew, echoed back by the browser
        self._shown_range = rng
        self.data.show_range(rng, source=self)

    def xlim(self, default: tuple[float, float]) -> tuple[float, float]:
        """The range to draw: the shared one, else this view's ``default``."""
        rng = self.data.time_range or default
        self._shown_range = rng
        return rng


def plot_title(text: str) -> pn.pane.HTML:
    return pn.pane.HTML(f"<div class='rs-plot-title'>{html.escape(text)}</div>",
                        stylesheets=[CSS], sizing_mode="stretch_width", margin=(0, 10))


def key_pane(markup: str = "") -> pn.pane.HTML:
    return pn.pane.HTML(markup, stylesheets=[CSS], sizing_mode="stretch_width",
                        margin=(0, 10, 0, 10))


def scrolling(pane: pn.pane.Bokeh) -> pn.Column:
    """A lane plot taller than the screen scrolls inside its own box (its lanes stay readable,
    the plots below stay in view)."""
    return pn.Column(pane, scroll=True, max_height=style.MAX_VISIBLE_PLOT_PX,
                     sizing_mode="stretch_width")


class _Pick:
    """A stretch picked on the whole-run picture: ``event(boundsx=(x0, x1))`` hands it on."""

    def __init__(self, to) -> None:
        self._to = to

    def event(self, boundsx=None) -> None:
        self._to(boundsx=boundsx)


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
        self._picture = pn.pane.Bokeh(sizing_mode="stretch_width")
        self._picture_note = pn.pane.HTML(stylesheets=[CSS], sizing_mode="stretch_width")
        self.pick: _Pick | None = None  # window mode: a stretch picked on it
        self._draw_picture()
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

    def _draw_picture(self) -> None:
        """The whole run from the store's kept per-second sums (``run_picture``)."""
        self._changed("picture", "rollout_attempts", "parked_intervals", "shard_states",
                      "deadlines")
        if not self.data.large:
            # a run read whole: the Timeline draws all of it already
            self._picture.visible = False
            self._picture_note.object = ""
            return
        got = self.data.run_buckets()
        if got is None:
            self._picture.visible = False
            self._picture_note.object = (
                "<span class='rs-note'>No whole-run picture: this store keeps no per-second "
                "sums (a lake, or a file written by an older version: opening it once for "
                "writing derives them), and the run is too large to sum its rows here.</span>"
                if self.data.run_id is not None else "")
            return
        buckets, width = got
        picture = run_picture.figure(buckets, width, self._t0(), pickable=self.data.large)
        pick = ""
        if self.data.large:
            self._pickable(picture)
            pick = ("; drag across it (box select) to read that stretch on every tab")
        self._picture.object = picture
        self._picture.visible = True
        self._picture_note.object = (
            f"<span class='rs-note'><b>The whole run</b>, in {len(buckets):,} buckets of "
            f"{width:g} s, from the store's per-second sums (its cost follows the run's "
            f"length, not its rows){pick}</span>")

    def _pickable(self, picture) -> None:
        """Window mode: a stretch selected across the picture's gauges (its box select) becomes
        the time range of every tab, which moves the DataStore's window onto it."""
        from bokeh.events import SelectionGeometry

        self.pick = _Pick(self._picked)
        picture.children[0].on_event(
            SelectionGeometry,
            lambda e: self.pick.event(boundsx=(e.geometry.get("x0"), e.geometry.get("x1"))))

    def _picked(self, boundsx=None, **_) -> None:
        if boundsx is None or None in boundsx or not boundsx[1] > boundsx[0]:
            return
        self.data.show_range((float(boundsx[0]), float(boundsx[1])))

    def _on_version(self, event) -> None:
        if self._changed("picture", "rollout_attempts", "parked_intervals", "shard_states",
                         "deadlines"):
            self._draw_picture()
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
        return pn.Column(self.header, window_note(self.data), self.indicators,
                         self._picture_note, self._picture,
                         pn.pane.HTML("<b>Incidents</b> <span class='rs-note'>newest first; "
                                      "select one to follow it on the timeline</span>",
                                      stylesheets=[CSS]),
                         self._table, holdings, sizing_mode="stretch_width")


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
        # column by column, not row by row: a 10M-span run has ~1,600 incidents
        for start, severity, kind, subject, key in zip(
                ((inc.start_ns - t0) / S).tolist(),
                *(inc[c].astype(str).tolist() for c in ("severity", "kind", "subject",
                                                          "incident_id"))):
            opts[f"{start:,.1f} s  {severity}  {kind}  {subject}"] = key
        return opts

    def current() -> str:
        return data.incident or (fallback(data) if fallback is not None else None) or ""

    def listed() -> tuple:  # what the options are made of
        return (data.run_id, data.frame_versions["incidents"], data.origin_ns())

    sel = pn.widgets.Select(label="incident", options=options(), value=current(), width=420)
    echo = [False]  # a value set from the data is not the user's choice
    made = [listed()]

    def to_data(event):
        if not echo[0] and event.new != current():
            data.incident = event.new or None

    def from_data(event):
        echo[0] = True
        try:
            # only when the incidents changed: a 10M-span run lists ~1,600, and sending them
            # again took ~0.1 s of every live tick that read new tries
            if event.name == "version" and listed() != made[0]:
                made[0] = listed()
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
            window_note(self.data), self._empty,
            pn.Row(pn.Column("**Snapshot windows** (admission closed → reopened)",
                             self._windows, sizing_mode="stretch_width"),
                   pn.Column(self._distribution, sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            "**Phases per checkpoint and participant** (seconds; worst outcome; blockers)",
            self._phases,
            "**Steps inside operations** (wait_ready, export, write, read, install; the "
            "controller's prepare stages)",
            self._steps, sizing_mode="stretch_width")


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
        # derived once per server for the same frames and filters (DataStore.derived)
        d, t0 = self.data, self._t0()
        return d.derived(("rollouts table", tuple(d.outcomes), d.failure_class, t0),
                         ("rollout_attempts",), lambda: self._table_rows(t0))

    def _table_rows(self, t0: int) -> pd.DataFrame:
        a = self.data.attempts_table().sort_values("start_ns")
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
            said = [t for t in map(self.data.capped_text, ("gym_rollouts", "model_calls")) if t]
            note = (f"<span class='rs-note'>{html.escape('; '.join(said))}</span>"
                    if said else "")
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
        now = d.last_seen_ns()
        ov = d.derived(("deadline overlaps", now), ("deadlines", "checkpoint_windows"),
                       lambda: plots.deadline_overlaps(d.frames["deadlines"],
                                                       d.frames["checkpoint_windows"],
                                                       now_ns=now))
        if not len(ov):
            return pn.pane.HTML("<span class='rs-note'>No rollout deadline crossed a snapshot "
                                "window.</span>", stylesheets=[CSS])
        shown = ov.row.nunique()
        return pn.Column(
            plot_title("Rollout deadlines against the snapshots they crossed"),
            key_pane(tl.key_html(plots.OVERLAP_KEY, note=(
                f"{shown:,} deadline(s), fired ones first; seconds since each deadline "
                "started"))),
            pn.pane.HoloViews(plots.overlap_plot(ov), sizing_mode="stretch_width"),
            sizing_mode="stretch_width")

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
        return pn.Column(window_note(self.data), self._empty, self._overlap,
                         "**Attempts** (RL tries and Gym rollout attempts; filter by outcome, "
                         "none selected = all; select one to open its trace)",
                         filters, self._table, self._gym_part, sizing_mode="stretch_width")


# the time-axis tabs live in their own modules, which build on the View classes above; they are
# still importable from here (notebooks do: ``from rolloutscope.dashboard.tabs import Fleet``)
_ELSEWHERE = {"Timeline": "time_views", "Fleet": "time_views", "IncidentDetail": "incident_view"}


def __getattr__(name: str):
    if name in _ELSEWHERE:
        import importlib

        module = importlib.import_module(f"rolloutscope.dashboard.{_ELSEWHERE[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Overview", "Checkpoints", "Rollouts", "TimeView", "View", "style", *_ELSEWHERE]
