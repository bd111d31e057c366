"""One trace as a waterfall: pure DataFrame -> HoloViews, for any OTLP data.

The input is the trace's spans as ``all_spans`` holds them (``DataStore.trace_spans``). Rows are
the spans in tree order: each span under its parent, siblings by start time, a span whose
parent is not in the store (not arrived, or outside the trace) as a root of its own. Parent
links are drawn as they were sent; where a sender's links are unreliable (released Gym's model
server parents a pipelined keep-alive request to the previous request's span), the waterfall
shows that, and the rollout's other views group by rollout id instead. The x axis is
milliseconds since the trace's first span started.
"""

from __future__ import annotations

import json

import holoviews as hv
from bokeh.models import NumeralTickFormatter
import numpy as np
import pandas as pd

from rolloutscope.dashboard import style
from rolloutscope.dashboard.timeline_plot import text_columns

ROW_COLUMNS = ["row", "depth", "label", "name", "service", "kind", "status", "start_ms",
               "end_ms", "duration_ms", "attrs", "span_id", "parent_span_id", "is_open",
               "color"]
ATTRS_SHOWN = 12  # attributes in a bar's hover text (the table below has them all)
ROW_HEIGHT_PX = 18
SERVICE_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#72b7b2", "#eeca3b",
                  "#ff9da6", "#9d755d", "#bab0ac", "#e45756")
TOOLTIPS = [("span", "@name"), ("service", "@service"), ("kind", "@kind"),
            ("duration", "@duration_ms{0,0.000} ms"), ("status", "@status"),
            ("start", "@start_ms{0,0.000} ms"), ("attributes", "@attrs")]


def tree_order(spans: pd.DataFrame) -> list[tuple[int, int]]:
    """(index into ``spans``, depth) in waterfall order: depth-first, siblings by start."""
    ids = set(spans.span_id)
    children: dict[str | None, list[int]] = {}
    for i, (parent, sid) in enumerate(zip(spans.parent_span_id, spans.span_id)):
        key = parent if isinstance(parent, str) and parent in ids and parent != sid else None
        children.setdefault(key, []).append(i)
    starts = spans.start_ns.to_numpy()
    out: list[tuple[int, int]] = []
    seen: set[int] = set()
    stack = [(i, 0) for i in sorted(children.get(None, []), key=lambda i: starts[i],
                                    reverse=True)]
    while stack:
        i, depth = stack.pop()
        if i in seen:  # a cycle of parent links: each span once
            continue
        seen.add(i)
        out.append((i, depth))
        kids = sorted(children.get(spans.span_id.iat[i], []), key=lambda j: starts[j],
                      reverse=True)
        stack.extend((j, depth + 1) for j in kids)
    # spans only reachable through a cycle have no root: list them at the top level
    out.extend((i, 0) for i in sorted(set(range(len(spans))) - seen, key=lambda i: starts[i]))
    return out


def _attrs_text(raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        return ""
    try:
        attrs = json.loads(raw)
    except ValueError:
        return raw[:300]
    if not isinstance(attrs, dict):
        return str(attrs)[:300]
    items = [f"{k}={v}" for k, v in list(attrs.items())[:ATTRS_SHOWN]]
    more = len(attrs) - ATTRS_SHOWN
    return "; ".join(items) + (f"; … {more} more" if more > 0 else "")


def service_colors(services) -> dict[str, str]:
    names = sorted({str(s) for s in services})
    return {s: SERVICE_COLORS[i % len(SERVICE_COLORS)] for i, s in enumerate(names)}


def waterfall_rows(spans: pd.DataFrame, *, now_ns: int | None = None) -> pd.DataFrame:
    """One row per span, in waterfall order, with its bar's extent in ms from the trace start;
    a span still open is drawn to ``now_ns`` (default: the trace's latest time)."""
    if not len(spans):
        return pd.DataFrame({c: pd.Series(dtype="float64" if c.endswith("_ms") else "object")
                             for c in ROW_COLUMNS})
    spans = spans.reset_index(drop=True)
    t0 = int(spans.start_ns.min())
    ends = pd.to_numeric(spans.end_ns, errors="coerce")
    latest = max(int(np.nanmax(ends.to_numpy(dtype="float64"))) if ends.notna().any() else t0,
                 int(spans.start_ns.max()))
    now = now_ns if now_ns is not None else latest
    colors = service_colors(spans.service.fillna("-"))
    rows = []
    for row, (i, depth) in enumerate(tree_order(spans)):
        s = spans.iloc[i]
        is_open = bool(s.is_open) if "is_open" in spans else pd.isna(s.end_ns)
        end = now if pd.isna(s.end_ns) else int(s.end_ns)
        service = "-" if pd.isna(s.service) else str(s.service)
        status = str(s.status_code or "UNSET")
        if isinstance(s.get("status_message"), str) and s.status_message:
            status += f": {s.status_message[:120]}"
        rows.append({
            # labels sit right-aligned on the axis: dots, not spaces, show the depth
            "row": row, "depth": depth, "label": "· " * depth + str(s["name"]),
            "name": str(s["name"]), "service": service, "kind": str(s.kind or ""),
            "status": status, "start_ms": (int(s.start_ns) - t0) / 1e6,
            "end_ms": (end - t0) / 1e6, "duration_ms": (end - int(s.start_ns)) / 1e6,
            "attrs": _attrs_text(s.get("attributes")), "span_id": str(s.span_id),
            "parent_span_id": None if pd.isna(s.parent_span_id) else str(s.parent_span_id),
            "is_open": is_open,
            "color": style.ERROR if s.status_code == "ERROR" else colors[service]})
    return pd.DataFrame(rows, columns=ROW_COLUMNS)


def waterfall_plot(rows: pd.DataFrame, *, title: str = "") -> hv.Overlay:
    """The waterfall: a bar per span (coloured by service, failed ones red, open ones faded
    with a dashed outline) on its own row, hover for name, service, duration, status and
    attributes. Same layers whatever the data."""
    n = len(rows)
    y = -rows.row.astype("float64") if n else pd.Series(dtype="float64")
    rects = pd.DataFrame({
        "t_trace": rows.start_ms.astype("float64"), "y_trace": y - 0.4,
        # a zero-length span still gets a sliver of a bar, so it can be hovered
        "t_end": np.maximum(rows.end_ms.astype("float64"),
                            rows.start_ms.astype("float64") + _sliver(rows)),
        "y_top": y + 0.4}).join(rows[["name", "service", "kind", "status", "start_ms",
                                      "duration_ms", "attrs", "span_id", "color", "label"]])
    is_open = rows.is_open.astype(bool).to_numpy() if n else np.array([], dtype=bool)
    # named apart from every other tab's axes: Panel links panes by dimension name
    kdims = [hv.Dimension("t_trace", label="ms since the trace started"), "y_trace", "t_end",
             "y_top"]
    vdims = ["name", "service", "kind", "status", "start_ms", "duration_ms", "attrs",
             "span_id", "color", "label"]
    # Bokeh refuses an empty tick list: an empty waterfall gets one blank tick
    ticks = [(-float(r), label) for r, label in zip(rows.row, rows.label)] or [(0.0, "")]
    xmax = float(rows.end_ms.max()) if n else 1.0
    common = dict(xlim=(0.0, max(xmax * 1.02, 1e-3)), ylim=(-n + 0.5 if n else -0.5, 0.5),
                  framewise=True)
    layers = [
        hv.Rectangles(text_columns(rects[~is_open]), kdims, vdims, group="Span").opts(
            color="color", line_color="white", line_width=0.5, tools=["hover", "tap"],
            hover_tooltips=TOOLTIPS, **common),
        hv.Rectangles(text_columns(rects[is_open]), kdims, vdims, group="Open").opts(
            color="color", fill_alpha=0.45, line_color=style.OPEN_OUTLINE, line_dash="dashed",
            tools=["hover", "tap"], hover_tooltips=TOOLTIPS, **common),
    ]
    height = int(np.clip(n * ROW_HEIGHT_PX + 80, 160, 2400))
    return hv.Overlay(layers).opts(hv.opts.Overlay(
        yticks=ticks, ylabel="", height=height, responsive=True, show_grid=True, title=title,
        xformatter=NumeralTickFormatter(format="0,0.[00]"),
        gridstyle={"ygrid_line_alpha": 0.0, "xgrid_line_alpha": 0.25},
        fontsize={"yticks": "8pt", "xticks": "9pt"}, active_tools=["xwheel_zoom", "xpan"],
        default_tools=["xpan", "xwheel_zoom", "box_zoom", "reset", "save"]))


def _sliver(rows: pd.DataFrame) -> float:
    span = float(rows.end_ms.max() - rows.start_ms.min()) if len(rows) else 1.0
    return max(span, 1e-3) / 400.0


def legend_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Service -> colour, for the note under the plot."""
    if not len(rows):
        return pd.DataFrame(columns=["service", "color", "spans"])
    colors = service_colors(rows.service)
    counts = rows.service.value_counts()
    return pd.DataFrame({"service": list(colors), "color": list(colors.values()),
                         "spans": [int(counts.get(s, 0)) for s in colors]})
