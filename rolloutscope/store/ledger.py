"""The step ledger of a run: for every train step, when it started waiting for rollouts and when it
had enough, where its wall time went, RL's own goodput buckets, the policy-version lag of what it
trained on, and the groups it waited for last, with why.

The rows are the ``step_ledger`` and ``step_stragglers`` views (``sql/98_step_ledger.sql``,
``sql/99_step_stragglers.sql``): every number is aggregated per step in SQL, so a reader holds
one row per step and a few per straggler, never the run's tries or spans (a run can be 10^8
spans). A store that keeps them reads the steps that settled from their kept rows and computes
only the latest (``derived.STEP_VIEWS``). This module only reads them for one run and counts their times in seconds from the
run's origin (``run_reads.origin_ns``), as every other reader does.
"""

from __future__ import annotations

import re

import pandas as pd

from rolloutscope.store.run_reads import origin_ns, require_run
from rolloutscope.store.store import RunStore

# the wall-time split of a step, in order; they add up to duration_s (docs/train-steps.md)
SPLIT = ("generating_s", "straggler_s", "parked_s", "refit_s", "train_s", "checkpoint_s",
         "other_s")
BUCKETS = ("productive_s", "overhead_s", "idle_s", "wasted_s")
LEDGER_COLUMNS = ["step", "dialect", "algorithm", "start_s", "end_s", "duration_s",
                  "wait_start_s", "ready_s", "wait_s", "groups", "stragglers", *SPLIT,
                  "generation_bubble_s", *BUCKETS, "buffer_starvation_s", "refit_bubble_s",
                  "starvation_waits", "weight_version", "batch_weight_version", "policy_lag",
                  "prompt_groups"]
STRAGGLER_COLUMNS = ["step", "rank", "rollout_id", "prompt_idx", "attempt", "committed_s",
                     "duration_s", "step_median_s", "tries", "failed_tries", "failure_reasons",
                     "timeouts", "parked_s", "snapshots", "completed_unacked", "model_calls",
                     "model_errors", "retries", "retry_statuses", "failed_shards", "incidents",
                     "why"]
_TIMES = {"start_ns": "start_s", "end_ns": "end_s", "wait_start_ns": "wait_start_s",
          "ready_ns": "ready_s", "committed_ns": "committed_s"}


def _seconds(df: pd.DataFrame, origin: int) -> pd.DataFrame:
    for ns, s in _TIMES.items():
        if ns in df:
            df[s] = ((pd.to_numeric(df[ns], errors="coerce") - origin) / 1e9).round(3)
    return df


def ledger_table(store: RunStore, run_id: str) -> pd.DataFrame:
    """One row per train step of ``run_id`` (LEDGER_COLUMNS), in step order."""
    require_run(store, run_id)
    rows = store.query_df(f"SELECT * FROM {store.relation('step_ledger')} WHERE run_id = ? "
                          "ORDER BY start_ns, step", [run_id])
    return _seconds(rows, origin_ns(store, run_id))[LEDGER_COLUMNS].reset_index(drop=True)


def straggler_table(store: RunStore, run_id: str, *, step: int | None = None,
                    from_step: int | None = None,
                    incidents: pd.DataFrame | None = None) -> pd.DataFrame:
    """The groups each step of ``run_id`` waited for last (STRAGGLER_COLUMNS), latest first
    within a step; ``step``: only that step's; ``from_step``: those of that step and later.
    ``incidents``: the run's incidents where the caller holds them (their subject and kind),
    else they are read."""
    require_run(store, run_id)
    relation = store.relation("step_stragglers")
    if step is not None and relation == "rs_read.step_stragglers" and _kept(store, run_id, step):
        relation = "main.d_step_stragglers"  # not the latest steps computed beside them
    sql = f"SELECT * FROM {relation} WHERE run_id = ?"
    params: list = [run_id]
    if step is not None:
        sql += " AND step = ?"
        params.append(step)
    if from_step is not None:
        sql += " AND step >= ?"
        params.append(from_step)
    rows = store.query_df(sql + " ORDER BY step, rank", params)
    rows["incidents"] = _incidents_naming(store, run_id, rows.rollout_id, incidents)
    named = rows.incidents.notna()
    rows.loc[named, "why"] = [
        ("" if why.startswith("no hold-up") else why + "; ") + f"incidents: {kinds}"
        for why, kinds in zip(rows.why[named], rows.incidents[named])]
    return _seconds(rows, origin_ns(store, run_id))[STRAGGLER_COLUMNS].reset_index(drop=True)


def _kept(store: RunStore, run_id: str, step: int) -> bool:
    """Whether every step of ``run_id`` numbered ``step`` is kept (a restarted run can number
    two steps alike): none among the steps computed from the floor is still to be kept."""
    kept, unkept = store.query(
        "SELECT (SELECT count(*) FROM main.d_step_ledger WHERE run_id = ? AND step = ?), "
        "(SELECT count(*) FROM rs_steps.train_steps WHERE run_id = ? AND step = ? "
        " AND (end_ns IS NULL OR end_ns >= (SELECT kept_until_ns FROM main.d_steps_state)))",
        [run_id, step, run_id, step])[0]
    return kept > 0 and unkept == 0


_ROW = re.compile(r"^(.+)-[0-9]+$")


def _incidents_naming(store: RunStore, run_id: str, groups: pd.Series,
                      incidents: pd.DataFrame | None) -> list[str | None]:
    """For each group, the kinds of the run's incidents whose subject names it or one of its
    rows (``p00002-0 try 0`` names p00002-0 and p00002), read from the incidents as the store
    keeps them (``RunStore.view``: the maintained rows where it has them)."""
    if not len(groups):
        return []
    if incidents is None:
        incidents = store.view("incidents", run_id=run_id)
    if not len(incidents):
        return [None] * len(groups)
    first = incidents.subject.astype(str).str.split(" ", n=1).str[0]
    row = first.str.extract(_ROW.pattern, expand=False)
    keyed = pd.DataFrame({"key": pd.concat([first, row.fillna(first)], ignore_index=True),
                          "kind": pd.concat([incidents.kind, incidents.kind],
                                            ignore_index=True).astype(str)})
    kinds = keyed.drop_duplicates().groupby("key").kind.agg(lambda k: ", ".join(sorted(k)))
    return [kinds.get(g) for g in groups.astype(str)]


def ledger_report(store: RunStore, run_id: str) -> dict:
    """The ledger as one JSON-able document: the steps, each with its stragglers."""
    steps = ledger_table(store, run_id)
    stragglers = straggler_table(store, run_id)
    by_step: dict[int, list[dict]] = {}
    for row in _records(stragglers):
        by_step.setdefault(int(row["step"]), []).append(row)
    out = []
    for row in _records(steps):
        row["straggler_groups"] = by_step.pop(int(row["step"]), [])
        out.append(row)
    # groups still running after the last step: what the next step would wait for
    pending = [{"step": step, "straggler_groups": rows} for step, rows in sorted(by_step.items())]
    return {"run_id": run_id, "steps": out, "pending": pending}


def _records(df: pd.DataFrame) -> list[dict]:
    return [{k: (None if _missing(v) else (v.item() if hasattr(v, "item") else v))
             for k, v in row.items()} for row in df.to_dict(orient="records")]


def _missing(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False
