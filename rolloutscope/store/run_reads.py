"""Reading one run: the run reads every reader shares (dashboard, notebooks, replay reports).

Rule: everything here reads the views (``incidents``, ``rollout_attempts``,
``checkpoint_windows``, ``deadlines``, ...) and returns data, frozen records and DataFrames.
Times are seconds from the run's one time zero, ``origin_ns``. Incidents are matched across
runs by kind and subject, with checkpoint ids in subjects replaced by ``snapshot@<start>s``: a
windowed replay numbers its snapshots from one again, and the train step in a checkpoint id is
not the rollout's business.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import pandas as pd

from rolloutscope.store.errors import UnknownRunError
from rolloutscope.store.store import RunStore
from rolloutscope.vocabulary import EventName

__all__ = ["IncidentKey", "OutcomeCounts", "TIMELINE_COLUMNS", "UnknownRunError",
           "incident_frame", "incident_keys", "incident_verdicts", "match_incidents",
           "origin_ns", "outcome_counts", "require_run", "rollout_outcomes", "seconds",
           "snapshot_outcomes", "timeline", "timeline_frames", "timing_summary"]


# -- outcome counts -----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class OutcomeCounts:
    """What a run achieved and lost, counted from its views.

    committed: prompt groups committed; timed_out: rollout deadlines that fired; stranded:
    completions never acknowledged (the ``stranded_completion`` incidents); redispatched: RL tries
    after the first plus row re-dispatches within a try; quarantined: shard entries into
    ``dead``; snapshots_ok / snapshots_failed: checkpoint windows that committed / did not.
    """

    committed: int = 0
    timed_out: int = 0
    stranded: int = 0
    redispatched: int = 0
    quarantined: int = 0
    snapshots_ok: int = 0
    snapshots_failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutcomeCounts:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown outcome count(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        return cls(**{k: int(v) for k, v in data.items()})

    def differences(self, other: OutcomeCounts) -> dict[str, tuple[int, int]]:
        return {name: (a, b) for name, a in self.as_dict().items()
                if (b := getattr(other, name)) != a}


IncidentKey = tuple[str, str]  # (kind, normalised subject)


# -- reading one run ----------------------------------------------------------------------------
def require_run(store: RunStore, run_id: str) -> None:
    known = store.run_ids()
    if run_id not in known:
        raise UnknownRunError(str(store.path), run_id, known)


def origin_ns(store: RunStore, run_id: str) -> int:
    """Time zero of a run, which every reader counts seconds from (``run_thresholds.origin_ns``):
    the clock origin the run recorded (a replay's epoch, so a replayed window keeps the
    capture's clock), else the first time it was seen."""
    rows = store.query("SELECT origin_ns FROM run_thresholds WHERE run_id = ?", [run_id])
    if rows and rows[0][0] is not None:
        return int(rows[0][0])
    first = store.query("SELECT min(start_ns) FROM all_spans WHERE run_id = ?", [run_id])[0][0]
    return 0 if first is None else int(first)


def seconds(ns: Any, origin: int) -> float | None:
    """``ns`` as seconds after ``origin`` (to the microsecond), None for a missing time."""
    if ns is None or pd.isna(ns):
        return None
    return round((int(ns) - origin) / 1e9, 6)


def _checkpoint_labels(store: RunStore, run_id: str, origin: int) -> dict[str, str]:
    df = store.view("checkpoint_windows", run_id=run_id)
    return {row.checkpoint_id: f"snapshot@{seconds(row.start_ns, origin):g}s"
            for row in df.itertuples() if row.checkpoint_id is not None}


def _normalise(subject: str, labels: Mapping[str, str]) -> str:
    if not labels or not subject:
        return subject or ""
    pattern = "|".join(re.escape(ck) for ck in sorted(labels, key=len, reverse=True))
    return re.sub(pattern, lambda m: labels[m.group(0)], subject)


def _origin(store: RunStore, run_id: str, origin: int | None) -> int:
    """``origin`` when the caller read it already (a report reads each run's once), else the
    run's own."""
    return origin_ns(store, run_id) if origin is None else origin


def incident_frame(store: RunStore, run_id: str, *, origin: int | None = None) -> pd.DataFrame:
    """The run's incidents with ``start_s`` and the matching ``key`` column. ``origin``: the
    run's time zero, where the caller has it (``origin_ns``), as for every reader below."""
    origin = _origin(store, run_id, origin)
    labels = _checkpoint_labels(store, run_id, origin)
    df = store.view("incidents", run_id=run_id)
    out = pd.DataFrame({
        "incident_id": df.incident_id, "kind": df.kind, "severity": df.severity,
        "subject": df.subject, "start_s": [seconds(v, origin) for v in df.start_ns],
        "summary": df.summary})
    out["key"] = [(k, _normalise(s, labels)) for k, s in zip(out.kind, out.subject, strict=True)]
    return out.sort_values(["start_s", "kind", "subject"], na_position="last",
                           ignore_index=True)


def incident_keys(store: RunStore, run_id: str) -> Counter[IncidentKey]:
    return Counter(incident_frame(store, run_id).key)


def outcome_counts(store: RunStore, run_id: str) -> OutcomeCounts:
    attempts = store.view("rollout_attempts", run_id=run_id)
    deadlines = store.view("deadlines", run_id=run_id)
    windows = store.view("checkpoint_windows", run_id=run_id)
    shards = store.view("shard_states", run_id=run_id)
    stranded = store.query("SELECT count(*) FROM stranded_completion WHERE run_id = ?",
                           [run_id])[0][0]
    row_redispatches = store.query(
        "SELECT count(*) FROM all_events WHERE run_id = ? AND name = ?",
        [run_id, EventName.ROW_REDISPATCH])[0][0]
    return OutcomeCounts(
        committed=int((attempts.outcome == "committed").sum()),
        timed_out=int((deadlines.outcome == "fired").sum()),
        stranded=int(stranded),
        # RL tries after the first: a Gym rollout's later attempt (rid-aN) is no re-dispatch
        redispatched=int(((attempts.attempt.fillna(0) > 0)
                          & (attempts.dialect == "rl")).sum()) + int(row_redispatches),
        quarantined=int((shards.state == "dead").sum()),
        snapshots_ok=int((windows.outcome == "committed").sum()),
        snapshots_failed=int(windows.outcome.isin(["failed", "aborted"]).sum()))


def timing_summary(store: RunStore, run_id: str, *, origin: int | None = None
                   ) -> dict[str, float | None]:
    """A handful of times that say how a run went, in seconds from its origin."""
    origin = _origin(store, run_id, origin)
    attempts = store.view("rollout_attempts", run_id=run_id)
    windows = store.view("checkpoint_windows", run_id=run_id)
    committed = attempts[attempts.outcome == "committed"]
    last = store.query("SELECT max(coalesce(end_ns, start_ns)) FROM all_spans WHERE run_id = ?",
                       [run_id])[0][0]
    return {
        "first_commit_s": seconds(committed.end_ns.min(), origin) if len(committed) else None,
        "last_commit_s": seconds(committed.end_ns.max(), origin) if len(committed) else None,
        "mean_committed_try_s": (round(float(committed.duration_s.mean()), 6)
                                 if len(committed) else None),
        "snapshot_admission_closed_s": (round(float(windows.duration_s.fillna(0).sum()), 6)
                                        if len(windows) else 0.0),
        "last_span_end_s": seconds(last, origin),
    }



def match_incidents(a: Counter[IncidentKey], b: Counter[IncidentKey]
                    ) -> tuple[list[IncidentKey], list[IncidentKey], list[IncidentKey]]:
    """(reproduced, vanished, appeared), as multisets: two stalls before and one after is one
    reproduced and one vanished."""
    reproduced = sorted((a & b).elements())
    vanished = sorted((a - b).elements())
    appeared = sorted((b - a).elements())
    return reproduced, vanished, appeared


def _first_by_key(frame: pd.DataFrame) -> dict[IncidentKey, Any]:
    first: dict[IncidentKey, Any] = {}
    for row in frame.itertuples():
        first.setdefault(row.key, row)
    return first



def incident_verdicts(fa: pd.DataFrame, fb: pd.DataFrame) -> pd.DataFrame:
    """What run B did to each incident of run A: reproduced, vanished or appeared, matched by
    key (``incident_frame`` rows of each side), with the first start and summary on each side."""
    rows: list[dict[str, Any]] = []
    ka, kb = Counter(fa.key), Counter(fb.key)
    reproduced, vanished, appeared = match_incidents(ka, kb)
    first_a = _first_by_key(fa)
    first_b = _first_by_key(fb)
    for status, keys in (("reproduced", reproduced), ("vanished", vanished),
                         ("appeared", appeared)):
        for key in keys:
            ra, rb = first_a.get(key), first_b.get(key)
            rows.append({
                "status": status, "kind": key[0], "key_subject": key[1],
                "start_s_a": ra.start_s if ra is not None and status != "appeared" else None,
                "start_s_b": rb.start_s if rb is not None and status != "vanished" else None,
                "summary_a": ra.summary if ra is not None and status != "appeared" else "",
                "summary_b": rb.summary if rb is not None and status != "vanished" else ""})
    return pd.DataFrame(rows, columns=["status", "kind", "key_subject", "start_s_a",
                                       "start_s_b", "summary_a", "summary_b"])



def rollout_outcomes(store: RunStore, run_id: str, *, origin: int | None = None
                     ) -> pd.DataFrame:
    """One row per prompt: how it ended (committed | failed | open), tries, end time."""
    origin = _origin(store, run_id, origin)
    df = store.view("rollout_attempts", run_id=run_id)
    if df.empty:
        return pd.DataFrame(columns=["prompt_idx", "rollout_id", "outcome", "tries", "end_s"])
    rows = []
    for (prompt_idx, rollout_id), g in df.groupby(["prompt_idx", "rollout_id"], dropna=False):
        g = g.sort_values("attempt")
        if (g.outcome == "committed").any():
            outcome = "committed"
            end = g[g.outcome == "committed"].end_ns.min()
        elif (g.outcome == "open").any():
            outcome, end = "open", None
        else:
            outcome, end = str(g.outcome.iloc[-1]), g.end_ns.max()
        rows.append({"prompt_idx": None if pd.isna(prompt_idx) else int(prompt_idx),
                     "rollout_id": rollout_id,
                     "outcome": outcome, "tries": len(g), "end_s": seconds(end, origin)})
    out = pd.DataFrame(rows).astype({"prompt_idx": "Int64"})
    return out.sort_values(["prompt_idx", "rollout_id"], ignore_index=True, na_position="last")



def snapshot_outcomes(store: RunStore, run_id: str, *, origin: int | None = None
                      ) -> pd.DataFrame:
    origin = _origin(store, run_id, origin)
    df = store.view("checkpoint_windows", run_id=run_id).sort_values("start_ns")
    return pd.DataFrame({
        "snapshot": range(1, len(df) + 1),
        "start_s": [seconds(v, origin) for v in df.start_ns],
        "duration_s": [None if pd.isna(v) else round(float(v), 6) for v in df.duration_s],
        "outcome": list(df.outcome)})



TIMELINE_COLUMNS = ["run", "lane", "kind", "label", "start_s", "end_s", "outcome"]


def _rows_of(store: RunStore, name: str, run_id: str, window: tuple[int, int] | None,
             start: str = "start_ns", end: str = "end_ns") -> pd.DataFrame:
    """View ``name``'s rows of the run (read from its maintained rows where the store keeps
    them: ``RunStore.relation``); with ``window`` (epoch ns), only those overlapping it."""
    if window is None:
        return store.view(name, run_id=run_id)
    return store.query_df(
        f"SELECT * FROM {store.relation(name)} WHERE run_id = ? AND {start} <= ? "
        f"AND ({end} IS NULL OR {end} >= ?)", [run_id, window[1], window[0]])


def timeline(store: RunStore, run_id: str, *, side: str,
             window: tuple[int, int] | None = None, origin: int | None = None) -> pd.DataFrame:
    """One run's story as rows on a simulated-time axis: RL tries per rollout, parked stays,
    snapshot windows, fired deadlines, shard states and incidents (instants have end_s = start_s).
    ``window`` (epoch ns, start and end): only what overlaps it, read as such (a few minutes of a
    long run cost their rows, not the run's).
    """
    origin = _origin(store, run_id, origin)
    rows: list[dict[str, Any]] = []

    def add(lane: str, kind: str, label: str, start: Any, end: Any, outcome: Any) -> None:
        s = seconds(start, origin)
        e = seconds(end, origin)
        rows.append({"run": side, "lane": lane, "kind": kind, "label": label, "start_s": s,
                     "end_s": e, "outcome": None if outcome is None or pd.isna(outcome)
                     else str(outcome)})

    for r in _rows_of(store, "rollout_attempts", run_id, window).itertuples():
        label = (f"Gym attempt {r.capture_key}" if r.dialect == "gym" else f"try {r.attempt}")
        add(str(r.rollout_id), "try", label, r.start_ns, r.end_ns, r.outcome)
    for r in _rows_of(store, "parked_intervals", run_id, window).itertuples():
        add(str(r.rollout_id).split("-", 1)[0] if r.rollout_id else "?", "parked",
            f"{r.rollout_id} parked", r.start_ns, r.end_ns, r.boundary_state)
    for r in _rows_of(store, "deadlines", run_id, window, "fired_ns", "fired_ns").itertuples():
        if r.outcome == "fired":
            add(str(r.rollout_id), "deadline_fired", f"try {r.attempt} deadline fired",
                r.fired_ns, r.fired_ns, r.state_when_fired)
    for r in _rows_of(store, "completions", run_id, window, "completed_ns",
                      "completed_ns").itertuples():
        add(str(r.rollout_id).split("-", 1)[0], "completion", f"{r.rollout_id} completed",
            r.completed_ns, r.completed_ns, "acknowledged" if pd.notna(r.ack_ns)
            else "unacknowledged")
    windows = _rows_of(store, "checkpoint_windows", run_id, window).sort_values("start_ns")
    first = 1
    if window is not None and len(windows):
        # numbered as in the whole run: the snapshots that started before the first read
        first += store.query(
            f"SELECT count(*) FROM {store.relation('checkpoint_windows')} "
            "WHERE run_id = ? AND start_ns < ?", [run_id, int(windows.start_ns.iloc[0])])[0][0]
    for i, r in enumerate(windows.itertuples(), first):
        add("snapshots", "snapshot", f"snapshot {i}", r.start_ns, r.end_ns, r.outcome)
    for r in _rows_of(store, "shard_states", run_id, window).itertuples():
        add(f"shard {r.shard_idx}", "shard_state", str(r.state), r.start_ns, r.end_ns,
            r.trigger)
    inc = _rows_of(store, "incidents", run_id, window, "start_ns", "start_ns")
    for r in inc.itertuples():
        add("incidents", "incident", str(r.kind), r.start_ns, r.start_ns, r.subject)
    df = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    return df.sort_values(["start_s", "lane", "kind"], na_position="last", ignore_index=True)


def timeline_frames(store_a: RunStore, run_a: str, store_b: RunStore, run_b: str, *,
                    origins: tuple[int, int] | None = None
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The before (A) and after (B) timelines a dashboard "Replay" view draws, on one axis.
    ``origins``: the two runs' time zeros, where the caller has them."""
    require_run(store_a, run_a)
    require_run(store_b, run_b)
    origin_a, origin_b = origins or (None, None)
    return (timeline(store_a, run_a, side="before", origin=origin_a),
            timeline(store_b, run_b, side="after", origin=origin_b))
