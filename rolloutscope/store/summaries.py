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
    """(bucket_ns, measure, value) of run ``$run`` from second ``$lo`` (inclusive) to ``$hi``
    (exclusive), summed in buckets of ``$w`` ns (a whole number of seconds): the kept sums plus
    the rest, or (not ``maintained``) the views' measures."""
    where = "run_id = $run AND sec_ns >= $lo AND sec_ns < $hi"
    if maintained:
        source = f"""SELECT sec_ns, measure, value FROM main.d_run_seconds
            WHERE {where}
            UNION ALL
            SELECT sec_ns, measure, value FROM ({derived.measures_sql("rs_tail", where)})"""
    else:
        source = f"SELECT sec_ns, measure, value FROM ({derived.measures_sql(None, where)})"
    return (f"SELECT sec_ns // $w * $w AS bucket_ns, measure, sum(value) AS value "
            f"FROM ({source}) GROUP BY ALL ORDER BY bucket_ns, measure")


def _read(store: RunStore, run_id: str, width_ns: int, lo_ns: int | None,
          hi_ns: int | None) -> pd.DataFrame:
    """One row per bucket with anything in it (``bucket_ns``, then a column per measure)."""
    params = {"run": run_id, "lo": -(2**62) if lo_ns is None else int(lo_ns),
              "hi": 2**62 if hi_ns is None else int(hi_ns), "w": int(width_ns)}
    long = store.query_df(seconds_sql(store.maintained), params)
    if not len(long):
        return pd.DataFrame(columns=["bucket_ns", *MEASURE_NAMES])
    wide = long.pivot(index="bucket_ns", columns="measure", values="value")
    wide = wide.reindex(columns=list(MEASURE_NAMES)).fillna(0.0)
    wide.columns.name = None
    return wide.reset_index()


def seconds(store: RunStore, run_id: str, lo_ns: int | None = None,
            hi_ns: int | None = None) -> pd.DataFrame:
    """One row per second of ``run_id`` with anything in it (``sec_ns``, then a column per
    measure), between ``lo_ns`` and ``hi_ns`` (None: the whole run)."""
    return _read(store, run_id, derived.SECOND_NS, lo_ns, hi_ns).rename(
        columns={"bucket_ns": "sec_ns"})


def buckets(store: RunStore, run_id: str, width_s: float) -> pd.DataFrame:
    """The whole run in buckets of ``width_s`` seconds (summed in the store: a few hundred rows
    cross to Python): each measure's sum (``bucket_ns`` is a bucket's start) and the gauges at
    its end."""
    width = max(int(width_s * 1e9) // derived.SECOND_NS, 1) * derived.SECOND_NS
    out = _read(store, run_id, width, None, None)
    for gauge, (up, down) in GAUGES.items():
        out[gauge] = (out[up] - out[down]).cumsum() if len(out) else []
    return out


def step_counts(store: RunStore, run_id: str, ends_ns: np.ndarray) -> pd.DataFrame:
    """Each measure summed per step, given the steps' ends in order: row ``i`` holds the
    seconds whose last instant is at or before ``ends_ns[i]`` (and after the end before), the
    last row those after the last end. Attributed in the store: one row per step crosses to
    Python. Each step's (previous end, end] is listed under the hours it touches, and a second
    joins the steps of its hour by equality, then by range (an ASOF join of 2.7M seconds to
    440 step ends took 31 s, DuckDB 1.5; this takes 0.5 s besides reading the seconds)."""
    n = len(ends_ns) + 1
    out = pd.DataFrame({m: np.zeros(n) for m in MEASURE_NAMES})
    source = seconds_sql(store.maintained)  # per second: $w is one second
    sec, cell = derived.SECOND_NS, 3600 * derived.SECOND_NS
    sql = f"""WITH s AS (SELECT *, bucket_ns + {sec - 1} AS last_ns FROM ({source})),
        e AS (SELECT i, end_ns, greatest(lag(end_ns) OVER (ORDER BY end_ns, i),
                                         (SELECT min(last_ns) - 1 FROM s)) AS after_ns
              FROM (SELECT unnest($ends) AS end_ns, generate_subscripts($ends, 1) - 1 AS i)),
        cells AS (SELECT *, unnest(range(after_ns // {cell}, end_ns // {cell} + 1)) AS cell
                  FROM e WHERE end_ns > after_ns)
        SELECT coalesce(c.i, {n - 1}) AS i, s.measure, sum(s.value) AS value
        FROM s LEFT JOIN cells c ON c.cell = s.last_ns // {cell}
                                 AND s.last_ns > c.after_ns AND s.last_ns <= c.end_ns
        GROUP BY ALL"""
    params = {"run": run_id, "lo": -(2**62), "hi": 2**62, "w": derived.SECOND_NS,
              "ends": [int(x) for x in ends_ns]}
    got = store.query_df(sql, params)
    if len(got):
        wide = got.pivot_table(index="i", columns="measure", values="value", aggfunc="sum")
        rows = wide.index.to_numpy(dtype="int64")
        for measure in wide.columns:
            out.loc[rows, measure] += wide[measure].fillna(0.0).to_numpy(dtype="float64")
    return out
