"""A run per train step, and two runs side by side by step: what W&B shows only for scalars and
Perfetto not at all (google/perfetto#2780), from the same views every reader uses.

Step boundaries come from the run's train steps: the ``rl.train_step`` spans (step ``k`` runs
from the end of step ``k-1``'s training, or the run's start, to the end of its own), else the
``rollout/train_steps`` metric an imported logger recorded (step ``k`` ends where the count
reaches ``k``). Whatever happened after the last completed step is one more row, ``trained``
false. A run with neither (a released Gym deployment) is one row.

Each row counts, by the time it happened: prompt groups committed (a try's end; Gym: finished),
deadlines that fired, re-dispatches (RL tries after the first, by their start), failed tries,
snapshot windows (by their start) with their admission-closed seconds and failures, and
incidents (by their start), with seconds since each run's own origin.

Where the store keeps its rows as spans arrive, the RL tries' and deadlines' counts are read
from the per-second sums it keeps (``summaries.step_counts``): a second is counted in the step
its last instant falls in, so an event in the very second a step's training ends may be counted
in the next step. The step boundaries are read from the kept ``train_step_spans``. The Gym
rows (their ends and outcomes only), the snapshot windows and the incidents are read from their
maintained views.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rolloutscope.store import summaries
from rolloutscope.store.run_reads import origin_ns, require_run
from rolloutscope.store.store import RunStore

STEP_COLUMNS = ["step", "trained", "start_s", "end_s", "train_s", "committed", "timeouts",
                "redispatches", "failed_tries", "snapshots", "snapshot_s",
                "snapshots_failed", "incidents", "incident_kinds"]
COUNTS = ("committed", "timeouts", "redispatches", "failed_tries", "snapshots", "snapshot_s",
          "snapshots_failed", "incidents")


def _boundaries(store: RunStore, run_id: str) -> pd.DataFrame:
    """step, start_ns (training), end_ns (training) of each completed train step."""
    spans = store.query_df(
        f"SELECT step, start_ns, end_ns FROM {store.relation('train_step_spans')} "
        "WHERE run_id = ? AND end_ns IS NOT NULL ORDER BY end_ns", [run_id])
    if len(spans):
        steps = spans.step.where(spans.step.notna(), pd.Series(range(1, len(spans) + 1)))
        return pd.DataFrame({"step": steps.astype("int64"), "start_ns": spans.start_ns,
                             "end_ns": spans.end_ns})
    counts = store.query_df(
        "SELECT value, ts_ns FROM metrics WHERE run_id = ? AND name = 'rollout/train_steps' "
        "ORDER BY ts_ns", [run_id])
    if len(counts):
        counts = counts[counts.value.diff().fillna(counts.value) > 0]
        return pd.DataFrame({"step": counts.value.astype("int64"), "start_ns": counts.ts_ns,
                             "end_ns": counts.ts_ns})
    return pd.DataFrame({"step": pd.Series(dtype="int64"), "start_ns": [], "end_ns": []})


def step_table(store: RunStore, run_id: str) -> pd.DataFrame:
    """One row per train step of ``run_id`` (STEP_COLUMNS)."""
    require_run(store, run_id)
    origin = origin_ns(store, run_id)
    bounds = _boundaries(store, run_id)
    ends = bounds.end_ns.to_numpy(dtype="float64")

    def bucket(ns) -> np.ndarray:
        """The row each instant falls in: 0..len(bounds) (the last: after the last step)."""
        return np.searchsorted(ends, np.asarray(ns, dtype="float64"), side="left")

    n = len(bounds) + 1
    counts = {c: np.zeros(n) for c in COUNTS}
    kinds: list[list[str]] = [[] for _ in range(n)]

    def add(col: str, ns, weights=None) -> None:
        ns = pd.to_numeric(pd.Series(ns), errors="coerce")
        keep = ns.notna().to_numpy()
        w = None if weights is None else np.asarray(weights, dtype="float64")[keep]
        counts[col] += np.bincount(bucket(ns[keep]), weights=w, minlength=n)[:n]

    if store.maintained:
        sums = summaries.step_counts(store, run_id, ends)
        for col in ("committed", "failed_tries", "redispatches", "timeouts"):
            counts[col] += sums[col].to_numpy()
        # the Gym tries' ends and outcomes only (the whole rows of a large run's Gym
        # rollouts, 900k at 10^8 spans, took 3.9 s of a 7.9 s step table)
        att = store.query_df(
            f"SELECT end_ns, outcome FROM {store.relation('gym_attempts')} "
            "WHERE run_id = ? AND outcome IN ('committed', 'finished', 'failed', 'cancelled')",
            [run_id])
    else:
        att = store.view("rollout_attempts", run_id=run_id)
        add("redispatches", att.start_ns[(att.attempt.fillna(0) > 0) & (att.dialect == "rl")])
        dl = store.view("deadlines", run_id=run_id)
        add("timeouts", dl.fired_ns[dl.outcome == "fired"])
    done = att[att.outcome.isin(["committed", "finished"])]
    add("committed", done.end_ns)
    add("failed_tries", att.end_ns[att.outcome.isin(["failed", "cancelled"])])
    win = store.view("checkpoint_windows", run_id=run_id)
    add("snapshots", win.start_ns)
    add("snapshot_s", win.start_ns, win.duration_s.fillna(0.0))
    add("snapshots_failed", win.start_ns[win.outcome.isin(["failed", "aborted"])])
    inc = store.view("incidents", run_id=run_id)
    add("incidents", inc.start_ns)
    for b, kind in zip(bucket(inc.start_ns), inc.kind.astype(str)):
        kinds[int(b)].append(kind)
    last = store.query(f"SELECT max(last_ns) FROM {store.relation('services')} "
                       "WHERE run_id = ?", [run_id])[0][0] or origin
    starts = np.concatenate([[origin], ends]) if len(ends) else np.array([origin])
    stops = np.concatenate([ends, [max(last, ends[-1] if len(ends) else origin)]])
    steps = list(bounds.step) + [int(bounds.step.iloc[-1]) + 1 if len(bounds) else 1]
    train_s = list((bounds.end_ns - bounds.start_ns) / 1e9) + [None]
    out = pd.DataFrame({
        "step": steps, "trained": [True] * len(bounds) + [False],
        "start_s": np.round((starts - origin) / 1e9, 3),
        "end_s": np.round((stops - origin) / 1e9, 3), "train_s": train_s,
        **{c: counts[c] for c in COUNTS},
        "incident_kinds": [", ".join(sorted(set(k))) for k in kinds]}, columns=STEP_COLUMNS)
    for c in COUNTS:
        out[c] = out[c].round(3) if c == "snapshot_s" else out[c].astype("int64")
    # nothing after the last step: no row for it
    if len(bounds) and not out.iloc[-1][list(COUNTS)].any():
        out = out.iloc[:-1]
    return out.reset_index(drop=True)


def step_diff(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two step tables aligned by step: each count on side a, side b, and b - a (``d_`` ...);
    a step one run never reached has its side empty."""
    keep = ["step", "trained", "end_s", *COUNTS, "incident_kinds"]
    m = a[keep].merge(b[keep], on="step", how="outer", suffixes=("_a", "_b")).sort_values(
        "step", ignore_index=True)
    for c in COUNTS:
        m[f"d_{c}"] = m[f"{c}_b"] - m[f"{c}_a"]
    return m


def diff_totals(diff: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """Each count summed over the steps: (a, b, b - a)."""
    return {c: (float(diff[f"{c}_a"].sum()), float(diff[f"{c}_b"].sum()),
                float(diff[f"{c}_b"].sum() - diff[f"{c}_a"].sum())) for c in COUNTS}
