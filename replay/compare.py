"""Two runs side by side: incidents, outcome counts, per-rollout changes, aligned timelines.

Rule: everything here reads the model views (``incidents``, ``rollout_attempts``,
``checkpoint_windows``, ``deadlines``, ...) and returns data: frozen records and DataFrames. The
renderers turn a ``RunComparison`` into Markdown or HTML text and touch no file; ``write_report``
is the one function that writes. Every data string in the HTML report is escaped, because
incident summaries and subjects carry ids that came from the observed system.

Times are seconds from the run's origin: for a replay, the replay's fixed virtual epoch (so a
replay of a window of a run keeps the capture's clock); for a live or imported run, its first
span. Incidents are matched by kind and subject, with checkpoint ids in subjects replaced by
``snapshot@<start>s``: a windowed replay numbers its snapshots from one again, and the train
step in a checkpoint id is not the rollout's business.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from rolloutscope.collectors.store import RunStore
from rolloutscope.collectors.vocabulary import EventName, RunSource
from rolloutscope.replay.errors import ReplayError
from rolloutscope.replay.telemetry import VIRTUAL_EPOCH_NS


class UnknownRunError(ReplayError):
    """A run id that the store does not hold."""

    def __init__(self, path: str, run_id: str, known: list[str]) -> None:
        self.path = path
        self.run_id = run_id
        super().__init__(f"{path} holds no run {run_id!r}; runs: {', '.join(known) or 'none'}")


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
            raise ReplayError(f"unknown outcome count(s) {', '.join(unknown)}; "
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
    """Time zero of a run: a replay's virtual epoch, else the run's first span."""
    rows = store.query("SELECT source, first_seen_ns FROM runs WHERE run_id = ?", [run_id])
    if rows and rows[0][0] == RunSource.REPLAY.value:
        return VIRTUAL_EPOCH_NS
    first = store.query("SELECT min(start_ns) FROM all_spans WHERE run_id = ?", [run_id])[0][0]
    if first is not None:
        return int(first)
    return int(rows[0][1]) if rows and rows[0][1] is not None else 0


def _seconds(ns: Any, origin: int) -> float | None:
    if ns is None or pd.isna(ns):
        return None
    return round((int(ns) - origin) / 1e9, 6)


def _checkpoint_labels(store: RunStore, run_id: str, origin: int) -> dict[str, str]:
    df = store.view("checkpoint_windows", run_id=run_id)
    return {row.checkpoint_id: f"snapshot@{_seconds(row.start_ns, origin):g}s"
            for row in df.itertuples() if row.checkpoint_id is not None}


def _normalise(subject: str, labels: Mapping[str, str]) -> str:
    if not labels or not subject:
        return subject or ""
    pattern = "|".join(re.escape(ck) for ck in sorted(labels, key=len, reverse=True))
    return re.sub(pattern, lambda m: labels[m.group(0)], subject)


def incident_frame(store: RunStore, run_id: str) -> pd.DataFrame:
    """The run's incidents with ``start_s`` and the matching ``key`` column."""
    origin = origin_ns(store, run_id)
    labels = _checkpoint_labels(store, run_id, origin)
    df = store.view("incidents", run_id=run_id)
    out = pd.DataFrame({
        "incident_id": df.incident_id, "kind": df.kind, "severity": df.severity,
        "subject": df.subject, "start_s": [_seconds(v, origin) for v in df.start_ns],
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
        "SELECT count(*) FROM span_events WHERE run_id = ? AND name = ?",
        [run_id, EventName.ROW_REDISPATCH])[0][0]
    return OutcomeCounts(
        committed=int((attempts.outcome == "committed").sum()),
        timed_out=int((deadlines.outcome == "fired").sum()),
        stranded=int(stranded),
        redispatched=int((attempts.attempt.fillna(0) > 0).sum()) + int(row_redispatches),
        quarantined=int((shards.state == "dead").sum()),
        snapshots_ok=int((windows.outcome == "committed").sum()),
        snapshots_failed=int(windows.outcome.isin(["failed", "aborted"]).sum()))


def timing_summary(store: RunStore, run_id: str) -> dict[str, float | None]:
    """A handful of times that say how a run went, in seconds from its origin."""
    origin = origin_ns(store, run_id)
    attempts = store.view("rollout_attempts", run_id=run_id)
    windows = store.view("checkpoint_windows", run_id=run_id)
    committed = attempts[attempts.outcome == "committed"]
    last = store.query("SELECT max(coalesce(end_ns, start_ns)) FROM all_spans WHERE run_id = ?",
                       [run_id])[0][0]
    return {
        "first_commit_s": _seconds(committed.end_ns.min(), origin) if len(committed) else None,
        "last_commit_s": _seconds(committed.end_ns.max(), origin) if len(committed) else None,
        "mean_committed_try_s": (round(float(committed.duration_s.mean()), 6)
                                 if len(committed) else None),
        "snapshot_admission_closed_s": (round(float(windows.duration_s.fillna(0).sum()), 6)
                                        if len(windows) else 0.0),
        "last_span_end_s": _seconds(last, origin),
    }


# -- two runs -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RunComparison:
    """Run A (before: the capture) against run B (after: the replay), as DataFrames."""

    run_a: str
    run_b: str
    incidents: pd.DataFrame  # key, kind, subject, status (reproduced|vanished|appeared), ...
    outcomes: pd.DataFrame  # metric, a, b, delta
    timings: pd.DataFrame  # metric, a, b, delta
    rollouts: pd.DataFrame  # per prompt: outcome and tries in each run, changed
    snapshots: pd.DataFrame  # per snapshot index: start, duration, outcome in each run
    timeline: pd.DataFrame  # both runs' intervals and instants on one simulated-time axis
    # run B's generation backend (``runs.metadata['generation']``) and, for a real engine, its
    # latencies against the captured ones per call kind
    backend: str = "recorded"
    latency: pd.DataFrame = field(default_factory=pd.DataFrame)

    def incident_status(self, status: str) -> list[IncidentKey]:
        rows = self.incidents[self.incidents.status == status]
        return [(k, s) for k, s in zip(rows.kind, rows.key_subject, strict=True)]


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


def _incident_table(fa: pd.DataFrame, fb: pd.DataFrame) -> pd.DataFrame:
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


def _delta_table(a: Mapping[str, Any], b: Mapping[str, Any]) -> pd.DataFrame:
    rows = []
    for name in a:
        va, vb = a[name], b.get(name)
        delta = (round(vb - va, 6) if isinstance(va, int | float) and isinstance(vb, int | float)
                 else None)
        rows.append({"metric": name, "a": va, "b": vb, "delta": delta})
    return pd.DataFrame(rows, columns=["metric", "a", "b", "delta"])


def rollout_outcomes(store: RunStore, run_id: str) -> pd.DataFrame:
    """One row per prompt: how it ended (committed | failed | open), tries, end time."""
    origin = origin_ns(store, run_id)
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
        rows.append({"prompt_idx": int(prompt_idx), "rollout_id": rollout_id,
                     "outcome": outcome, "tries": len(g), "end_s": _seconds(end, origin)})
    return pd.DataFrame(rows).sort_values("prompt_idx", ignore_index=True)


def _rollout_table(store_a: RunStore, run_a: str, store_b: RunStore, run_b: str
                   ) -> pd.DataFrame:
    a = rollout_outcomes(store_a, run_a)
    b = rollout_outcomes(store_b, run_b)
    merged = a.merge(b, on=["prompt_idx", "rollout_id"], how="outer", suffixes=("_a", "_b"))
    merged["changed"] = [
        oa != ob or ta != tb for oa, ob, ta, tb in zip(
            merged.outcome_a, merged.outcome_b, merged.tries_a, merged.tries_b, strict=True)]
    return merged.sort_values("prompt_idx", ignore_index=True)


def snapshot_outcomes(store: RunStore, run_id: str) -> pd.DataFrame:
    origin = origin_ns(store, run_id)
    df = store.view("checkpoint_windows", run_id=run_id).sort_values("start_ns")
    return pd.DataFrame({
        "snapshot": range(1, len(df) + 1),
        "start_s": [_seconds(v, origin) for v in df.start_ns],
        "duration_s": [None if pd.isna(v) else round(float(v), 6) for v in df.duration_s],
        "outcome": list(df.outcome)})


def _snapshot_table(store_a: RunStore, run_a: str, store_b: RunStore, run_b: str
                    ) -> pd.DataFrame:
    """Snapshots aligned by their index in each run (1 = the first attempt that ran)."""
    a = snapshot_outcomes(store_a, run_a)
    b = snapshot_outcomes(store_b, run_b)
    merged = a.merge(b, on="snapshot", how="outer", suffixes=("_a", "_b"))
    merged["changed"] = [oa != ob for oa, ob in zip(merged.outcome_a, merged.outcome_b,
                                                    strict=True)]
    return merged


TIMELINE_COLUMNS = ["run", "lane", "kind", "label", "start_s", "end_s", "outcome"]


def timeline(store: RunStore, run_id: str, *, side: str) -> pd.DataFrame:
    """One run's story as rows on a simulated-time axis: RL tries per rollout, parked stays,
    snapshot windows, fired deadlines, shard states and incidents (instants have end_s = start_s).
    """
    origin = origin_ns(store, run_id)
    rows: list[dict[str, Any]] = []

    def add(lane: str, kind: str, label: str, start: Any, end: Any, outcome: Any) -> None:
        s = _seconds(start, origin)
        e = _seconds(end, origin)
        rows.append({"run": side, "lane": lane, "kind": kind, "label": label, "start_s": s,
                     "end_s": e, "outcome": None if outcome is None or pd.isna(outcome)
                     else str(outcome)})

    for r in store.view("rollout_attempts", run_id=run_id).itertuples():
        add(str(r.rollout_id), "try", f"try {r.attempt}", r.start_ns, r.end_ns, r.outcome)
    for r in store.view("parked_intervals", run_id=run_id).itertuples():
        add(str(r.rollout_id).split("-", 1)[0] if r.rollout_id else "?", "parked",
            f"{r.rollout_id} parked", r.start_ns, r.end_ns, r.boundary_state)
    for r in store.view("deadlines", run_id=run_id).itertuples():
        if r.outcome == "fired":
            add(str(r.rollout_id), "deadline_fired", f"try {r.attempt} deadline fired",
                r.fired_ns, r.fired_ns, r.state_when_fired)
    for r in store.view("completions", run_id=run_id).itertuples():
        add(str(r.rollout_id).split("-", 1)[0], "completion", f"{r.rollout_id} completed",
            r.completed_ns, r.completed_ns, "acknowledged" if pd.notna(r.ack_ns)
            else "unacknowledged")
    windows = store.view("checkpoint_windows", run_id=run_id).sort_values("start_ns")
    for i, r in enumerate(windows.itertuples(), 1):
        add("snapshots", "snapshot", f"snapshot {i}", r.start_ns, r.end_ns, r.outcome)
    for r in store.view("shard_states", run_id=run_id).itertuples():
        add(f"shard {r.shard_idx}", "shard_state", str(r.state), r.start_ns, r.end_ns,
            r.trigger)
    inc = store.view("incidents", run_id=run_id)
    for r in inc.itertuples():
        add("incidents", "incident", str(r.kind), r.start_ns, r.start_ns, r.subject)
    df = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    return df.sort_values(["start_s", "lane", "kind"], na_position="last", ignore_index=True)


def timeline_frames(store_a: RunStore, run_a: str, store_b: RunStore, run_b: str
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The before (A) and after (B) timelines a dashboard "Replay" view draws, on one axis."""
    require_run(store_a, run_a)
    require_run(store_b, run_b)
    return timeline(store_a, run_a, side="before"), timeline(store_b, run_b, side="after")


# -- generation backends --------------------------------------------------------------------------
def generation_summary(store: RunStore, run_id: str) -> dict[str, Any] | None:
    """``runs.metadata['generation']`` of a run: which backend served its model calls."""
    rows = store.query("SELECT metadata FROM runs WHERE run_id = ?", [run_id])
    if not rows or not rows[0][0]:
        return None
    meta = json.loads(rows[0][0]) if isinstance(rows[0][0], str) else rows[0][0]
    gen = meta.get("generation") if isinstance(meta, dict) else None
    return gen if isinstance(gen, dict) else None


def latency_table(generation: Mapping[str, Any] | None) -> pd.DataFrame:
    """Per call kind: captured vs real (wall) vs replayed (virtual: real x speed) latency."""
    cols = ["call kind", "calls", "errors", "captured p50 s", "captured p99 s", "real p50 s",
            "real p99 s", "replayed p50 s", "replayed p99 s", "tokens asked", "tokens served"]
    kinds = (generation or {}).get("kinds") or {}
    rows = []
    for name, k in kinds.items():
        errors = ", ".join(f"{e} x{n}" for e, n in (k.get("errors") or {}).items()) or "-"
        rnd = (lambda v: None if v is None else round(float(v), 3))
        rows.append([name, k.get("calls", 0), errors, rnd(k.get("captured_p50_s")),
                     rnd(k.get("captured_p99_s")), rnd(k.get("real_p50_s")),
                     rnd(k.get("real_p99_s")), rnd(k.get("replayed_p50_s")),
                     rnd(k.get("replayed_p99_s")), k.get("asked_completion_tokens", 0),
                     k.get("completion_tokens", 0)])
    return pd.DataFrame(rows, columns=cols)


def generation_lines(generation: Mapping[str, Any]) -> list[str]:
    """A replay's generation backend in a few lines (the replay command prints them)."""
    engine = ", ".join(f"{k} {v}" for k, v in (generation.get("engine") or {}).items())
    out = [f"generation backend: {generation.get('backend')}"
           + (f" on {generation['device']}" if generation.get("device") else "")
           + (f" ({engine})" if engine else "")]
    if generation.get("backend") == "recorded":
        return out
    tps = generation.get("tokens_per_s")
    out.append(f"{generation.get('submitted', 0)} call(s) at {generation.get('speed', 1):g}x "
               f"wall-clock time in {generation.get('wall_s', 0):g} s, "
               f"{generation.get('completion_tokens', 0)} token(s) generated"
               + (f" ({tps:g} tokens/s)" if tps else ""))
    for row in latency_table(generation).itertuples(index=False):
        out.append(f"{row[0]}: {row[1]} call(s), captured p50 {_cell(row[3])} s, real p50 "
                   f"{_cell(row[5])} s / p99 {_cell(row[6])} s"
                   + (f", errors {row[2]}" if row[2] != "-" else ""))
    return out


def compare_runs(store_a: RunStore, run_a: str, store_b: RunStore, run_b: str) -> RunComparison:
    before, after = timeline_frames(store_a, run_a, store_b, run_b)
    generation = generation_summary(store_b, run_b) or {}
    return RunComparison(
        backend=str(generation.get("backend", "recorded")), latency=latency_table(generation),
        run_a=run_a, run_b=run_b,
        incidents=_incident_table(incident_frame(store_a, run_a), incident_frame(store_b, run_b)),
        outcomes=_delta_table(outcome_counts(store_a, run_a).as_dict(),
                              outcome_counts(store_b, run_b).as_dict()),
        timings=_delta_table(timing_summary(store_a, run_a), timing_summary(store_b, run_b)),
        rollouts=_rollout_table(store_a, run_a, store_b, run_b),
        snapshots=_snapshot_table(store_a, run_a, store_b, run_b),
        timeline=pd.concat([before, after], ignore_index=True))


# -- rendering ----------------------------------------------------------------------------------
_VERDICT = {"reproduced": "reproduced in the replay", "vanished": "vanished in the replay",
            "appeared": "appeared in the replay"}


def _cell(value: Any) -> str:
    if value is None or (not isinstance(value, list | tuple) and pd.isna(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(df: pd.DataFrame) -> list[str]:
    if df.empty:
        return ["(none)", ""]
    cols = list(df.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        out.append("| " + " | ".join(_md_escape(_cell(v)) for v in row) + " |")
    return out + [""]


def headline(cmp: RunComparison) -> list[str]:
    """One sentence per incident: what the replay did to it."""
    lines = []
    for row in cmp.incidents.itertuples():
        lines.append(f"{row.kind} ({row.key_subject}): {_VERDICT[row.status]}")
    return lines or ["No incident in either run."]


def render_markdown(cmp: RunComparison, *, title: str | None = None,
                    notes: tuple[str, ...] = ()) -> str:
    out = [f"# {_md_escape(title or f'Replay report: {cmp.run_a} vs {cmp.run_b}')}", "",
           f"- before (A): `{cmp.run_a}`", f"- after (B): `{cmp.run_b}`", ""]
    out += ["## Verdict", ""] + [f"- {_md_escape(line)}" for line in headline(cmp)] + [""]
    if notes:
        out += ["## Notes", ""] + [f"- {_md_escape(n)}" for n in notes] + [""]
    out += ["## Incidents", ""] + _md_table(cmp.incidents)
    out += ["## Outcome counts", ""] + _md_table(cmp.outcomes)
    out += ["## Timings (s)", ""] + _md_table(cmp.timings)
    if cmp.backend != "recorded":
        out += [f"## Model-call latency: {_md_escape(cmp.backend)} backend vs captured", ""]
        out += _md_table(cmp.latency)
    out += ["## Rollouts that changed", ""] + _md_table(cmp.rollouts[cmp.rollouts.changed])
    out += ["## Snapshots by index", ""] + _md_table(cmp.snapshots)
    out += ["## Timeline by simulated time", ""] + _md_table(cmp.timeline)
    return "\n".join(out)


def _html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p>(none)</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
        for row in df.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(cmp: RunComparison, *, title: str | None = None,
                notes: tuple[str, ...] = ()) -> str:
    esc = html.escape
    title = title or f"Replay report: {cmp.run_a} vs {cmp.run_b}"
    parts = [
        "<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}"
        "th{background:#eee}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f"<p>before (A): <code>{esc(cmp.run_a)}</code><br>after (B): "
        f"<code>{esc(cmp.run_b)}</code></p>",
        "<h2>Verdict</h2><ul>" + "".join(f"<li>{esc(line)}</li>" for line in headline(cmp))
        + "</ul>"]
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes)
                     + "</ul>")
    latency = ((f"Model-call latency: {cmp.backend} backend vs captured", cmp.latency),) \
        if cmp.backend != "recorded" else ()
    for heading, df in (("Incidents", cmp.incidents), ("Outcome counts", cmp.outcomes),
                        ("Timings (s)", cmp.timings), *latency,
                        ("Rollouts that changed", cmp.rollouts[cmp.rollouts.changed]),
                        ("Snapshots by index", cmp.snapshots),
                        ("Timeline by simulated time", cmp.timeline)):
        parts.append(f"<h2>{esc(heading)}</h2>{_html_table(df)}")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(cmp: RunComparison, path: str | Path, *, title: str | None = None,
                 notes: tuple[str, ...] = ()) -> Path:
    """Markdown for ``.md``, HTML for ``.html``/``.htm``; anything else is refused."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".md":
        text = render_markdown(cmp, title=title, notes=notes)
    elif suffix in (".html", ".htm"):
        text = render_html(cmp, title=title, notes=notes)
    else:
        raise ReplayError(f"report {p}: use a .md or .html file name")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p
