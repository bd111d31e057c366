"""The time plots as Bokeh figures built directly: the lane plot, the rollout gauges and the
serving step line, over the rows ``timeline_plot`` derives.

Rule: pure. A builder takes frames and the time range to show and returns a Bokeh ``figure``;
it queries nothing and reads no clock, and its figures are tested as data (their renderers'
sources and glyphs). Every builder returns the same renderers, named, in the same order,
whatever the data, so a view redraws a figure on screen in place from a fresh one (``redraw``):
the browser keeps its models and only their data moves.

Why not HoloViews: at 10M spans it spent ~440 ms of the Timeline's first render building these
three plots (~25-30 ms a layer, empty or not, in ``initialize_plot`` and ``compute_ranges``); a
renderer built here costs ~5 ms.

Linking is the caller's: every time plot of a tab is handed one ``Range1d`` (``TimeView``), so
a zoom or pan on one moves the others in the browser. No legend is drawn inside a plot
(``timeline_plot.key_html`` says above them what each colour and marker means), and every plot
keeps the same borders and toolbar, so the frames of a tab's plots line up.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from bokeh.core.properties import field
from bokeh.models import (
    BoxZoomTool,
    ColumnDataSource,
    FixedTicker,
    HoverTool,
    LinearAxis,
    PanTool,
    Range1d,
    ResetTool,
    SaveTool,
    WheelZoomTool,
)
from bokeh.plotting import figure

from rolloutscope.dashboard import style
from rolloutscope.dashboard import timeline_plot as tl

S = 1e9
TIME_LABEL = "time since run start (s)"
LEFT_BORDER_PX = 215  # room for the lane labels; every time plot of a tab keeps the same frame
RIGHT_BORDER_PX = 88  # room for the gauges' second axis, its ticks and label
SMALL = "9pt"


def source(df: pd.DataFrame) -> ColumnDataSource:
    """A data source of ``df``'s columns: numbers as float arrays, anything else as objects
    with missing values as None (Arrow-backed text holds pd.NA, which Bokeh cannot send). A
    column of no rows goes as an empty list whatever its type: BokehJS refuses an empty float
    array as colours ("invalid color array"), and an empty frame's columns are often floats."""
    data = {}
    for c in df.columns:
        col = df[c]
        if not len(col):
            data[c] = np.array([], dtype=object)
        elif pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col):
            data[c] = col.to_numpy(dtype="float64", na_value=np.nan)
        else:
            data[c] = col.to_numpy(dtype=object, na_value=None)
    return ColumnDataSource(data=data)


def time_figure(*, height: int, xlim: tuple[float, float], ylim: tuple[float, float],
                ylabel: str = "", xlabel: str = TIME_LABEL, xlabel_size: str = SMALL) -> figure:
    """An empty time plot: page-wide, x-only pan and zoom active, grid lines faint, the
    tab's shared borders, no logo."""
    # the tools as models, not named in a string: figure() parsing a tool string took a third
    # of a plot's construction, and a tab builds three plots on every first render
    pan, zoom = PanTool(dimensions="width"), WheelZoomTool(dimensions="width")
    fig = figure(height=height, sizing_mode="stretch_width",
                 tools=[pan, zoom, BoxZoomTool(dimensions="width"), ResetTool(), SaveTool()],
                 active_drag=pan, active_scroll=zoom,
                 x_range=Range1d(*xlim, name="x"), y_range=Range1d(*ylim, name="y"),
                 min_border_left=LEFT_BORDER_PX, min_border_right=RIGHT_BORDER_PX,
                 toolbar_location="right")
    fig.toolbar.logo = None
    fig.xaxis.axis_label = xlabel
    fig.xaxis.axis_label_text_font_size = xlabel_size
    fig.yaxis.axis_label = ylabel or None
    fig.yaxis.axis_label_text_font_size = SMALL
    for axis in (*fig.xaxis, *fig.yaxis):
        axis.major_label_text_font_size = SMALL
    fig.xgrid.grid_line_alpha = 0.5
    return fig


def hover(fig: figure, renderer, tooltips, *, follow_mouse: bool = False) -> None:
    """A hover tool over ``renderer`` alone, with its own tooltips."""
    # a bar's tooltip anchored at its centre is dropped when that centre is off screen (a
    # shard healthy from the run's start, zoomed onto a few seconds): bars follow the mouse
    fig.add_tools(HoverTool(renderers=[renderer], tooltips=tooltips,
                            point_policy="follow_mouse" if follow_mouse else "snap_to_data"))


# -- the lane plot ---------------------------------------------------------------------------
def lane_plot(frames: tl.TimelineFrames, *, t0_ns: int, now_ns: int,
              xlim: tuple[float, float] | None = None,
              highlight: tuple[float, float] | None = None,
              height: int | None = None, markers: bool = True) -> figure:
    """The lane plot: windows, participants, shards and rollouts on one time axis.

    Three renderers, bottom to top: ``shade`` (stalls, then the selected incident's span),
    ``bars`` (``tl.bar_styles``: closed, then open ones faded with a dashed outline, then the
    evidence, outlined) and, with ``markers``, ``marks`` (every instant, each kind with its own
    marker). Its height follows the lane count (``style.lane_plot_height``), so lanes fill the
    plot.
    """
    lanes = frames.lanes
    span = (0.0, max((now_ns - t0_ns) / S, 1.0))
    xlim = xlim or span
    top, bottom = 0.5, -len(lanes.labels) + 0.5
    fig = time_figure(height=height or style.lane_plot_height(len(lanes.labels)), xlim=xlim,
                      ylim=(bottom, top), xlabel_size="10pt")
    fig.ygrid.grid_line_alpha = 0.0
    fig.yaxis.ticker = FixedTicker(ticks=[v + 0.0 for v, _ in lanes.ticks])  # 0.0, not -0.0
    fig.yaxis.major_label_overrides = {v + 0.0: label for v, label in lanes.ticks}
    # no hover on the shading: it covers every lane of its stretch, and its tooltip would hide
    # the bars' (the key names it; the Incident tab's incident lane has its summary)
    fig.quad(left="x0", right="x1", bottom="y0", top="y1", source=source(
        shade_rects(frames.incidents, highlight, t0_ns=t0_ns, now_ns=now_ns, ylim=(bottom, top))),
        fill_color=field("color"), fill_alpha=field("alpha"), line_alpha=0, name="shade")
    bars = fig.quad(left="x0", right="x1", bottom="y0", top="y1",
                    source=source(lane_bars(frames, lanes, t0_ns=t0_ns, now_ns=now_ns,
                                            xlim=xlim)),
                    fill_color=field("color"), fill_alpha=field("fill_alpha"),
                    line_color=field("line"), line_width=field("line_width"),
                    line_dash=field("dash"), name="bars")
    hover(fig, bars, tl.RECT_TOOLTIPS, follow_mouse=True)
    if markers:
        marks = fig.scatter(x="x", y="y", source=source(
            tl.marker_points(frames.marks_at(t0_ns))), marker=field("marker"),
            size=field("size"), fill_color=field("fill"), line_color=field("line"),
            line_width=field("line_width"), name="marks")
        hover(fig, marks, tl.mark_tooltips("x"))
    return fig


def shade_rects(incidents: pd.DataFrame, highlight: tuple[float, float] | None, *, t0_ns: int,
                now_ns: int, ylim: tuple[float, float]) -> pd.DataFrame:
    """The shading behind the lanes: stalls (faint), then the selected incident's span."""
    bottom, top = ylim
    stalls = tl.shaded_periods(incidents, ["stall"], t0_ns, now_ns)
    hl = pd.DataFrame({"x0": [highlight[0]] if highlight else [],
                       "x1": [highlight[1]] if highlight else [],
                       "what": ["selected incident"] if highlight else [],
                       "detail": [""] if highlight else []})
    return pd.concat([stalls.assign(color=style.STALL, alpha=0.10),
                      hl.assign(color=style.INCIDENT_SPAN, alpha=0.25)], ignore_index=True
                     ).assign(y0=bottom, y1=top).astype({"x0": "float64", "x1": "float64"})[
        ["x0", "y0", "x1", "y1", "what", "detail", "color", "alpha"]]


def lane_bars(frames: tl.TimelineFrames, lanes: tl.Lanes, *, t0_ns: int, now_ns: int,
              xlim: tuple[float, float]) -> pd.DataFrame:
    """Every bar of the lane plot, styled (``tl.bar_styles``). An interval that begins and
    ends at one instant (a fault, a probe tick, a state left at once) is a bar of no width:
    drawn a few pixels wide so it is seen and hovered."""
    rects = tl.interval_rects(frames, lanes, t0_ns, now_ns)
    if len(rects):
        least = (xlim[1] - xlim[0]) * tl.MIN_BAR_FRACTION
        rects = rects.assign(x1=np.maximum(rects.x1.to_numpy(dtype="float64"),
                                           rects.x0.to_numpy(dtype="float64") + least))
    return tl.bar_styles(rects, frames.evidence)


# -- the rollout gauges ----------------------------------------------------------------------
def steps_after(t: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """A step line's vertices: each value held from its time to the next one."""
    t, v = np.asarray(t, dtype="float64"), np.asarray(values, dtype="float64")
    if len(t) < 2:
        return t, v
    x, y = np.empty(2 * len(t) - 1), np.empty(2 * len(t) - 1)
    x[0::2], x[1::2] = t, t[1:]
    y[0::2], y[1::2] = v, v[:-1]
    return x, y


def rollout_gauges(gauges: pd.DataFrame, *, xlim: tuple[float, float],
                   marks: pd.DataFrame | None = None,
                   committed_label: str = "committed so far",
                   height: int = style.GAUGE_HEIGHT_PX) -> figure:
    """The rollout gauges: tries in flight (left axis) and tries committed so far (right axis)
    as step lines, under vertical ``marks`` (t, what, detail; a watchdog's stall line).
    Renderers: ``marks``, ``in flight``, ``committed``."""
    ymax = max(float(gauges.in_flight.max()) if len(gauges) else 0.0, 1.0) * 1.15
    cmax = max(float(gauges.committed.max()) if len(gauges) else 0.0, 1.0) * 1.15
    fig = time_figure(height=height, xlim=xlim, ylim=(0.0, ymax), ylabel="tries in flight")
    fig.extra_y_ranges = {"committed": Range1d(0.0, cmax, name="y")}
    right = LinearAxis(y_range_name="committed", axis_label=committed_label,
                       axis_label_text_font_size=SMALL, major_label_text_font_size=SMALL)
    fig.add_layout(right, "right")
    m = marks if marks is not None else pd.DataFrame({"t": [], "what": [], "detail": []})
    seg = fig.segment(x0="t", y0=0.0, x1="t", y1=ymax, source=source(pd.DataFrame({
        "t": m.t.astype("float64"), "what": m.what.astype(str), "detail": m.detail.astype(str)})),
        line_color=style.WARN, line_width=2.5, line_dash="dashed", name="marks")
    hover(fig, seg, tl.SHADE_TOOLTIPS)
    t, flight = steps_after(gauges.t, gauges.in_flight)
    line = fig.line("t", "in_flight", source=ColumnDataSource({"t": t, "in_flight": flight}),
                    color=style.INFO, line_width=2, name="in flight")
    hover(fig, line, [("at (s)", "@t{0,0.0}"), ("in flight", "@in_flight")])
    t, done = steps_after(gauges.t, gauges.committed)
    line = fig.line("t", "committed", source=ColumnDataSource({"t": t, "committed": done}),
                    y_range_name="committed", color=style.OK, line_width=2, name="committed")
    hover(fig, line, [("at (s)", "@t{0,0.0}"), (committed_label, "@committed")])
    return fig


# -- the serving plot ------------------------------------------------------------------------
def serving_plot(shard_states: pd.DataFrame, *, t0_ns: int, now_ns: int,
                 xlim: tuple[float, float] | None = None,
                 router: pd.DataFrame | None = None, height: int = style.SERVING_HEIGHT_PX,
                 fleet: pd.DataFrame | None = None) -> figure:
    """Serving shards (fleet) as a step line, with the router's serving backends if known and
    the fleet's total shard count as a dashed reference: the segments of one renderer,
    ``lines`` (``tl.serving_segments``), each with its line's colour, dash and width."""
    segments = tl.serving_segments(shard_states, t0_ns=t0_ns, now_ns=now_ns, router=router,
                                   fleet=fleet)
    xlim = xlim or (0.0, max((now_ns - t0_ns) / S, 1.0))
    ymax = max(float(segments[["y0", "y1"]].max().max()) if len(segments) else 0.0, 1.0)
    fig = time_figure(height=height, xlim=xlim, ylim=(0.0, ymax * 1.15), ylabel="shards")
    lines = fig.segment(x0="t", y0="y0", x1="t_end", y1="y1", source=source(segments),
                        line_color=field("color"), line_dash=field("dash"),
                        line_width=field("width"), name="lines")
    hover(fig, lines, [("", "@what"), ("at (s)", "$x{0,0.0}"), ("serving", "@serving")])
    return fig


# -- redrawing in place ----------------------------------------------------------------------
def redraw(shown: figure, fresh: figure) -> None:
    """Show ``fresh``'s content on ``shown``, a figure of the same builder already on screen:
    each renderer's rows, the y ranges, the lanes' ticks and labels, the axis labels, the
    tooltips and the height. ``shown`` keeps its models and its x range (the tab's)."""
    for old, new in zip(shown.renderers, fresh.renderers, strict=True):
        old.data_source.data = dict(new.data_source.data)
    for old, new in zip([shown.y_range, *shown.extra_y_ranges.values()],
                        [fresh.y_range, *fresh.extra_y_ranges.values()], strict=True):
        old.update(start=new.start, end=new.end)
    for old, new in zip(shown.yaxis, fresh.yaxis, strict=True):
        if isinstance(new.ticker, FixedTicker):
            old.ticker.ticks = list(new.ticker.ticks)
        old.update(major_label_overrides=dict(new.major_label_overrides),
                   axis_label=new.axis_label)
    for old, new in zip(_hovers(shown), _hovers(fresh), strict=True):
        old.tooltips = new.tooltips
    shown.height = fresh.height


def _hovers(fig: figure) -> list[HoverTool]:
    return [tool for tool in fig.tools if isinstance(tool, HoverTool)]


def layer(fig: figure, name: str) -> pd.DataFrame:
    """What the renderer ``name`` of ``fig`` draws, as a frame (for notebooks and tests)."""
    [renderer] = [r for r in fig.renderers if r.name == name]
    return pd.DataFrame(dict(renderer.data_source.data))
