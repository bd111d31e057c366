"""A whole run by second, by time bucket and by train step, read from the sums the store keeps
as rows are derived (``derived.MEASURES``, table ``d_run_seconds``), not from the rows.

``seconds`` gives each measure's sum per second of a run: the stored sums plus those of the
rows not derived yet and of the open intervals (``rs_tail``), so it equals the measures computed
from the views at every moment (tests/store/test_summaries.py). A store that keeps no maintained
rows (a lake, a file written before) computes the same measures from the views.

``buckets`` re-buckets them to a width and adds three gauges, each a running sum over the whole
run: tries in flight, rollouts parked and serving shards at each bucket's end.

``step_counts`` sums them per train step. Step ``k`` runs from the end of step ``k-1``'s
training (or the run's start) to the end of its own (``train_step_spans``), as in
``steps.step_table``; a second is counted in the step its last instant falls in, so what
happens in the second a step ends may be counted in the next step. Reading one step's rows
exactly is a window read of the views.

The cost follows the run's length in seconds (a few rows per active second), not its spans: a
two-day run is at most ~170,000 seconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rolloutscope.store import derived
from rolloutscope.store.store import RunStore

MEASURE_NAMES = tuple(m[0] for m in derived.MEASURES)
GAUGES = {"in_flight": ("tries_started", "tries_ended"),
          "parked": ("parked_started", "parked_ended"),
          "serving_shards": ("serving_entered", "serving_left")}


def seconds_sql(maintained: bool) -> str:
    """(sec_ns, measure, value) of run ``$run`` from second ``$lo`` (inclusive) to ``$hi``
    (exclusive): the kept sums plus the rest, or (not ``maintained``) the views' measures."""
    where = "run_id = $run AND sec_ns >= $lo AND sec_ns < $hi"
    if not maintained:
        return (f"SELECT sec_ns, measure, value FROM ({derived.measures_sql(None, where)}) "
                "ORDER BY sec_ns, measure")
    return f"""SELECT sec_ns, measure, sum(value) AS value FROM (
        SELECT sec_ns, measure, value FROM main.d_run_seconds
        WHERE coalesce(nullif(run_id, ''), NULL) = $run AND sec_ns >= $lo AND sec_ns < $hi
        UNION ALL
        SELECT sec_ns, measure, value FROM ({derived.measures_sql("rs_tail", where)})
    ) GROUP BY ALL ORDER BY sec_ns, measure"""


def seconds(store: RunStore, run_id: str, lo_ns: int | None = None,
            hi_ns: int | None = None) -> pd.DataFrame:
    """One row per second of ``run_id`` with anything in it (``sec_ns``, then a column per
    measure), between ``lo_ns`` and ``hi_ns`` (None: the whole run)."""
    params = {"run": run_id, "lo": -(2**62) if lo_ns is None else int(lo_ns),
              "hi": 2**62 if hi_ns is None else int(hi_ns)}
    long = pd.DataFrame(store.query_records(seconds_sql(store.maintained), params),
                        columns=["sec_ns", "measure", "value"])
    wide = long.pivot_table(index="sec_ns", columns="measure", values="value",
                            aggfunc="sum", fill_value=0.0)
    wide = wide.reindex(columns=list(MEASURE_NAMES), fill_value=0.0)
    wide.columns.name = None
    return wide.reset_index()


def buckets(store: RunStore, run_id: str, width_s: float) -> pd.DataFrame:
    """The whole run in buckets of ``width_s`` seconds: each measure's sum (``bucket_ns`` is a
    bucket's start) and the gauges at its end."""
    width = max(int(width_s * 1e9) // derived.SECOND_NS, 1) * derived.SECOND_NS
    sec = seconds(store, run_id)
    if not len(sec):
        return pd.DataFrame(columns=["bucket_ns", *MEASURE_NAMES, *GAUGES])
    sec["bucket_ns"] = sec.sec_ns // width * width
    out = sec.drop(columns="sec_ns").groupby("bucket_ns", as_index=False).sum()
    for gauge, (up, down) in GAUGES.items():
        out[gauge] = (out[up] - out[down]).cumsum()
    return out


def step_counts(store: RunStore, run_id: str, ends_ns: np.ndarray) -> pd.DataFrame:
    """Each measure summed per step, given the steps' ends in order: row ``i`` holds the
    seconds up to ``ends_ns[i]``, the last row those after the last end."""
    sec = seconds(store, run_id)
    last_instant = sec.sec_ns.to_numpy(dtype="float64") + (derived.SECOND_NS - 1)
    row = np.searchsorted(np.asarray(ends_ns, dtype="float64"), last_instant, side="left")
    n = len(ends_ns) + 1
    return pd.DataFrame({m: np.bincount(row, weights=sec[m].to_numpy(dtype="float64"),
                                        minlength=n)[:n] for m in MEASURE_NAMES})
