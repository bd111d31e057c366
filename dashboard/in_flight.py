"""The In flight tab: the live wait board (what is in flight now) and the run's staleness.

The wait board lists the rollouts in flight (the store's ``in_flight_window`` macro: the open
markers, and the finished spans and events of the last ``WINDOW_S``), at most ``BOARD_ROWS``
of them, the oldest, with a count of the rest. Its order holds still while rollouts stream past
(``BoardOrder``): a row keeps its place until its rollout finishes, finished ones leave, new ones
join at the bottom, oldest first. Age, the deadline budget left and the time since the last
progress count from "now" (``board_now``). It reads on every live tick while its tab is shown,
and what it reads is what is in flight, not the run: its cost per tick does not grow with the
run (benchmarks/bench_wait_board.py).

Staleness (the store's ``rollout_staleness``): per try and per step, the policy version the
data was generated with against the trainer's when it was trained on, the distribution of that
lag, and what was aborted for staleness. It reads the whole run (a large run: its window's rows),
so it is read when the tab is first shown and then at most every ``STALENESS_EVERY_S`` while the
run grows.

Its own tab rather than a pane of Rollouts: a live tick redraws only the tab on screen, and the
Rollouts tab's attempts table and overlap plot hold every try of the run; watching the board
there would redraw them on every tick.
"""

from __future__ import annotations

import html
import time

import numpy as np
import pandas as pd
import panel as pn
from bokeh.core.properties import field
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from rolloutscope.dashboard import style
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.shared import DEFAULT_READ_TIMEOUT_S, timed_frame
from rolloutscope.dashboard.tabs import CSS, View, empty_note, key_pane, plot_title, text_table

S = 1e9
BOARD_ROWS = 200  # rows the board lists at most: the oldest in flight
WINDOW_S = 300.0  # how far back a board read looks for finished spans and events
WINDOW_ROWS = 200_000  # ... and among how many of the last committed (a single-file store)
STALENESS_EVERY_S = 15.0  # the staleness view is re-read at most this often while live
BOARD_COLUMNS = ("rollout", "try", "phase", "age (s)", "deadline left (s)", "engine",
                 "last progress", "since (s)", "trace_id")


class BoardOrder:
    """The board's row order across ticks: a rollout keeps the place it got when it first
    appeared until it leaves the board; rollouts new on a tick join at the bottom, oldest
    first. Keyed by the rollout's span id."""

    def __init__(self) -> None:
        self._place: dict[str, int] = {}
        self._next = 0

    def arrange(self, rows: pd.DataFrame) -> pd.DataFrame:
        """``rows`` (an ``in_flight`` read) in board order."""
        ids = rows.sort_values(["start_ns", "span_id"]).span_id.astype(str)
        present = set(ids)
        self._place = {k: v for k, v in self._place.items() if k in present}
        for key in ids:
            if key not in self._place:
                self._place[key] = self._next
                self._next += 1
        order = rows.span_id.astype(str).map(self._place)
        return rows.iloc[np.argsort(order.to_numpy(), kind="stable")].reset_index(drop=True)


def board_now(data: DataStore) -> int:
    """'Now' for the board: the latest time the run's spans reached (``runs.last_seen_ns``),
    or the wall clock where a live run is behind it (a run that sends nothing still ages). A
    replay faster than real time runs ahead of the wall clock: its latest span is now."""
    rows = data.store.query("SELECT last_seen_ns FROM runs WHERE run_id = ?", [data.run_id])
    seen = int(rows[0][0]) if rows and rows[0][0] is not None else 0
    return max(seen, time.time_ns()) if data.live else seen


def read_board(store, run_id: str, now_ns: int, *, limit: int = BOARD_ROWS,
               window_s: float = WINDOW_S, window_rows: int | None = WINDOW_ROWS,
               timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> tuple[pd.DataFrame, int]:
    """The ``limit`` oldest rollouts in flight of run ``run_id`` (``in_flight_window``: its open
    markers, and the finished spans and events of the last ``window_s`` before ``now_ns``
    among the last ``window_rows`` committed; a store whose row ids are no commit order, a
    lake, is bounded by time alone: ``commit_ordered``) and how many are in flight in all."""
    rows_back = window_rows if commit_ordered(store) else None
    sql = (f"SELECT *, count(*) OVER () AS in_flight_total "
           f"FROM in_flight_window(?, ?, ?) ORDER BY start_ns, span_id "
           f"LIMIT {int(limit)}")
    floor = now_ns - int(window_s * S)
    rows = timed_frame(store, sql, [run_id, floor, rows_back], timeout_s,
                       what=f"the rollouts in flight of run {run_id}")
    total = int(rows.in_flight_total.iloc[0]) if len(rows) else 0
    return rows.drop(columns="in_flight_total"), total


def commit_ordered(store) -> bool:
    """Whether the store's row ids are its commit order: a file's are, a lake's are not; the
    store behind a collector is a file where it keeps maintained rows (a collector derives them
    for a file, never for a lake)."""
    if getattr(store, "remote", False):
        return bool(store.maintained)
    return not store.is_lake


def board_rows(rows: pd.DataFrame, now_ns: int) -> pd.DataFrame:
    """The board's table of ``rows`` (in board order): ages and the deadline left in seconds at
    ``now_ns`` (negative: overdue; blank where no deadline has started: a rollout still queued,
    or a try that runs without one), the engine (shard, else the Gym server) and the last
    progress."""
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in BOARD_COLUMNS})
    budget = pd.to_numeric(rows.budget_s, errors="coerce")
    since_deadline = (now_ns - pd.to_numeric(rows.deadline_start_ns, errors="coerce")) / S
    shard = rows.shard_idx.astype("Int64")
    engine = np.where(shard.notna(), "shard " + shard.astype(str),
                      rows.server_name.fillna("").astype(str))
    return pd.DataFrame({
        "rollout": rows.rollout_id.astype(str).to_numpy(),
        "try": whole(rows.attempt),
        "phase": rows.phase.astype(str).to_numpy(),
        "age (s)": ((now_ns - rows.start_ns) / S).round(1).to_numpy(),
        "deadline left (s)": tenths(budget - since_deadline),
        "engine": engine,
        "last progress": rows.last_name.fillna("").astype(str).to_numpy(),
        "since (s)": ((now_ns - rows.last_ns) / S).round(1).to_numpy(),
        "trace_id": rows.trace_id.fillna("").astype(str).to_numpy()})


# -- staleness ------------------------------------------------------------------------------
def read_staleness(data: DataStore) -> pd.DataFrame:
    """The shown run's ``rollout_staleness`` rows, oldest first: a large run's
    (docs/dashboard.md#window-mode) those that end in its window and the open ones
    (``rollout_staleness_window``: a store that keeps its rows joins the window's kept tries to
    the run's syncs and steps; the view has a row per try, 7.2M at 10^8 spans)."""
    if data.large and data.window is not None:
        lo, hi = data.window
        kept = data.store.relation("rollout_staleness").startswith("rs_read.")
        sql = (f"SELECT * FROM {'rs_read.' if kept else ''}rollout_staleness_window(?, ?)"
               + (" WHERE start_ns < ?" if hi is not None else ""))
        params: list = [data.run_id, int(lo), *([int(hi)] if hi is not None else [])]
    else:
        sql = f"SELECT * FROM {data.store.relation('rollout_staleness')} WHERE run_id = ?"
        params = [data.run_id]
    return timed_frame(data.store, sql + " ORDER BY coalesce(end_ns, start_ns), span_id",
                       params, data.read_timeout_s, what=f"the staleness of run {data.run_id}")


def trained(staleness: pd.DataFrame) -> pd.DataFrame:
    """The rows with a lag: data some train step trained on."""
    return staleness[staleness.lag.notna()]


def step_rows(staleness: pd.DataFrame) -> pd.DataFrame:
    """Per train step: the trainer's version, the prompt groups it trained on, and their
    generation versions and lag (lowest, median, highest)."""
    t = trained(staleness)
    cols = ["train step", "trainer version", "groups", "oldest weights", "newest weights",
            "lag min", "lag median", "lag max"]
    if not len(t):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    t = t.assign(lag=t.lag.astype("float64"), weight_version=t.weight_version.astype("float64"))
    g = t.groupby("train_step", sort=True)
    out = pd.DataFrame({
        "train step": g.size().index.astype("int64"),
        "trainer version": g.trained_version.max().astype("int64").to_numpy(),
        "groups": g["groups"].sum().astype("int64").to_numpy(),
        "oldest weights": g.weight_version.min().astype("int64").to_numpy(),
        "newest weights": g.weight_version.max().astype("int64").to_numpy(),
        "lag min": g.lag.min().astype("int64").to_numpy(),
        "lag median": g.lag.median().to_numpy(),
        "lag max": g.lag.max().astype("int64").to_numpy()})
    return out


def lag_distribution(staleness: pd.DataFrame) -> pd.DataFrame:
    """How many prompt groups were trained on at each lag (versions behind)."""
    t = trained(staleness)
    if not len(t):
        return pd.DataFrame({"lag": pd.Series(dtype="int64"), "groups": pd.Series(dtype="int64"),
                             "share": pd.Series(dtype="float64")})
    d = t.groupby(t.lag.astype("int64"))["groups"].sum().sort_index()
    return pd.DataFrame({"lag": d.index.to_numpy(), "groups": d.to_numpy(),
                         "share": (d / d.sum()).round(3).to_numpy()})


def dropped_rows(staleness: pd.DataFrame, t0_ns: int) -> pd.DataFrame:
    """What was aborted or dropped for staleness, and why."""
    a = staleness[staleness.unit == "aborted"]
    return pd.DataFrame({
        "at (s)": ((a.start_ns - t0_ns) / S).round(3).to_numpy(),
        "groups": whole(a.groups),
        "sync to version": whole(a.trained_version),
        "reason": a.reason.fillna("").astype(str).to_numpy()})


def try_rows(staleness: pd.DataFrame, t0_ns: int, limit: int = 2000) -> pd.DataFrame:
    """Per try and batch (the newest ``limit``, newest first): the version it was generated
    with, where that came from, the step and version it was trained at and the lag."""
    s = staleness[staleness.unit != "aborted"].tail(limit).iloc[::-1]
    return pd.DataFrame({
        "unit": s.unit.astype(str).to_numpy(),
        "rollout": s.rollout_id.fillna("").astype(str).to_numpy(),
        "try": whole(s.attempt),
        "end (s)": ((s.end_ns - t0_ns) / S).round(3).to_numpy(),
        "outcome": s.outcome.astype(str).to_numpy(),
        "weights": whole(s.weight_version),
        "weights from": s.weight_version_from.fillna("").astype(str).to_numpy(),
        "train step": whole(s.train_step),
        "trainer version": whole(s.trained_version),
        "lag": whole(s.lag),
        "groups": whole(s.groups),
        "trace_id": s.trace_id.fillna("").astype(str).to_numpy()})


def whole(column: pd.Series) -> np.ndarray:
    """Whole numbers as text, '' where missing (a table shows a missing whole number as a
    float's NaN, and the others of its column as floats)."""
    n = pd.to_numeric(column, errors="coerce").astype("Int64")
    return n.astype(str).where(n.notna(), "").to_numpy(dtype=object)


def tenths(column: pd.Series) -> np.ndarray:
    """Seconds to a tenth as text, '' where missing (a table shows a missing number as NaN)."""
    n = pd.to_numeric(column, errors="coerce").round(1)
    return np.array(["" if pd.isna(v) else f"{v:.1f}" for v in n], dtype=object)


def staleness_layers(staleness: pd.DataFrame, *, t0_ns: int, now_ns: int,
                     window: tuple[int, int | None] | None = None) -> tf.Plot:
    """The staleness lane: each trained try (circle) and batch (diamond) at the time it
    finished, at its lag; the weights the trainer was at (line, right axis) and aborts for
    staleness (red x on the time axis). Layers: ``trainer``, ``trained``, ``aborted``. Its
    time axis is the run's, or ``window``'s (ns, hi None: up to now) where the rows are a
    window's."""
    t = trained(staleness)
    lo_ns, hi_ns = window if window is not None else (t0_ns, now_ns)
    hi_ns = now_ns if hi_ns is None else min(hi_ns, now_ns)
    xlim = ((lo_ns - t0_ns) / S, max((hi_ns - t0_ns) / S, (lo_ns - t0_ns) / S + 1.0))
    end = t.end_ns.fillna(t.start_ns)
    points = pd.DataFrame({
        "t": ((end - t0_ns) / S).astype("float64"),
        "lag": t.lag.astype("float64"),
        "weights": t.weight_version.astype("float64"),
        "trainer": t.trained_version.astype("float64"),
        "step": t.train_step.astype("float64"),
        "what": t.unit.astype(str) + " " + t.rollout_id.fillna("").astype(str),
        "marker": np.where(t.unit == "batch", "diamond", "circle"),
        "size": np.where(t.unit == "batch", 12.0, 8.0)})
    versions = points.sort_values("t")
    a = staleness[staleness.unit == "aborted"]
    aborts = pd.DataFrame({"t": ((a.start_ns - t0_ns) / S).astype("float64"),
                           "y": np.zeros(len(a)), "groups": a.groups.astype("float64"),
                           "reason": a.reason.fillna("").astype(str)})
    lag_max = max(float(points.lag.max()) if len(points) else 0.0, 1.0)
    v_max = max(float(versions.trainer.max()) if len(versions) else 0.0, 1.0)
    return tf.Plot(height=style.GAUGE_HEIGHT_PX, xlim=xlim, ylim=(-0.5, lag_max * 1.15 + 0.5),
                   ylabel="lag (versions)", right=("trainer version", (0.0, v_max * 1.15)),
                   layers=[
        tf.Layer("trainer", "line", tf.columns(versions[["t", "trainer"]]),
                 dict(x="t", y="trainer", y_range_name="right", color=style.NEUTRAL,
                      line_width=1.5), [("at (s)", "@t{0,0.0}"), ("trainer version", "@trainer")]),
        tf.Layer("trained", "scatter", tf.columns(points),
                 dict(x="t", y="lag", marker=field("marker"), size=field("size"),
                      color=style.INFO, alpha=0.7),
                 [("", "@what"), ("finished (s)", "@t{0,0.0}"), ("weights", "@weights"),
                  ("trained at step", "@step (trainer version @trainer)"), ("lag", "@lag")]),
        tf.Layer("aborted", "scatter", tf.columns(aborts),
                 dict(x="t", y="y", marker="x", size=14, color=style.ERROR, line_width=2),
                 [("aborted (s)", "@t{0,0.0}"), ("groups", "@groups"), ("", "@reason")])])


def distribution_figure(dist: pd.DataFrame) -> figure:
    """The lag distribution as bars (prompt groups per lag)."""
    fig = figure(height=180, width=360, tools="", toolbar_location=None,
                 x_axis_label="lag (versions behind the trainer)", y_axis_label="prompt groups")
    src = ColumnDataSource(data=tf.columns(dist.assign(top=dist.groups.astype("float64"))))
    fig.vbar(x="lag", top="top", width=0.8, source=src, color=style.INFO, name="bars")
    fig.add_tools(HoverTool(tooltips=[("lag", "@lag"), ("groups", "@groups"),
                                      ("share", "@share{0.0%}")]))
    fig.y_range.start = 0
    return fig


class InFlight(View):
    """The wait board and the staleness of the shown run."""

    def __init__(self, data: DataStore, **params) -> None:
        super().__init__(data, **params)
        self.order = BoardOrder()
        self.board_ms = 0.0  # what the last board read took
        self._board = text_table(board_rows(pd.DataFrame(), 0), page_size=BOARD_ROWS,
                                 pagination=None, height=420, css_classes=["rs-board"],
                                 selectable=1)
        self._board.param.watch(self._open_trace, "selection")
        self._board_note = pn.pane.HTML(stylesheets=[CSS], sizing_mode="stretch_width")
        self._stale_at = -np.inf
        self._stale_run: object = None
        self._staleness = pd.DataFrame()
        self._lane: figure | None = None
        self._lane_pane = pn.pane.Bokeh(sizing_mode="stretch_width")
        self._dist_pane = pn.pane.Bokeh()
        self._steps = text_table(step_rows(pd.DataFrame({"lag": []})), page_size=10)
        self._tries = text_table(try_rows(_no_staleness(), 0), page_size=10)
        self._dropped = text_table(dropped_rows(_no_staleness(), 0), page_size=5)
        self._stale_note = pn.pane.HTML(stylesheets=[CSS], sizing_mode="stretch_width")
        self._stale_part = pn.Column(sizing_mode="stretch_width")
        self._stale_shape: tuple | None = None
        if self.shown:
            self.redraw()
        self.param.watch(self._on_shown, "shown")
        data.param.watch(self._on_tick, "last_refresh_ms", onlychanged=False)
        data.param.watch(self._on_run, "run_id")

    def _open_trace(self, event) -> None:
        """A row picked opens its rollout's trace (the Traces tab)."""
        if event.new and event.new[0] < len(self._board.value):
            trace = str(self._board.value.trace_id.iloc[event.new[0]])
            self._board.selection = []
            if trace:
                self.data.trace_id = trace

    def _on_shown(self, event) -> None:
        if event.new:
            self.redraw()

    def _on_tick(self, *_) -> None:
        if self.shown:
            self.redraw()

    def _on_run(self, *_) -> None:
        self.order = BoardOrder()
        self._stale_run = None

    def redraw(self) -> None:
        self.draw_board()
        if (self._stale_run != self.data.run_id
                or (self.data.live and time.monotonic() - self._stale_at >= STALENESS_EVERY_S)):
            self.draw_staleness()

    # -- the board --------------------------------------------------------------------------
    def draw_board(self) -> None:
        d = self.data
        if d.run_id is None:
            self._board_note.object = "<span class='rs-note'>No run yet.</span>"
            return
        started = time.perf_counter()
        now = board_now(d)
        rows, total = read_board(d.store, d.run_id, now, timeout_s=d.read_timeout_s)
        shown = board_rows(self.order.arrange(rows), now)
        self.board_ms = (time.perf_counter() - started) * 1e3
        self._board.value = shown
        more = (f"; the {len(shown):,} oldest are listed, {total - len(shown):,} newer are not"
                if total > len(shown) else "")
        where = "now" if d.live else "when the run's last span arrived"
        self._board_note.object = (
            f"<span class='rs-note' id='rs-board-note'>{total:,} rollout(s) in flight {where}"
            f"{more}. A row keeps its place until its rollout finishes; new ones join at the "
            f"bottom. Ages count from {html.escape(_clock(now))}; read in "
            f"{self.board_ms:,.0f} ms.</span>")

    # -- staleness --------------------------------------------------------------------------
    def draw_staleness(self) -> None:
        d = self.data
        self._stale_at = time.monotonic()
        self._stale_run = d.run_id
        s = read_staleness(d) if d.run_id is not None else _no_staleness()
        self._staleness = s
        t0, now = d.origin_ns(), d.last_seen_ns()
        windowed = d.large and d.window is not None  # read_staleness read the window's rows
        plot = staleness_layers(s, t0_ns=t0, now_ns=now, window=d.window if windowed else None)
        if self._lane is None:
            self._lane = tf.render(plot)
            self._lane_pane.object = self._lane
        else:
            tf.redraw(self._lane, plot)
            self._lane.x_range.update(start=plot.xlim[0], end=plot.xlim[1])
        dist = lag_distribution(s)
        self._dist_pane.object = distribution_figure(dist)
        self._steps.value = step_rows(s)
        self._tries.value = try_rows(s, t0)
        self._dropped.value = dropped_rows(s, t0)
        n = trained(s)
        scope = ("The tries of this session's window (a large run: docs/dashboard.md"
                 "#window-mode): " if windowed else "")
        self._stale_note.object = _staleness_text(s, n, dist, scope)
        shape = (bool(len(s)), bool((s.unit == "aborted").any()) if len(s) else False)
        if shape != self._stale_shape:  # the parts on the page change only with what they show
            self._stale_shape = shape
            self._stale_part[:] = self._staleness_parts(s)

    def _staleness_parts(self, s: pd.DataFrame) -> list:
        if not len(s):
            return [empty_note(self.data, "weight versions",
                               "Staleness reads RL tries (rl.rollout.attempt, with "
                               "nemo.rl.weight_version or the weight syncs before them), "
                               "rl.train_step and rl.weight_sync spans, and RL's own "
                               "rl.<algorithm>.collect_rollouts batches.")]
        parts = [plot_title("Staleness: how many versions behind the trainer the data it "
                            "trained on was"),
                 key_pane("<span class='rs-key'><span style='color:%s'>&#9679;</span> a try "
                          "&#9670; a batch, at the time it finished, at its lag</span>"
                          "<span class='rs-key'><span style='color:%s'>&#8212;</span> the "
                          "trainer's version (right axis)</span><span class='rs-key'>"
                          "<span style='color:%s'>&#10005;</span> in-flight rollouts aborted "
                          "as stale at a weight sync</span>"
                          % (style.INFO, style.NEUTRAL, style.ERROR)),
                 self._lane_pane, self._stale_note,
                 pn.Row(self._dist_pane, pn.Column("**Per train step**", self._steps,
                                                   sizing_mode="stretch_width"),
                        sizing_mode="stretch_width"),
                 "**Per try and batch** (the newest 2,000)", self._tries]
        if (s.unit == "aborted").any():
            parts += ["**Aborted or dropped for staleness**", self._dropped]
        return parts

    def __panel__(self):
        return pn.Column(
            "**In flight** (the rollouts running now, oldest first: their phase, age, the "
            "deadline budget left, the engine, and their last progress; select one to open its "
            "trace)",
            self._board_note, self._board, self._stale_part, sizing_mode="stretch_width")


def _no_staleness() -> pd.DataFrame:
    text = ("unit", "rollout_id", "outcome", "weight_version_from", "reason", "trace_id",
            "span_id")
    numbers = ("attempt", "start_ns", "end_ns", "weight_version", "train_step",
               "trained_version", "lag", "groups")
    return pd.DataFrame({**{c: pd.Series(dtype="object") for c in text},
                         **{c: pd.Series(dtype="Int64") for c in numbers}})


def _staleness_text(s: pd.DataFrame, t: pd.DataFrame, dist: pd.DataFrame,
                    scope: str = "") -> str:
    if not len(t):
        return (f"<span class='rs-note'>{html.escape(scope)}Nothing trained yet: a try's lag is "
                "known once a train step trains on it.</span>")
    groups = int(dist["groups"].sum())
    mean = float((dist.lag * dist.groups).sum() / groups) if groups else 0.0
    worst = int(dist.lag.max())
    aborted = int(s.loc[s.unit == "aborted", "groups"].sum())
    text = (f"{groups:,} prompt group(s) trained; mean lag {mean:.2f} version(s), the "
            f"largest {worst}")
    if aborted:
        text += f"; {aborted:,} aborted in flight as stale"
    return f"<span class='rs-note' id='rs-staleness-note'>{html.escape(scope + text)}.</span>"


def _clock(ns: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ns / S)) + "Z"
