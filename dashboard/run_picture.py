"""The whole run at a glance, from the per-second sums the store keeps (``store/summaries.py``):
tries in flight, rollouts parked and serving shards over the run, and what each time bucket
committed, timed out and failed. Its cost follows the run's length in seconds, never its rows:
the bucket is chosen so the picture has at most ``MAX_BUCKETS`` bars, and the read is shared by
every session of a server (``DataStore.derived``-style, keyed by the data version).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rolloutscope.dashboard import style
from rolloutscope.store import summaries

MAX_BUCKETS = 400
NICE_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
GAUGE_LABELS = {"in_flight": "tries in flight", "parked": "rollouts parked",
                "serving_shards": "serving shards"}
GAUGE_COLORS = {"in_flight": style.OK, "parked": style.PARKED, "serving_shards": style.INFO}
COUNT_LABELS = {"committed": "committed", "timeouts": "deadlines fired",
                "failed_tries": "failed tries", "redispatches": "re-dispatches"}
COUNT_COLORS = {"committed": style.OK, "timeouts": style.WARN, "failed_tries": style.ERROR,
                "redispatches": "#8e7cc3"}


def bucket_s(length_s: float) -> int:
    """The smallest round width that draws a run of ``length_s`` in at most MAX_BUCKETS."""
    need = max(length_s, 1.0) / MAX_BUCKETS
    return next((w for w in NICE_S if w >= need), int(math.ceil(need)))


def read(store, run_id: str, length_s: float) -> tuple[pd.DataFrame, int]:
    """The run's buckets (``summaries.buckets``) and their width in seconds."""
    width = bucket_s(length_s)
    return summaries.buckets(store, run_id, width), width


def figure(buckets: pd.DataFrame, width_s: int, t0_ns: int, *, pickable: bool = False):
    """Gauges over the run above the counts per bucket, x in seconds from the run's start: a
    Bokeh column of two plots sharing their x range. ``pickable``: the gauges take a box select
    across x (window mode: ``Overview`` hears the stretch through ``PICK_EVENT``)."""
    from bokeh.layouts import column
    from bokeh.models import BoxSelectTool, ColumnDataSource, HoverTool, Range1d
    from bokeh.plotting import figure as bokeh_figure

    x = ((buckets.bucket_ns.astype("float64") - t0_ns) / 1e9).to_numpy() if len(buckets) \
        else np.array([], dtype="float64")
    hi = float(x.max()) + width_s if len(x) else 1.0
    x_range = Range1d(min(0.0, float(x.min())) if len(x) else 0.0, hi)

    def plot(columns: dict[str, str], colors: dict[str, str], ylabel: str, at: float, mode: str):
        fig = bokeh_figure(height=170, sizing_mode="stretch_width", x_range=x_range,
                           tools="xpan,xwheel_zoom,reset,save", toolbar_location="right",
                           x_axis_label="seconds", y_axis_label=ylabel)
        for col, label in columns.items():
            y = buckets[col].to_numpy(dtype="float64") if len(buckets) else np.array([])
            source = ColumnDataSource({"x": x + at, "y": y})
            fig.step("x", "y", source=source, mode=mode, color=colors[col], legend_label=label,
                     line_width=1.5, name=label)
        fig.add_tools(HoverTool(tooltips=[("s", "@x{0,0}"), ("value", "@y{0,0.[00]}")]))
        fig.legend.location = "top_left"
        fig.legend.label_text_font_size = "9pt"
        return fig

    gauges = plot(GAUGE_LABELS, GAUGE_COLORS, "now", float(width_s), "before")
    counts = plot(COUNT_LABELS, COUNT_COLORS, f"per {width_s:g} s", width_s / 2, "center")
    if pickable:
        select = BoxSelectTool(dimensions="width")
        gauges.add_tools(select)
        gauges.toolbar.active_drag = select
    return column(gauges, counts, sizing_mode="stretch_width")


def curves(layout) -> dict[str, pd.DataFrame]:
    """Each drawn line's (x, y) by its label: what a test reads back from ``figure``."""
    out = {}
    for fig in layout.children:
        for r in fig.renderers:
            out[r.name] = pd.DataFrame({"x": list(r.data_source.data["x"]),
                                        "y": list(r.data_source.data["y"])})
    return out


__all__ = ["MAX_BUCKETS", "bucket_s", "curves", "figure", "read"]
