"""The Replay view: a captured run ("before", the DataStore's run) against a replay of it
("after"), as two timelines on one simulated-time axis and what happened to each incident.

The after run is another run of the same store file (``rolloutscope replay RUN.duckdb --out
RUN.duckdb``, or ``replay_into_store`` with another run id), picked from the file's runs, or a
run of another store handed to the constructor. A replay names its capture in
``run_reads.parent_run_id``; that run is the default pick. Rows come from
``rolloutscope.store.run_reads`` (``timeline_frames``, ``incident_frame``, ``outcome_counts``),
re-read only when the pair of runs or the before run's incidents changed.
"""

from __future__ import annotations

import html

import pandas as pd
import panel as pn
import param

from rolloutscope.store import RunStore, run_reads
from rolloutscope.dashboard import replay_plot as rp
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.tabs import (
    CSS,
    TimeView,
    incident_selector,
    key_pane,
    newest_critical,
    text_table,
)
from rolloutscope.dashboard.timeline_plot import key_html

PAD_S = 60.0  # simulated seconds shown either side of a selected incident


class Replay(TimeView):
    """Before/after timelines of a capture and its replay, incidents reproduced / vanished /
    appeared, and the outcome counts of both."""

    CHOICES = ("incident",)
    after_run = param.Selector(default=None, objects=[], allow_None=True,
                               doc="the replay compared with the DataStore's run")

    def __init__(self, data: DataStore, *, after_store: RunStore | None = None,
                 after_run: str | None = None, **params) -> None:
        super().__init__(data, **params)
        self.after_store = after_store or data.store
        self._pick_runs(after_run)
        self._before = self._after = pd.DataFrame(columns=run_reads.TIMELINE_COLUMNS)
        self._before_incidents = pd.DataFrame(columns=["incident_id", "start_s", "key"])
        self._lanes: tuple[str, ...] = ("snapshots", "incidents")
        self._rollouts = 0
        self._span = (0.0, 1.0)
        self._verdicts = text_table(pd.DataFrame(columns=rp.VERDICT_COLUMNS), page_size=12)
        self._outcomes = text_table(pd.DataFrame(columns=["outcome", "before", "after"]),
                                    pagination=None, page_size=None)
        self._note = pn.pane.HTML(stylesheets=[CSS], sizing_mode="stretch_width")
        self._after_read: tuple = ()  # the after run's size when it was last read
        self._load()
        self.param.watch(self._redraw, "after_run")
        data.param.watch(self._on_run, "run_id")
        # each live refresh: a replay still being written beside its capture grows with no
        # change to the capture's frames, so nothing else would tell this view to read it again
        data.param.watch(self._on_refresh, "last_refresh_ms", onlychanged=False)

    # -- which runs ------------------------------------------------------------------------
    def _pick_runs(self, after_run: str | None) -> None:
        same_file = self.after_store is self.data.store
        runs = [r for r in self.after_store.run_ids() if not same_file or r != self.data.run_id]
        self._runs_seen = tuple(runs)
        self.param.after_run.objects = runs
        if after_run is None and runs:
            children = [r for (r,) in self.after_store.query(
                "SELECT run_id FROM runs WHERE parent_run_id = ? ORDER BY created_ns DESC",
                [self.data.run_id]) if r in runs]
            after_run = children[0] if children else runs[-1]
        self.after_run = after_run

    def _on_run(self, event) -> None:
        self._pick_runs(None)
        self._reload()

    def _after_size(self) -> tuple:
        """How much of the after run is written (its spans and their latest time): it grows
        while a replay is being written into a live file."""
        if self.after_run is None:
            return ()
        return tuple(self.after_store.query(
            "SELECT count(*), max(coalesce(end_ns, start_ns)) FROM spans WHERE run_id = ?",
            [self.after_run])[0])

    def _on_refresh(self, *_) -> None:
        if not self.shown or not self.data.live or self.data.run_id is None:
            return
        same_file = self.after_store is self.data.store
        found = tuple(r for r in self.after_store.run_ids()
                      if not same_file or r != self.data.run_id)
        if found != self._runs_seen:  # a replay was registered: offer it in the picker
            if self.after_run is None:
                self._pick_runs(None)
            else:
                self._runs_seen = found
                self.param.after_run.objects = list(found)
        if self._after_size() != self._after_read:
            self._redraw()

    # -- reading ---------------------------------------------------------------------------
    def _load(self) -> None:
        d = self.data
        if d.run_id is None:
            self._note.object = ("<span class='rs-note'>No run in this store yet, so no replay "
                                 "to compare.</span>")
            return
        if self.after_run is None:
            self._note.object = ("<span class='rs-note'>No replay to compare with: this file "
                                 "holds one run. Write one into it with <code>rolloutscope "
                                 "replay RUN.duckdb --variant V --out RUN.duckdb</code>.</span>")
            return
        self._after_read = self._after_size()
        self._before, self._after = run_reads.timeline_frames(d.store, d.run_id, self.after_store,
                                                            self.after_run)
        self._before_incidents = run_reads.incident_frame(d.store, d.run_id)
        after_incidents = run_reads.incident_frame(self.after_store, self.after_run)
        self._lanes, self._rollouts = rp.replay_lanes(self._before, self._after)
        self._span = rp.span_of(self._before, self._after)
        verdicts = rp.incident_verdicts(self._before_incidents, after_incidents)
        for side in ("before (s)", "after (s)"):  # blank where the incident was not seen
            verdicts[side] = [("" if pd.isna(v) else f"{v:,.1f}") for v in verdicts[side]]
        self._verdicts.value = verdicts
        a = run_reads.outcome_counts(d.store, d.run_id).as_dict()
        b = run_reads.outcome_counts(self.after_store, self.after_run).as_dict()
        self._outcomes.value = pd.DataFrame({"outcome": list(a), "before": list(a.values()),
                                             "after": [b[k] for k in a]})
        shown = min(self._rollouts, rp.MAX_ROLLOUT_LANES)
        self._note.object = (
            f"<span class='rs-note'>before <b>{html.escape(str(d.run_id))}</b>, after "
            f"<b>{html.escape(str(self.after_run))}</b>; {shown:,} of {self._rollouts:,} "
            "rollout lanes; simulated seconds from each run's origin</span>")

    def _redraw(self, *_) -> None:
        self._reload()  # the pair of runs first: the plots draw what it read
        super()._redraw()

    def _draw_mark(self) -> tuple:
        return (*super()._draw_mark(), self.after_run, self._after_read)

    def _reload(self, *_) -> None:
        same_file = self.after_store is self.data.store
        if same_file and self.after_run is None and tuple(
                r for r in self.after_store.run_ids() if r != self.data.run_id) != \
                self._runs_seen:
            # a live file gained a run (the demo writes its fix replays beside the capture)
            self._pick_runs(None)
        if self._changed("compare", "incidents", also=(self.after_run, self._after_size())):
            self._load()

    def first_changed(self, data: DataStore | None = None) -> str | None:
        """The incident the tab opens on while none is picked: the first one the replay made
        vanish (what the fix was for), else the newest critical one."""
        v = self._verdicts.value
        inc = self._before_incidents
        if len(v) and len(inc) and "key" in inc:
            gone = {(k, s) for k, s in zip(v.kind[v.status == "vanished"],
                                           v.subject[v.status == "vanished"])}
            rows = inc[[key in gone for key in inc.key]].sort_values("start_s")
            if len(rows):
                return str(rows.incident_id.iloc[0])
        return newest_critical(self.data)

    # -- drawing ---------------------------------------------------------------------------
    def _focus(self) -> tuple[tuple[float, float], tuple[float, float] | None]:
        """The range both sides show and the highlight: around the incident picked (or the
        newest critical one; each side's evidence is its own, so a fixed pad around its start),
        unless the user zoomed a time plot since; with no incident, the shared range or both
        runs whole."""
        d = self.data
        incident = d.incident or self.first_changed(d)
        inc = self._before_incidents
        rows = inc[inc.incident_id.astype(str) == str(incident)] if incident else inc.iloc[:0]
        zoomed = d.time_range is not None and not d.range_is_incident
        if not len(rows) or pd.isna(rows.start_s.iloc[0]):
            return self.xlim(self._span), None
        t = float(rows.start_s.iloc[0])
        own = (max(t - PAD_S, self._span[0]), t + 2 * PAD_S)
        rng = self.xlim(own) if zoomed else own
        self._shown_range = rng
        return rng, (t - 1.0, t + 1.0)

    def before_figure(self):
        xlim, hl = self._focus()
        return rp.replay_layers(self._before, self._lanes,
                                  title=f"before: {self.data.run_id}", xlim=xlim, highlight=hl)

    def after_figure(self):
        xlim, hl = self._focus()
        return rp.replay_layers(self._after, self._lanes, title=f"after: {self.after_run}",
                                  xlim=xlim, highlight=hl)

    def plots(self) -> list:
        """Before and after, on one x range."""
        return self.time_plots(self.before_figure, self.after_figure)

    def __panel__(self):
        controls = pn.Row(
            pn.widgets.Select.from_param(self.param.after_run, name="after (replay)",
                                         width=320),
            incident_selector(self.data, fallback=self.first_changed),
            sizing_mode="stretch_width")
        return pn.Column(
            controls, self._note, key_pane(key_html(rp.REPLAY_KEY, note=(
                "the same lanes on both sides, in the same order: compare straight down"))),
            *self.plots(),
            pn.Row(pn.Column("**Incidents** (reproduced, vanished, appeared in the replay)",
                             self._verdicts, sizing_mode="stretch_width"),
                   pn.Column("**Outcome counts**", self._outcomes, width=320),
                   sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
