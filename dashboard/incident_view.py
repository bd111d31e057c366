"""The Incident tab: one incident as a numbered story beside the lanes, gauges and serving line
that show it (``scene.incident_scene``): the selected incident, else the newest critical one.

The scene reads, on demand and once per incident, the spans around it that no model view holds
(``DataStore.incident_context``); everything else comes from the DataStore's frames.
"""

from __future__ import annotations

import html

import pandas as pd
import panel as pn
import param

from rolloutscope.dashboard import plots, style
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.scene import Scene, incident_scene
from rolloutscope.dashboard.story import incident_story, story_html
from rolloutscope.dashboard.time_views import committed_label
from rolloutscope.dashboard.tabs import (
    CSS,
    TimeView,
    incident_selector,
    key_pane,
    newest_critical,
    plot_title,
    scrolling,
)

S = 1e9


class IncidentDetail(TimeView):
    """An incident as a numbered story beside the plots that show it: the selected one, else
    the newest critical one."""

    CHOICES = ("incident",)

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._scene_for: tuple | None = None
        self._scene: Scene | None = None

    def shown_incident(self):
        """The selected incident's row, else the newest critical one's (remembered per pick
        and version: a first render asks for it from every part)."""
        d = self.data
        return d.derived(("shown_incident", d.incident), ("incidents",), self._shown_incident)

    def _shown_incident(self):
        d = self.data
        inc = d.selected_incident()
        if inc is None and (newest := newest_critical(d)) is not None:
            rows = d.frames["incidents"]
            inc = rows[rows.incident_id.astype(str) == newest].iloc[0].to_dict()
        return inc

    def window(self, inc) -> tuple[float, float]:
        """The shown incident's seconds: the shared range once the user picked it (or zoomed),
        else its own window."""
        own = self.data.incident_window(inc)
        return self.xlim(own) if self.data.incident else own

    def scene(self) -> Scene | None:
        d = self.data
        inc = self.shown_incident()
        if inc is None:
            return None
        own = d.incident_window(inc)
        mark = (d.run_id, str(inc["incident_id"]), d.version)
        if mark == self._scene_for and self._scene is not None:
            return self._scene
        ids = sorted(d.incident_rollouts(str(inc["incident_id"])))
        frames = self._frames(rollout_ids=ids, evidence=d.evidence(inc))
        sub = {name: getattr(frames, name) for name in (
            "checkpoint_windows", "checkpoint_ops", "shard_states", "rollout_attempts",
            "parked_intervals", "deadlines", "completions", "incidents")}
        # the unfiltered model rows: the scene picks what the incident names
        for name in ("checkpoint_ops", "shard_states"):
            sub[name] = d.frames[name]
        self._scene = incident_scene(
            inc, sub, t0_ns=self._t0(), now_ns=d.last_seen_ns(), rollout_ids=ids,
            context=d.incident_context(inc, own),
            stall_timeout_s=d.thresholds().get("stall_timeout_s"))
        self._scene_for = mark
        return self._scene

    @param.depends("data.incident", "revision")
    def story(self):
        d = self.data
        inc = self.shown_incident()
        if inc is None:
            return pn.pane.HTML("<span class='rs-note'>No incident in this run yet; select one "
                                "when it appears.</span>", stylesheets=[CSS])
        incidents = d.frames["incidents"]
        # the story reads only evidence rows: those of every incident, not every row
        st = incident_story(inc, d.evidence_frames(), t0_ns=self._t0(), incidents=incidents,
                            context=d.incident_context(inc, d.incident_window(inc)))
        cause = None
        if st.caused_by:
            rows = incidents[incidents.incident_id == st.caused_by]
            cause = str(rows.summary.iloc[0]) if len(rows) else None
        note = "" if d.incident else ("<div class='rs-note'>the newest critical incident; pick "
                                      "another above</div>")
        return pn.pane.HTML(note + story_html(st, subject=str(inc["subject"]),
                                              caused_by_summary=cause) + self._why(inc),
                            stylesheets=[CSS], sizing_mode="stretch_width")

    WHY_GROUPS = 5  # groups listed under the answer; the answer counts them all

    def _why(self, inc) -> str:
        """What the run waited on while the incident lasted (``rolloutscope why``), as HTML."""
        e = html.escape
        w = self.data.waiting_at(inc)
        items = "".join(
            f"<li>{e(g.group)}{' ' + e(g.rollout) if g.rollout else ''}: {e(g.doing)} for "
            f"{g.for_s:,.0f} s" + (f" <span class='rs-note'>({e(g.evidence.name)} "
                                   f"{e(g.evidence.span_id)})</span>" if g.evidence else "")
            + "</li>" for g in w.groups[:self.WHY_GROUPS])
        return (f"<div class='rs-why'><h4>Waiting on, at {w.at_s:,.1f} s</h4>"
                f"<div>{e(w.answer)}</div><ul>{items}</ul></div>")

    def _highlight(self, inc) -> tuple[float, float]:
        t0, now = self._t0(), self.data.last_seen_ns()
        end = inc["end_ns"] if pd.notna(inc["end_ns"]) else now
        return ((inc["start_ns"] - t0) / S, (end - t0) / S)

    def plots(self) -> list:
        """The lanes, the gauges and the serving plot, on one x range."""
        return self.time_plots(self.lane_figure, self.gauge_figure, self.serving_figure)

    def lane_figure(self):
        d = self.data
        scene = self.scene()
        t0, now = self._t0(), d.last_seen_ns()
        if scene is None:
            empty = tl.TimelineFrames(**{n: d.frames[n].iloc[:0] for n in (
                "checkpoint_windows", "checkpoint_ops", "shard_states", "rollout_attempts",
                "parked_intervals", "deadlines", "completions", "incidents")})
            return tf.lane_layers(empty, t0_ns=t0, now_ns=now, xlim=d.whole_run())
        inc = self.shown_incident()
        return tf.lane_layers(scene.frames, t0_ns=t0, now_ns=now, xlim=self.window(inc),
                            highlight=self._highlight(inc))

    def gauge_figure(self):
        d = self.data
        scene = self.scene()
        inc = self.shown_incident()
        if scene is not None and scene.gauges:
            g, _ = d.rollout_gauges()
        else:  # not shown for this incident: drawn empty, made when an incident shows it
            g, _ = tl.rollout_gauges_frame(d.frames["rollout_attempts"].iloc[:0], t0_ns=0,
                                           now_ns=0)
        xlim = self.window(inc) if inc is not None else d.whole_run()
        return tf.gauge_layers(g, xlim=xlim, marks=scene.marks if scene is not None else None,
                                 committed_label=committed_label(d))

    def serving_figure(self):
        d = self.data
        inc = self.shown_incident()
        scene = self.scene()
        t0 = self._t0()
        xlim = self.window(inc) if inc is not None else d.whole_run()
        if scene is None or not scene.serving:  # not shown for this incident: drawn empty
            return tf.serving_layers(d.frames["shard_states"].iloc[:0], t0_ns=t0,
                                     now_ns=d.last_seen_ns(), xlim=xlim)
        return tf.serving_layers(d.frames["shard_states"], t0_ns=t0, now_ns=d.last_seen_ns(),
                               router=plots.router_samples(d.frames["serving_samples"], t0),
                               fleet=plots.fleet_samples(d.frames["serving_samples"], t0),
                               xlim=xlim)

    @param.depends("data.incident", "revision")
    def _key(self) -> pn.pane.HTML:
        scene = self.scene()
        if scene is None:
            return key_pane("")
        return key_pane(tl.key_html(tl.lane_key(scene.frames, t0_ns=self._t0(), highlight=True),
                                    note="hover any bar or marker for its span"))

    def __panel__(self):
        lanes, gauges, serving = self.plots()
        gauge_part = pn.Column(
            plot_title("Rollouts: committed and in flight"),
            key_pane(tl.key_html([("tries in flight (left axis)", "━", style.INFO),
                                  ("tries committed so far (right axis)", "━", style.OK),
                                  ("the watchdog's stall line, stall_timeout_s", "┆",
                                   style.WARN)])),
            gauges, sizing_mode="stretch_width")
        serving_part = pn.Column(plot_title("Serving: fleet against router"),
                                 key_pane(tl.key_html(tl.SERVING_KEY)), serving,
                                 sizing_mode="stretch_width")
        plots_col = pn.Column(self._key, scrolling(lanes), gauge_part, serving_part,
                              sizing_mode="stretch_width")

        def parts(*_):
            scene = self.scene()
            plots_col.visible = scene is not None
            gauge_part.visible = scene is not None and scene.gauges
            serving_part.visible = scene is not None and scene.serving

        parts()
        self.param.watch(parts, "revision")
        self.data.param.watch(parts, "incident")
        return pn.Column(incident_selector(self.data, fallback=newest_critical),
                         pn.Row(pn.Column(self.story, width=560), plots_col,
                                sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


__all__ = ["IncidentDetail"]
