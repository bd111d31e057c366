"""The Timeline and Fleet tabs: lanes on the run's time axis, the gauges that count every
rollout however many lanes are drawn, and the serving step line.

Each plot is a Bokeh figure (``time_figures``) redrawn in place when the view's ``revision``
(the DataStore's frames), its ``view_range`` (the shared time range) or a filter it draws moves;
every plot of a tab shares one x range, so a zoom on one moves the others in the browser and
becomes the time range of every tab (``TimeView``).
"""

from __future__ import annotations

import html

import pandas as pd
import panel as pn
import param

from rolloutscope.dashboard import plots, style
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.dashboard.datastore import VIEWS, DataStore
from rolloutscope.dashboard.tabs import (
    CSS,
    TimeView,
    empty_note,
    incident_selector,
    key_pane,
    plot_title,
    scrolling,
    text_table,
    window_note,
)

S = 1e9


class Timeline(TimeView):
    """Checkpoint windows, participants, shards and rollouts on one linked time axis, the
    rollout gauges and the serving shards under it."""

    CHOICES = ("rollout_filter", "failure_class")

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self.whole = pn.widgets.Button(label="Whole run", width=100)
        self.whole.on_click(self._whole_run)
        self._sampled = False

    def _whole_run(self, *_) -> None:
        self.data.incident = None
        self.data.show_range(self.data.whole_run())

    def _drawn_extent(self) -> tuple[float, float]:
        """Where the bars are, padded, within the whole run: a run whose rows fill only part
        of its time (a Gym deployment's rollouts after a minute of start-up) opens on them;
        one whose rows span it (a shard's stay) opens on the whole run. "Whole run" resets."""
        return self.data.derived(("drawn_extent",), tuple(VIEWS), self._extent)

    def _extent(self) -> tuple[float, float]:
        d = self.data
        if d.windowed:  # window mode: the window the frames hold
            return d.shown_stretch()
        whole = d.whole_run()
        t0 = d.origin_ns()
        starts, ends = [], []
        for name in ("checkpoint_windows", "checkpoint_ops", "shard_states", "rollout_attempts"):
            df = d.frames[name]
            if len(df):
                starts.append(int(df.start_ns.min()))
                ends.append(int(df.end_ns.fillna(d.last_seen_ns()).max()))
        if not starts:
            return whole
        lo, hi = (min(starts) - t0) / S, (max(ends) - t0) / S
        pad = max((hi - lo) * 0.05, 1e-3)
        return (max(whole[0], lo - pad), min(whole[1], hi + pad))

    def xlim(self, default=None) -> tuple[float, float]:
        return super().xlim(default or self._drawn_extent())

    def plots(self) -> list:
        """The lanes, the gauges and the serving plot, on one x range."""
        return self.time_plots(self.lane_figure, self.gauge_figure, self.serving_figure)

    def lane_figure(self):
        d = self.data
        ids, total = d.rollout_lanes()
        frames = self._frames(rollout_ids=ids, evidence=d.evidence())
        inc = d.selected_incident()
        t0, now = d.origin_ns(), d.last_seen_ns()
        highlight = None
        if inc is not None:
            end = inc["end_ns"] if pd.notna(inc["end_ns"]) else now
            highlight = ((inc["start_ns"] - t0) / S, (end - t0) / S)
        return tf.lane_layers(frames, t0_ns=t0, now_ns=now, xlim=self.xlim(),
                            highlight=highlight)

    def gauge_figure(self):
        d = self.data
        g, self._sampled = d.rollout_gauges()
        return tf.gauge_layers(g, xlim=self.xlim(), committed_label=committed_label(d))

    def serving_figure(self):
        d = self.data
        t0, now = d.origin_ns(), d.last_seen_ns()
        return tf.serving_layers(d.frames["shard_states"], t0_ns=t0, now_ns=now,
                               xlim=self.xlim(),
                               router=plots.router_samples(d.frames["serving_samples"], t0),
                               fleet=plots.fleet_samples(d.frames["serving_samples"], t0))

    @param.depends("revision", "data.incident", "data.rollout_filter", "data.failure_class")
    def note(self) -> pn.pane.HTML:
        d = self.data
        ids, total = d.rollout_lanes()
        if d.state() != "ok":
            return empty_note(d, "rollout, checkpoint or fleet rows to draw",
                              "The timeline draws rollout attempts (RL tries, Gym's "
                              "gym.rollout), checkpoint operations and shard states.")
        which = d.rollout_filter + (f", {d.failure_class}" if d.failure_class != "any" else "")
        shown = f"showing {len(ids):,} of {total:,} rollouts" if total else "no rollouts"
        tries = len(d.frames["rollout_attempts"])
        rest = (f"; the gauges below count all {tries:,} tries" if total > len(ids) else "")
        frames = self._frames(rollout_ids=ids, evidence=d.evidence())
        key = tl.key_html(tl.lane_key(frames, t0_ns=d.origin_ns(),
                                      highlight=d.incident is not None))
        return pn.pane.HTML(
            f"<span class='rs-note'>{html.escape(shown)} ({html.escape(which)}){rest}; "
            "wheel zooms time, drag pans, a zoom here applies to every tab; hover a bar or "
            f"marker for its span</span>{key}", stylesheets=[CSS], sizing_mode="stretch_width")

    @param.depends("revision")
    def _gauge_note(self) -> pn.pane.HTML:
        label = committed_label(self.data)
        sampled = (f" (sampled at {tl.GAUGE_POINTS:,} instants)" if self._sampled else "")
        keys = [("tries in flight (left axis)", "━", style.INFO),
                (f"tries {label} (right axis)", "━", style.OK)]
        return key_pane(tl.key_html(keys, note=f"every try of the run{sampled}"))

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
        lanes, gauges, serving = self.plots()
        d = self.data
        gauge_part = pn.Column(plot_title("Rollouts"), self._gauge_note, gauges,
                               sizing_mode="stretch_width")
        serving_part = pn.Column(plot_title("Serving"), key_pane(tl.key_html(tl.SERVING_KEY)),
                                 serving, sizing_mode="stretch_width")

        def parts(*_):
            gauge_part.visible = bool(len(d.frames["rollout_attempts"]))
            serving_part.visible = bool(len(d.frames["shard_states"])
                                        or d.frames["serving_samples"].router_serving.notna()
                                        .any())

        parts()
        self.param.watch(parts, "revision")
        return pn.Column(controls, window_note(d), self.note, scrolling(lanes), gauge_part,
                         serving_part, sizing_mode="stretch_width")


def committed_label(data: DataStore) -> str:
    """What the gauges count as done: RL commits, or Gym's finished rollouts."""
    return "finished so far" if data.dialects() == {"gym"} else "committed so far"


# the Fleet tab's lanes: the shards and, beside them, the engines that serve them
FLEET_LANES = ("checkpoint_windows", "shard_states", "engine_state", "engine_requests",
               "shard_engines")


class Fleet(TimeView):
    """Shard lanes, transitions with triggers, probe vs reported failures, router vs fleet."""

    FRAMES = ("shard_states", "serving_samples", "run_thresholds", "model_calls",
              "span_catalog", "engine_state", "engine_requests")

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._transitions = text_table(self._rows(), page_size=15)
        self._streaks = pn.pane.HoloViews(plots.failure_streaks(data.frames["shard_states"]),
                                          sizing_mode="stretch_width")
        self._streak_note = key_pane(self._streak_text())
        self._router_note = pn.pane.HTML(self._router_text(), stylesheets=[CSS])
        self._backends = text_table(self._backend_rows(), page_size=10)
        self._backend_header = pn.pane.Markdown(
            "**Model backends** (from model_calls: each backend a traced model call reached; "
            "latency is the backend's, tries include retries)")
        self._no_backends = pn.pane.HTML(
            "<span class='rs-note'>Model backends: no traced model call in this run "
            "(gym.model.* spans or a client's calls to a generation route)</span>",
            stylesheets=[CSS])
        self._backend_part = pn.Column(sizing_mode="stretch_width")
        self._empty = pn.Column(sizing_mode="stretch_width")
        self._plots = pn.Column(sizing_mode="stretch_width")
        self._show_empty()
        self._changed("tables", *self.FRAMES)
        self.param.watch(self._update, "revision")

    def _rows(self) -> pd.DataFrame:
        return plots.transitions_table(self.data.frames["shard_states"], self._t0())

    def _backend_rows(self) -> pd.DataFrame:
        return plots.backend_summary(self.data.frames["model_calls"], self._t0())

    def _streak_text(self) -> str:
        shards = self.data.frames["shard_states"]
        quiet = plots.quiet_shards(shards)
        note = (f"{quiet:,} shard(s) never failed a probe or a generation, not drawn"
                if quiet else "")
        return tl.key_html([("probe failures", "■", style.INFO),
                            ("reported (generation) failures", "■", style.ERROR)], note=note)

    def _show_empty(self) -> None:
        # the table or the note, swapped rather than hidden: Panel 1.9's Tabulator, built but
        # never rendered inside a hidden parent, loops on its pending resize and freezes the page
        backends = ([self._backend_header, self._backends] if len(self._backends.value)
                    else [self._no_backends])
        if self._backend_part.objects != backends:
            self._backend_part[:] = backends
        has = any(len(self.data.frames[name]) for name in
                  ("shard_states", "engine_state", "engine_requests"))
        self._plots.visible = has
        if has:
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
            self._streak_note.object = self._streak_text()
            self._router_note.object = self._router_text()
            self._backends.value = self._backend_rows()
            self._show_empty()

    def lane_figure(self):
        d = self.data
        frames = self._frames(keep=FLEET_LANES)
        return tf.lane_layers(frames, t0_ns=d.origin_ns(), now_ns=d.last_seen_ns(),
                            xlim=self.xlim(d.shown_stretch()), markers=False)

    def serving_figure(self):
        d = self.data
        t0 = d.origin_ns()
        return tf.serving_layers(d.frames["shard_states"], t0_ns=t0, now_ns=d.last_seen_ns(),
                               router=plots.router_samples(d.frames["serving_samples"], t0),
                               fleet=plots.fleet_samples(d.frames["serving_samples"], t0),
                               xlim=self.xlim(d.shown_stretch()))

    def plots(self) -> list:
        """The shard lanes and the serving plot, on one x range."""
        return self.time_plots(self.lane_figure, self.serving_figure)

    @param.depends("revision")
    def _lane_key(self) -> pn.pane.HTML:
        frames = self._frames(keep=FLEET_LANES)
        return key_pane(tl.key_html(tl.lane_key(frames, markers=False)))

    def _router_text(self) -> str:
        if self.data.frames["serving_samples"].router_serving.notna().any():
            return ""
        return "<span class='rs-note'>router serving backends: no samples in this run</span>"

    def __panel__(self):
        lanes, serving = self.plots()
        self._plots[:] = [plot_title("Shards"), self._lane_key, scrolling(lanes),
                          plot_title("Serving"), key_pane(tl.key_html(tl.SERVING_KEY)),
                          serving, self._router_note]
        return pn.Column(window_note(self.data), self._empty, self._plots, pn.Row(
            pn.Column("**Transitions** (trigger, streak counters, error)", self._transitions,
                      sizing_mode="stretch_width"),
            pn.Column(plot_title("Worst failure streak per shard"), self._streak_note,
                      self._streaks, width=460)),
            self._backend_part, sizing_mode="stretch_width")


__all__ = ["Fleet", "Timeline"]
