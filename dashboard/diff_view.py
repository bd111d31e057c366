"""The Diff tab: the DataStore's run against another, aligned by train step
(``rolloutscope.store.steps``): per step committed, timeouts, re-dispatches, snapshot seconds and
incidents, side by side and as B - A, with a plot of the differences per step.

The other run is one of the same file (a replay the demo or ``replay --out RUN.duckdb`` wrote,
another run a collector saw), or a run of another store handed to the constructor
(``rolloutscope dashboard A.duckdb --compare B.duckdb``). Read when the pair changes, never on
a live tick of a run that did not grow.
"""

from __future__ import annotations

import html

import holoviews as hv
import pandas as pd
import panel as pn
import param

from rolloutscope.dashboard import style
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.timeline_plot import key_html
from rolloutscope.dashboard.tabs import CSS, View, key_pane, plot_title, text_table
from rolloutscope.store import RunStore
from rolloutscope.store.steps import COUNTS, diff_totals, step_diff, step_table

LABELS = {"committed": "committed", "timeouts": "timeouts", "redispatches": "re-dispatches",
          "failed_tries": "failed tries", "snapshots": "snapshots",
          "snapshot_s": "snapshot s", "snapshots_failed": "snapshots failed",
          "incidents": "incidents"}
PLOTTED = ("committed", "timeouts", "redispatches", "incidents")
COLORS = {"committed": style.OK, "timeouts": style.ERROR, "redispatches": style.WARN,
          "incidents": style.PARKED}


def diff_rows(diff: pd.DataFrame) -> pd.DataFrame:
    """The table: one row per step, each count as 'A → B (±d)'."""
    out = {"step": diff.step.astype("int64").to_numpy()}
    for c in COUNTS:
        out[LABELS[c]] = [_pair(a, b, d) for a, b, d in
                          zip(diff[f"{c}_a"], diff[f"{c}_b"], diff[f"d_{c}"])]
    out["incident kinds A"] = diff.incident_kinds_a.fillna("").astype(str).to_numpy()
    out["incident kinds B"] = diff.incident_kinds_b.fillna("").astype(str).to_numpy()
    return pd.DataFrame(out)


def _num(v) -> str:
    if pd.isna(v):
        return "-"
    return f"{v:,.1f}" if not float(v).is_integer() else f"{int(v):,}"


def _pair(a, b, d) -> str:
    if pd.isna(d):
        return f"{_num(a)} → {_num(b)}"
    sign = "" if d == 0 else (f" ({d:+,.1f})" if not float(d).is_integer() else f" ({int(d):+,})")
    return f"{_num(a)} → {_num(b)}{sign}"


def delta_plot(diff: pd.DataFrame) -> hv.Bars:
    """B - A per step for committed, timeouts, re-dispatches and incidents."""
    rows = [(int(s), LABELS[c], float(diff[f"d_{c}"].iloc[i]))
            for c in PLOTTED for i, s in enumerate(diff.step)
            if pd.notna(diff[f"d_{c}"].iloc[i])]
    d = pd.DataFrame(rows, columns=["step", "count", "delta"])
    d["step"] = d.step.astype(str)
    color = (hv.dim("count").categorize({LABELS[c]: COLORS[c] for c in PLOTTED})
             if len(d) else style.OK)
    return hv.Bars(d, ["step", "count"], hv.Dimension("delta", label="B − A")).opts(
        color=color, multi_level=False, show_legend=False, responsive=True, height=260,
        tools=["hover"], show_grid=True, xlabel="train step",
        fontsize={"xticks": "9pt", "yticks": "9pt"})


DIFF_KEY = [(LABELS[c], "■", COLORS[c]) for c in PLOTTED]


class Diff(View):
    """Two runs by train step: the DataStore's (A) against another (B)."""

    other_run = param.Selector(default=None, objects=[], allow_None=True,
                               doc="run B, compared with the DataStore's run (A)")

    def __init__(self, data: DataStore, *, other_store: RunStore | None = None,
                 **params) -> None:
        super().__init__(data, **params)
        self.other_store = other_store or data.store
        self._table = text_table(diff_rows(step_diff(*(_empty(),) * 2)), pagination=None,
                                 page_size=None)
        self._plot = pn.pane.HoloViews(delta_plot(step_diff(*(_empty(),) * 2)),
                                       sizing_mode="stretch_width")
        self._note = pn.pane.HTML(stylesheets=[CSS], sizing_mode="stretch_width")
        self._a: pd.DataFrame | None = None
        self._pick()
        self.param.watch(self._load, ["other_run", "revision"])
        data.param.watch(lambda *_: self._pick(), "run_id")
        self._load()

    def _pick(self) -> None:
        same = self.other_store is self.data.store
        runs = [r for r in self.other_store.run_ids() if not same or r != self.data.run_id]
        self.param.other_run.objects = runs
        if self.other_run not in runs:
            children = [r for (r,) in self.other_store.query(
                "SELECT run_id FROM runs WHERE parent_run_id = ? ORDER BY created_ns DESC",
                [self.data.run_id])] if same else []
            self.other_run = next((r for r in children if r in runs), runs[-1] if runs else None)

    def _load(self, *_) -> None:
        d = self.data
        if not self._changed("diff", "rollout_attempts", "incidents", "checkpoint_windows",
                             also=(self.other_run,)) and self._a is not None:
            return
        if d.run_id is None or self.other_run is None:
            self._note.object = ("<span class='rs-note'>No other run to compare with: this file "
                                 "holds one run. <code>rolloutscope diff A.duckdb B.duckdb</code> "
                                 "compares two files; <code>rolloutscope dashboard A.duckdb "
                                 "--compare B.duckdb</code> shows them here.</span>")
            return
        self._a = step_table(d.store, d.run_id)
        b = step_table(self.other_store, self.other_run)
        diff = step_diff(self._a, b)
        self._table.value = diff_rows(diff)
        self._plot.object = delta_plot(diff)
        totals = diff_totals(diff)
        said = ", ".join(f"{LABELS[c]} {_pair(*totals[c])}" for c in
                         ("committed", "timeouts", "redispatches", "snapshot_s", "incidents"))
        e = html.escape
        self._note.object = (f"<span class='rs-note'>A <b>{e(str(d.run_id))}</b>, B "
                             f"<b>{e(str(self.other_run))}</b>; {len(diff):,} train steps; "
                             f"over the run: {e(said)}</span>")

    def __panel__(self):
        picker = pn.widgets.Select.from_param(self.param.other_run, name="B (compared with "
                                              "this run, A)", width=520)
        return pn.Column(picker, self._note, plot_title("B − A per train step"),
                         key_pane(key_html(DIFF_KEY)), self._plot,
                         "**Per train step** (A → B, and B − A; the last row is what happened "
                         "after a run's last completed step)", self._table,
                         sizing_mode="stretch_width")


def _empty() -> pd.DataFrame:
    from rolloutscope.store.steps import STEP_COLUMNS

    return pd.DataFrame({c: pd.Series(dtype="float64") for c in STEP_COLUMNS})


__all__ = ["Diff", "delta_plot", "diff_rows"]
