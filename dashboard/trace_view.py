"""The Traces view: any trace of the run as a waterfall, for any OTLP data.

Reads through the DataStore on demand (``trace_choices``, ``trace_spans``: the ``trace_roots``
and ``all_spans`` views), never on a live tick: the list of traces when the tab is first shown or
on "Reload list", a trace's spans when one is picked here or a rollout is picked on the Rollouts
tab (``DataStore.trace_id``). Drawing is ``trace_plot``'s.
"""

from __future__ import annotations

import html

import pandas as pd
import panel as pn

from rolloutscope.dashboard import trace_plot as tp
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.tabs import CSS, View, _utc, text_table, waiting_text


class Traces(View):
    """Any trace of the run as a waterfall, read from all_spans: a rollout's (picked here or
    on the Rollouts tab) or any other trace root's. What a trace browser shows for any OTLP
    data, so a run with no model-view row is still explorable."""

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self._choices = pd.DataFrame(columns=["trace_id", "label", "start_ns"])
        self.picker = pn.widgets.Select(label="trace", options={}, width=640)
        self.reload = pn.widgets.Button(label="Reload list", width=110)
        self._plot = pn.pane.HoloViews(tp.waterfall_plot(tp.waterfall_rows(
            pd.DataFrame())), sizing_mode="stretch_width")
        self._note = pn.pane.HTML("", stylesheets=[CSS], sizing_mode="stretch_width")
        self._spans = text_table(self._span_rows(tp.waterfall_rows(pd.DataFrame())),
                                 page_size=25)
        self._loaded_for: tuple | None = None
        self._drawn_trace: str | None = None
        self._echo = False
        self.picker.param.watch(self._on_pick, "value")
        self.reload.on_click(lambda *_: self._load_choices(force=True))
        data.param.watch(self._on_trace, "trace_id")
        self.param.watch(self._on_shown, "shown")
        if self.shown:
            self._load_choices()

    # the list of traces is read when the tab is first shown (and on request), not every tick
    def _on_shown(self, event) -> None:
        if event.new:
            self._load_choices()

    def _load_choices(self, force: bool = False) -> None:
        d = self.data
        mark = (d.run_id, d.frame_versions["rollout_attempts"])
        if not force and mark == self._loaded_for:
            return
        self._loaded_for = mark
        self._choices = d.trace_choices()
        options = {"(pick a trace)": ""}
        options.update({f"{_utc(int(r.start_ns))}  {r.label}": str(r.trace_id)
                        for r in self._choices.itertuples(index=False)})
        self._echo = True
        try:
            self.picker.options = options
            self.picker.value = d.trace_id if d.trace_id in options.values() else ""
        finally:
            self._echo = False
        if d.trace_id and d.trace_id != self._drawn_trace:
            self._draw(d.trace_id)
        elif not d.trace_id and len(self._choices) and self._drawn_trace is None:
            # nothing picked yet: open on a trace that matters rather than on an empty plot
            self._draw(self.default_trace(), default=True)
        elif not len(self._choices):
            self._note.object = (f"<div class='rs-note'>"
                                 f"{html.escape(waiting_text(d) if d.run_id is None else 'No trace in this run yet.')}"
                                 f"</div>")

    def _on_pick(self, event) -> None:
        if not self._echo:
            self.data.trace_id = event.new or None

    def _on_trace(self, event) -> None:
        if event.new:
            if event.new not in self.picker.options.values():
                self._load_choices(force=True)
            self._echo = True
            try:
                if event.new in self.picker.options.values():
                    self.picker.value = event.new
            finally:
                self._echo = False
            self._draw(event.new)

    def default_trace(self) -> str:
        """The trace of a rollout the selected (or newest critical) incident names, else of
        the newest failed try, else the newest trace."""
        d = self.data
        att = d.frames["rollout_attempts"]
        if len(att) and "trace_id" in att:
            from rolloutscope.dashboard.tabs import newest_critical

            incident = d.incident or newest_critical(d)
            named = d.incident_rollouts(incident) if incident else set()
            for rows in (att[att.rollout_id.astype(str).isin(named)],
                         att[att.outcome.isin(["failed", "cancelled"])]):
                rows = rows.dropna(subset=["trace_id"]).sort_values("start_ns")
                if len(rows):
                    return str(rows.trace_id.iloc[-1])
        return str(self._choices.trace_id.iloc[0])

    def _draw(self, trace_id: str, *, default: bool = False) -> None:
        self._drawn_trace = trace_id
        if default:
            self._echo = True
            try:
                if trace_id in self.picker.options.values():
                    self.picker.value = trace_id
            finally:
                self._echo = False
        spans, total = self.data.trace_spans(trace_id)
        rows = tp.waterfall_rows(spans)
        label = next((str(r.label) for r in self._choices.itertuples(index=False)
                      if r.trace_id == trace_id), trace_id)
        self._plot.object = tp.waterfall_plot(rows, title=label)
        legend = " ".join(
            f"<span style='color:{html.escape(c)}'>&#9632;</span> {html.escape(sv)} ({n})"
            for sv, c, n in tp.legend_rows(rows).itertuples(index=False))
        capped = (f"; showing the first {len(rows):,} of {total:,} spans"
                  if total > len(rows) else "")
        opened = ("opened on this trace (a rollout an incident names, or the newest failed "
                  "try); pick any other above. " if default else "")
        self._note.object = (f"<div class='rs-note'>{opened}trace {html.escape(trace_id)}: "
                             f"{total:,} spans{capped}; red = failed, dashed = still open. "
                             f"Hover a bar for its attributes; every attribute is in the table "
                             f"below.</div><div class='rs-note'>{legend}</div>")
        self._spans.value = self._span_rows(rows, spans)

    @staticmethod
    def _span_rows(rows: pd.DataFrame, spans: pd.DataFrame | None = None) -> pd.DataFrame:
        full = {}
        if spans is not None and len(spans):
            full = dict(zip(spans.span_id.astype(str), spans.attributes.fillna("")))
        # explicit text types: the table's formatters are chosen from its first (empty) value
        return pd.DataFrame({
            "span": rows.label.astype(str).to_numpy(),
            "service": rows.service.astype(str).to_numpy(),
            "kind": rows.kind.astype(str).to_numpy(),
            "start (ms)": pd.to_numeric(rows.start_ms).round(3).to_numpy(),
            "duration (ms)": pd.to_numeric(rows.duration_ms).round(3).to_numpy(),
            "status": rows.status.astype(str).to_numpy(),
            "span attributes": pd.Series([full.get(sid, a) for sid, a in
                                          zip(rows.span_id, rows["attrs"])], dtype="object"),
            "span_id": rows.span_id.astype(str).to_numpy()})

    def __panel__(self):
        return pn.Column(pn.Row(self.picker, self.reload), self._note, self._plot,
                         "**Spans** (tree order)", self._spans, sizing_mode="stretch_width")


__all__ = ["Traces"]
