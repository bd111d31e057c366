"""The time plots as Bokeh figures built directly: the lane plot, the rollout gauges and the
serving step line, over the rows ``timeline_plot`` derives.

Rule: pure. A builder takes frames and the time range to show and returns a ``Plot``: what to
draw, as data (each renderer's rows and glyph, the ranges, the lanes' ticks, the height). It
queries nothing and reads no clock. ``render`` makes a Bokeh ``figure`` of a plot, once, when a
tab is first drawn; a live tick's redraw moves a fresh plot's data onto the figure on screen
(``redraw``) without building a figure: the browser keeps its models and only their data moves.
Every builder returns the same layers, named, in the same order, whatever the data. The
``*_plot`` functions (a figure at once) are for notebooks and tests.

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
from dataclasses import dataclass, field as dc_field

import numpy as np
import pandas as pd
from bokeh.core.properties import field
from bokeh.models import (
    BoxZoomTool,
    ColumnDataSource,
    FixedTicker,
    GlyphRenderer,
    HoverTool,
    Line,
    LinearAxis,
    NumeralTickFormatter,
    PanTool,
    Quad,
    Range1d,
    ResetTool,
    SaveTool,
    Scatter,
    Segment,
    WheelZoomTool,
)
from bokeh.plotting import figure
from bokeh.plotting._renderer import pop_visuals

from rolloutscope.dashboard import style
from rolloutscope.dashboard import timeline_plot as tl

S = 1e9
TIME_LABEL = "time since run start (s)"
LEFT_BORDER_PX = 215  # room for the lane labels; every time plot of a tab keeps the same frame
RIGHT_BORDER_PX = 88  # room for the gauges' second axis, its ticks and label
SMALL = "9pt"


def source(df: pd.DataFrame) -> ColumnDataSource:
    """A data source of ``df``'s columns (``columns``)."""
    return ColumnDataSource(data=columns(df))


def columns(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """``df``'s columns as a data source holds them: numbers as float arrays, anything else as
    objects with missing values as None (Arrow-backed text holds pd.NA, which Bokeh cannot send). A
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
    return data


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
    # seconds as 900,000 or 12.5, never 9.000e+5: a long run's times pass Bokeh's default's
    # switch to scientific notation (1e5 s, about 28 h)
    fig.xaxis.formatter = NumeralTickFormatter(format="0,0.[00]")
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


# -- plots as data ---------------------------------------------------------------------------
@dataclass
class Layer:
    """One renderer of a plot: the figure method that draws it (``quad``, ``segment``,
    ``scatter``, ``line``), its rows, its glyph's arguments (columns named with ``field``, or
    constants) and its hover's tooltips (None: no hover)."""

    name: str
    glyph: str
    data: dict[str, np.ndarray]
    style: dict = dc_field(default_factory=dict)
    tooltips: list | None = None
    follow_mouse: bool = False


@dataclass
class Plot:
    """A time plot as data: its layers bottom to top, its ranges and height, the lanes' ticks
    and labels (``lanes``: a lane plot, no y grid), a second y axis on the right (``right``:
    its label and range, for layers drawn with ``y_range_name="right"``) and a title."""

    height: int
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    layers: list[Layer]
    ylabel: str = ""
    xlabel: str = TIME_LABEL
    xlabel_size: str = SMALL
    lanes: list[tuple[float, str]] | None = None
    right: tuple[str, tuple[float, float]] | None = None
    title: str | None = None

    def layer(self, name: str) -> pd.DataFrame:
        """What the layer ``name`` draws, as a frame."""
        [found] = [layer for layer in self.layers if layer.name == name]
        return pd.DataFrame(found.data)


def render(plot: Plot) -> figure:
    """A Bokeh figure of ``plot``: its renderers in the order of its layers, each named."""
    fig = time_figure(height=plot.height, xlim=plot.xlim, ylim=plot.ylim, ylabel=plot.ylabel,
                      xlabel=plot.xlabel, xlabel_size=plot.xlabel_size)
    if plot.title is not None:
        fig.title.text = plot.title
        fig.title.text_font_size = "10pt"
    if plot.lanes is not None:
        fig.ygrid.grid_line_alpha = 0.0
        fig.yaxis.ticker = FixedTicker(ticks=[v for v, _ in plot.lanes])
        fig.yaxis.major_label_overrides = dict(plot.lanes)
    if plot.right is not None:
        label, (lo, hi) = plot.right
        fig.extra_y_ranges = {"right": Range1d(lo, hi, name="y")}
        fig.add_layout(LinearAxis(y_range_name="right", axis_label=label,
                                  axis_label_text_font_size=SMALL,
                                  major_label_text_font_size=SMALL), "right")
    for layer in plot.layers:
        renderer = glyph_renderer(layer)
        fig.renderers.append(renderer)
        if layer.tooltips is not None:
            hover(fig, renderer, layer.tooltips, follow_mouse=layer.follow_mouse)
    return fig


GLYPHS = {"quad": Quad, "segment": Segment, "scatter": Scatter, "line": Line}
RENDERER_ARGS = frozenset({"y_range_name", "x_range_name", "level"})


def glyph_renderer(layer: Layer) -> GlyphRenderer:
    """The renderer of ``layer``, what ``figure.<glyph>(source=..., **style)`` makes, built
    directly: the glyph methods took half of a layer's construction (~1.3 ms of 2.6 ms),
    making selection and mute glyphs that BokehJS derives itself when left "auto" (the same
    look). Its visual properties come from Bokeh's own cascade (``pop_visuals``: ``color``
    and ``alpha`` for every fill, line and hatch, then the glyph methods' defaults), so the
    glyph is the one the glyph methods make (checked by a test)."""
    cls = GLYPHS[layer.glyph]
    args = dict(layer.style)
    on_renderer = {k: args.pop(k) for k in RENDERER_ARGS if k in args}
    visuals = pop_visuals(cls, args)
    return GlyphRenderer(data_source=ColumnDataSource(data=layer.data),
                         glyph=cls(**args, **visuals), name=layer.name, **on_renderer)


def redraw(shown: figure, plot: Plot) -> None:
    """Show ``plot`` on ``shown``, a figure ``render`` made of a plot of the same builder and
    already on screen: each renderer's rows, the y ranges, the lanes' ticks and labels, the
    axis labels, the tooltips, the title and the height. No model is made: ``shown`` keeps its
    models and its x range (the tab's)."""
    for renderer, layer in zip(shown.renderers, plot.layers, strict=True):
        renderer.data_source.data = layer.data
    shown.y_range.update(start=plot.ylim[0], end=plot.ylim[1])
    left, *rest = shown.yaxis
    if plot.lanes is not None:
        left.ticker.ticks = [v for v, _ in plot.lanes]
        left.major_label_overrides = dict(plot.lanes)
    left.axis_label = plot.ylabel or None
    if plot.right is not None:
        label, (lo, hi) = plot.right
        shown.extra_y_ranges["right"].update(start=lo, end=hi)
        [axis] = rest
        axis.axis_label = label
    hovered = [layer for layer in plot.layers if layer.tooltips is not None]
    for tool, layer in zip(_hovers(shown), hovered, strict=True):
        tool.tooltips = layer.tooltips
    if plot.title is not None:
        shown.title.text = plot.title
    shown.height = plot.height


def _hovers(fig: figure) -> list[HoverTool]:
    return [tool for tool in fig.tools if isinstance(tool, HoverTool)]


def layer(fig: figure | Plot, name: str) -> pd.DataFrame:
    """What the renderer (or the layer) ``name`` of ``fig`` draws, as a frame (for notebooks
    and tests)."""
    if isinstance(fig, Plot):
        return fig.layer(name)
    [renderer] = [r for r in fig.renderers if r.name == name]
    return pd.DataFrame(dict(renderer.data_source.data))


# -- the lane plot ---------------------------------------------------------------------------
def lane_plot(frames: tl.TimelineFrames, **kw) -> figure:
    """The lane plot's figure (``lane_layers``)."""
    return render(lane_layers(frames, **kw))


def lane_layers(frames: tl.TimelineFrames, *, t0_ns: int, now_ns: int,
                xlim: tuple[float, float] | None = None,
                highlight: tuple[float, float] | None = None,
                height: int | None = None, markers: bool = True) -> Plot:
    """The lane plot: windows, participants, shards and rollouts on one time axis.

    Three layers, bottom to top: ``shade`` (stalls, then the selected incident's span),
    ``bars`` (``tl.bar_styles``: closed, then open ones faded with a dashed outline, then the
    evidence, outlined) and, with ``markers``, ``marks`` (every instant, each kind with its own
    marker). Its height follows the lane count (``style.lane_plot_height``), so lanes fill the
    plot.
    """
    lanes = frames.lanes
    span = (0.0, max((now_ns - t0_ns) / S, 1.0))
    xlim = xlim or span
    top, bottom = 0.5, -len(lanes.labels) + 0.5
    # no hover on the shading: it covers every lane of its stretch, and its tooltip would hide
    # the bars' (the key names it; the Incident tab's incident lane has its summary)
    layers = [
        Layer("shade", "quad", columns(shade_rects(frames.incidents, highlight, t0_ns=t0_ns,
                                                   now_ns=now_ns, ylim=(bottom, top))),
              dict(left="x0", right="x1", bottom="y0", top="y1", fill_color=field("color"),
                   fill_alpha=field("alpha"), line_alpha=0)),
        Layer("bars", "quad", columns(lane_bars(frames, lanes, t0_ns=t0_ns, now_ns=now_ns,
                                                xlim=xlim)),
              dict(left="x0", right="x1", bottom="y0", top="y1", fill_color=field("color"),
                   fill_alpha=field("fill_alpha"), line_color=field("line"),
                   line_width=field("line_width"), line_dash=field("dash")),
              tl.RECT_TOOLTIPS, follow_mouse=True)]
    if markers:
        layers.append(Layer(
            "marks", "scatter", columns(tl.marker_points(frames.marks_at(t0_ns))),
            dict(x="x", y="y", marker=field("marker"), size=field("size"),
                 fill_color=field("fill"), line_color=field("line"),
                 line_width=field("line_width")), tl.mark_tooltips("x")))
    return Plot(height=height or style.lane_plot_height(len(lanes.labels)), xlim=xlim,
                ylim=(bottom, top), layers=layers, xlabel_size="10pt",
                lanes=[(v + 0.0, label) for v, label in lanes.ticks])  # 0.0, not -0.0


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


def rollout_gauges(gauges: pd.DataFrame, **kw) -> figure:
    """The rollout gauges' figure (``gauge_layers``)."""
    return render(gauge_layers(gauges, **kw))


def gauge_layers(gauges: pd.DataFrame, *, xlim: tuple[float, float],
                 marks: pd.DataFrame | None = None,
                 committed_label: str = "committed so far",
                 height: int = style.GAUGE_HEIGHT_PX) -> Plot:
    """The rollout gauges: tries in flight (left axis) and tries committed so far (right axis)
    as step lines, under vertical ``marks`` (t, what, detail; a watchdog's stall line).
    Layers: ``marks``, ``in flight``, ``committed``."""
    ymax = max(float(gauges.in_flight.max()) if len(gauges) else 0.0, 1.0) * 1.15
    cmax = max(float(gauges.committed.max()) if len(gauges) else 0.0, 1.0) * 1.15
    m = marks if marks is not None else pd.DataFrame({"t": [], "what": [], "detail": []})
    marks_rows = pd.DataFrame({"t": m.t.astype("float64"), "y0": 0.0, "y1": ymax,
                               "what": m.what.astype(str), "detail": m.detail.astype(str)})
    t, flight = steps_after(gauges.t, gauges.in_flight)
    tc, done = steps_after(gauges.t, gauges.committed)
    return Plot(height=height, xlim=xlim, ylim=(0.0, ymax), ylabel="tries in flight",
                right=(committed_label, (0.0, cmax)), layers=[
        Layer("marks", "segment", columns(marks_rows),
              dict(x0="t", y0="y0", x1="t", y1="y1", line_color=style.WARN, line_width=2.5,
                   line_dash="dashed"), tl.SHADE_TOOLTIPS),
        Layer("in flight", "line", {"t": t, "in_flight": flight},
              dict(x="t", y="in_flight", color=style.INFO, line_width=2),
              [("at (s)", "@t{0,0.0}"), ("in flight", "@in_flight")]),
        Layer("committed", "line", {"t": tc, "committed": done},
              dict(x="t", y="committed", y_range_name="right", color=style.OK, line_width=2),
              [("at (s)", "@t{0,0.0}"), (committed_label, "@committed")])])


# -- the serving plot ------------------------------------------------------------------------
def serving_plot(shard_states: pd.DataFrame, **kw) -> figure:
    """The serving plot's figure (``serving_layers``)."""
    return render(serving_layers(shard_states, **kw))


def serving_layers(shard_states: pd.DataFrame, *, t0_ns: int, now_ns: int,
                   xlim: tuple[float, float] | None = None,
                   router: pd.DataFrame | None = None, height: int = style.SERVING_HEIGHT_PX,
                   fleet: pd.DataFrame | None = None) -> Plot:
    """Serving shards (fleet) as a step line, with the router's serving backends if known and
    the fleet's total shard count as a dashed reference: the segments of one layer, ``lines``
    (``tl.serving_segments``), each with its line's colour, dash and width."""
    segments = tl.serving_segments(shard_states, t0_ns=t0_ns, now_ns=now_ns, router=router,
                                   fleet=fleet)
    xlim = xlim or (0.0, max((now_ns - t0_ns) / S, 1.0))
    ymax = max(float(segments[["y0", "y1"]].max().max()) if len(segments) else 0.0, 1.0)
    return Plot(height=height, xlim=xlim, ylim=(0.0, ymax * 1.15), ylabel="shards", layers=[
        Layer("lines", "segment", columns(segments),
              dict(x0="t", y0="y0", x1="t_end", y1="y1", line_color=field("color"),
                   line_dash=field("dash"), line_width=field("width")),
              [("", "@what"), ("at (s)", "$x{0,0.0}"), ("serving", "@serving")])])
