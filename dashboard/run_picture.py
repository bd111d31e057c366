"""The whole run at a glance, from the per-second sums the store keeps (``store/summaries.py``):
tries in flight, rollouts parked and serving shards over the run, and what each time bucket
committed, timed out and failed. Its cost follows the run's length in seconds, never its rows:
the bucket is chosen so the picture has at most ``MAX_BUCKETS`` bars, and the read is shared by
every session of a server (``DataStore.derived``-style, keyed by the data version).
"""

from __future__ import annotations

import math

import holoviews as hv
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


def figure(buckets: pd.DataFrame, width_s: int, t0_ns: int) -> hv.Layout:
    """Gauges over the run above the counts per bucket, x in seconds from the run's start."""
    x = (buckets.bucket_ns.astype("float64") - t0_ns) / 1e9 if len(buckets) else pd.Series(
        dtype="float64")
    common = dict(responsive=True, show_grid=True, tools=["hover"], xlabel="seconds",
                  fontsize={"xticks": "9pt", "yticks": "9pt"})
    gauges = hv.Overlay([
        hv.Curve((x + width_s, buckets[g] if len(buckets) else []), "seconds", "count",
                 label=GAUGE_LABELS[g]).opts(interpolation="steps-pre", color=GAUGE_COLORS[g])
        for g in GAUGE_LABELS]).opts(height=170, legend_position="top_left", ylabel="now",
                                     **common)
    counts = hv.Overlay([
        hv.Curve((x + width_s / 2, buckets[c] if len(buckets) else []), "seconds", "count",
                 label=COUNT_LABELS[c]).opts(interpolation="steps-mid", color=COUNT_COLORS[c])
        for c in COUNT_LABELS]).opts(height=170, legend_position="top_left",
                                     ylabel=f"per {width_s:g} s", **common)
    return (gauges + counts).cols(1).opts(shared_axes=True)


__all__ = ["MAX_BUCKETS", "bucket_s", "figure", "read"]
