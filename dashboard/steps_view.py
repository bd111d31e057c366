"""The Steps tab: the step ledger of the DataStore's run (``rolloutscope.store.ledger``): per train
step where its wall time went (generating, waiting for stragglers, parked by snapshots, refit,
training, checkpoint), as stacked bars, and the ledger's rows beside the groups each step waited
for last, with why.

It reads the per-step rows of the ``step_ledger`` and ``step_stragglers`` views only, never the
run's spans or tries: a run of 10^8 spans is a few hundred rows here. Read when the run changes:
on a live tick when the run grew or the incidents changed, at most every LIVE_READ_EVERY_S, and
when asked ("Read the steps again": a live run whose steps are NeMo-RL's own spans may grow
nothing the other tabs read).

Picking a step (a row of the ledger's table) shows its stretch on every time plot, as picking an
incident does: on a run read in window mode (docs/dashboard.md#window-mode) that moves the
session's window onto the step, so the other tabs list the step's rows. The stragglers' table
lists the latest steps' groups, STRAGGLER_ROWS at most (a 16k-rollout step waits for about
1,600), and a picked step's.
"""

from __future__ import annotations

import html
import time

import holoviews as hv
import pandas as pd
import panel as pn

from rolloutscope.dashboard import style
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.tabs import CSS, View, key_pane, plot_title, text_table
from rolloutscope.dashboard.timeline_plot import key_html
from rolloutscope.store.ledger import (
    LEDGER_COLUMNS,
    SPLIT,
    STRAGGLER_COLUMNS,
    ledger_table,
    straggler_table,
)

LABELS = {"generating_s": "generating", "straggler_s": "waiting for stragglers",
          "parked_s": "parked by snapshots", "refit_s": "refit / weight sync",
          "train_s": "training", "checkpoint_s": "checkpoint", "other_s": "other"}
COLORS = {"generating_s": style.OK, "straggler_s": style.WARN, "parked_s": style.PARKED,
          "refit_s": "#5b7db1", "train_s": "#33414e", "checkpoint_s": "#8e7cc3",
          "other_s": "#c8ced4"}
SHOWN_LEDGER = ["step", "start_s", "duration_s", "wait_s", "groups", *SPLIT,
                "generation_bubble_s", "productive_s", "overhead_s", "idle_s", "wasted_s",
                "weight_version", "batch_weight_version", "policy_lag", "prompt_groups"]
SHOWN_STRAGGLERS = ["step", "rollout_id", "attempt", "committed_s", "duration_s", "why"]
STEPS_KEY = [(LABELS[c], "■", COLORS[c]) for c in SPLIT]
# a live run's steps are read again at most this often (the writer keeps settled steps every
# 30 s: derived.KEEP_STEPS_EVERY_S), and when asked
LIVE_READ_EVERY_S = 30.0
# the x axis labels each step up to this many, the ledger's table shows this many a page (the
# last page first: the latest steps)
MAX_STEP_LABELS = 40
LEDGER_PAGE = 50
# the stragglers listed before a step is picked: the latest steps' up to this many rows
STRAGGLER_ROWS = 2000
EACH_STEP_TITLE = "**The groups each step waited for last**, and why"


def latest_steps_from(ledger: pd.DataFrame, rows: int | None = None) -> int | None:
    """The first of the latest steps whose stragglers add up to ``rows`` (STRAGGLER_ROWS) at
    most (the last step always); None for a run without steps."""
    rows = STRAGGLER_ROWS if rows is None else rows
    if not len(ledger):
        return None
    counts = ledger.stragglers.fillna(0).astype(int).to_numpy()[::-1]
    steps = ledger.step.to_numpy()[::-1]
    first, total = steps[0], 0
    for step, n in zip(steps, counts):
        total += n
        if total > rows and step != steps[0]:
            break
        first = step
    return int(first)


def split_plot(ledger: pd.DataFrame) -> hv.Bars:
    """Each step's wall time, stacked by where it went (seconds)."""
    rows = [(str(int(r["step"])), LABELS[c], max(0.0, float(r[c])))
            for _, r in ledger.iterrows() for c in SPLIT if pd.notna(r[c])]
    d = pd.DataFrame(rows, columns=["step", "part", "seconds"])
    color = (hv.dim("part").categorize({LABELS[c]: COLORS[c] for c in SPLIT})
             if len(d) else style.OK)
    steps = list(dict.fromkeys(d.step))
    many = len(steps) > MAX_STEP_LABELS
    # Bokeh cannot stack no bars: a run without a step draws an empty, unstacked plot
    return hv.Bars(d, ["step", "part"], "seconds").opts(
        hooks=[_no_step_labels] if many else [], line_alpha=0.0 if many else 1.0,
        xlabel=(f"train step ({steps[0]} to {steps[-1]}: hover a bar for its step)" if many
                else "train step"),
        stacked=bool(len(d)), color=color, show_legend=False, responsive=True, height=280,
        tools=["hover"], show_grid=True, ylabel="seconds",
        fontsize={"xticks": "9pt", "yticks": "9pt"})


def _no_step_labels(plot, element) -> None:
    """Hundreds of steps' labels overlap into a smear: the axis names the first and last step,
    the hover each bar's."""
    for axis in plot.state.xaxis:
        axis.major_label_text_font_size = "0pt"
        axis.major_tick_line_color = None


class Steps(View):
    """The step ledger of the DataStore's run."""

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self.ledger = pd.DataFrame(columns=LEDGER_COLUMNS)
        self.stragglers = pd.DataFrame(columns=STRAGGLER_COLUMNS)
        self._plot = pn.pane.HoloViews(split_plot(self.ledger), sizing_mode="stretch_width")
        self._table = text_table(self.ledger[SHOWN_LEDGER], pagination="local",
                                 page_size=LEDGER_PAGE, selectable=1)
        self._late = text_table(self.stragglers[SHOWN_STRAGGLERS])
        self._note = pn.pane.HTML(stylesheets=[CSS], sizing_mode="stretch_width")
        self._late_title = pn.pane.Markdown(EACH_STEP_TITLE, sizing_mode="stretch_width")
        # a live run whose steps are NeMo-RL's own spans may grow nothing the other tabs read:
        # its new steps are read on asking
        self._again = pn.widgets.Button(label="Read the steps again", width=200,
                                        visible=data.live)
        self._again.on_click(lambda *_: self._load(force=True))
        self._loaded_at = -LIVE_READ_EVERY_S
        self.param.watch(self._load, "revision")
        self._table.param.watch(self._on_select, "selection")
        self._load()

    def _on_select(self, event) -> None:
        if event.new:
            step = int(self._table.value.step.iloc[event.new[0]])
            self.pick_step(step)
            d = self.data
            self.stragglers = straggler_table(d.store, d.run_id, step=step,
                                              incidents=self._incidents())
            self._late.value = self.stragglers[SHOWN_STRAGGLERS].round(3)
            self._late_title.object = f"**The groups step {step} waited for last**, and why"

    def pick_step(self, step: int) -> None:
        """Show train step ``step``'s stretch (its start to its end, or to now while it
        runs) on every time plot; in window mode the window moves onto it."""
        rows = self.ledger[self.ledger.step == step]
        if not len(rows):
            return
        row, d = rows.iloc[0], self.data
        end = (float(row.end_s) if pd.notna(row.end_s)
               else (d.last_seen_ns() - d.origin_ns()) / 1e9)
        d.show_range((float(row.start_s), max(end, float(row.start_s) + 0.001)))

    def _load(self, *_, force: bool = False) -> None:
        d = self.data
        # the ledger is the whole run's: it changes as the run grows (last_seen_ns: in window
        # mode the run's end, so moving the window, as picking a step does, reads nothing)
        if not force and d.live and time.monotonic() - self._loaded_at < LIVE_READ_EVERY_S:
            return
        if not (self._changed("steps", "incidents", also=(d.last_seen_ns(),)) or force):
            return
        self._loaded_at = time.monotonic()
        if d.run_id is None:
            self._note.object = "<span class='rs-note'>No run in this store yet.</span>"
            return
        self.ledger = ledger_table(d.store, d.run_id)
        first = latest_steps_from(self.ledger)
        self.stragglers = straggler_table(d.store, d.run_id, from_step=first,
                                          incidents=self._incidents())
        self._late_title.object = (
            "**The groups the latest steps waited for last**, and why (pick a step for its own)"
            if first is not None and first > int(self.ledger.step.min())
            else EACH_STEP_TITLE)
        self._plot.object = split_plot(self.ledger)
        self._table.value = self.ledger[SHOWN_LEDGER].round(3)
        self._table.page = max(1, -(-len(self.ledger) // LEDGER_PAGE))
        self._late.value = self.stragglers[SHOWN_STRAGGLERS].round(3)
        self._note.object = self._summary()

    def _incidents(self) -> pd.DataFrame | None:
        """The session's incidents where it holds them (what its other tabs show)."""
        held = self.data.frames.get("incidents")
        return held if held is not None and {"subject", "kind"} <= set(held.columns) else None

    def _summary(self) -> str:
        steps = self.ledger
        if not len(steps):
            return ("<span class='rs-note'>No train step in this run: neither NeMo-RL's "
                    "<code>rl.&lt;algorithm&gt;.step</code> spans nor <code>rl.train_step</code> "
                    "spans.</span>")
        total = float(steps.duration_s.sum())
        parts = ", ".join(f"{LABELS[c]} {float(steps[c].fillna(0).sum()):,.1f} s"
                          for c in SPLIT if steps[c].fillna(0).sum() > 0)
        dialects = ", ".join(sorted(set(steps.dialect.astype(str))))
        return (f"<span class='rs-note'>{len(steps):,} train steps ({html.escape(dialects)}), "
                f"{total:,.1f} s: {html.escape(parts)}</span>")

    def __panel__(self):
        return pn.Column(pn.Row(self._note, self._again, sizing_mode="stretch_width"),
                         plot_title("Each step's wall time"),
                         key_pane(key_html(STEPS_KEY)), self._plot,
                         "**Per train step** (seconds; times from the run's start)", self._table,
                         self._late_title, self._late,
                         sizing_mode="stretch_width")


__all__ = ["Steps", "split_plot"]
