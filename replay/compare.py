"""Two runs side by side: incidents, outcome counts, per-rollout changes, aligned timelines.

The per-run reads (incidents with their matching keys, outcome counts, timelines, one time
zero) are the store's (``rolloutscope.store.run_reads``); this module puts two runs together and
renders the result. The renderers turn a ``RunComparison`` into Markdown or HTML text and touch
no file; ``write_report`` is the one function that writes. Every data string in the HTML report
is escaped, because incident summaries and subjects carry ids that came from the observed
system.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rolloutscope.replay.errors import ReplayError
from rolloutscope.store import RunStore
from rolloutscope.store.run_reads import (  # noqa: F401 - re-exported for the report's readers
    IncidentKey,
    OutcomeCounts,
    TIMELINE_COLUMNS,
    UnknownRunError,
    incident_frame,
    incident_keys,
    incident_verdicts,
    match_incidents,
    origin_ns,
    outcome_counts,
    require_run,
    rollout_outcomes,
    seconds,
    snapshot_outcomes,
    timeline,
    timeline_frames,
    timing_summary,
)


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
    # a replay of one incident's window: both sides are cut to it (seconds on A's clock)
    window: tuple[float, float] | None = None
    # what the outcome counts and timings' column a is, when it is not run A as a whole
    figures_note: str = ""

    def incident_status(self, status: str) -> list[IncidentKey]:
        rows = self.incidents[self.incidents.status == status]
        return [(k, s) for k, s in zip(rows.kind, rows.key_subject, strict=True)]


def _delta_table(a: Mapping[str, Any], b: Mapping[str, Any]) -> pd.DataFrame:
    rows = []
    for name in a:
        va, vb = a[name], b.get(name)
        delta = (round(vb - va, 6) if isinstance(va, int | float) and isinstance(vb, int | float)
                 else None)
        rows.append({"metric": name, "a": va, "b": vb, "delta": delta})
    return pd.DataFrame(rows, columns=["metric", "a", "b", "delta"])


def _rollout_table(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Each side's ``rollout_outcomes``, per prompt."""
    merged = a.merge(b, on=["prompt_idx", "rollout_id"], how="outer", suffixes=("_a", "_b"))
    merged["changed"] = [
        oa != ob or ta != tb for oa, ob, ta, tb in zip(
            merged.outcome_a, merged.outcome_b, merged.tries_a, merged.tries_b, strict=True)]
    return merged.sort_values("prompt_idx", ignore_index=True)


def _snapshot_table(a: pd.DataFrame, b: pd.DataFrame, *,
                    window: tuple[float, float] | None = None) -> pd.DataFrame:
    """Each side's ``snapshot_outcomes`` aligned by their index in each run (1 = the first
    attempt that ran; for a window, the first of A's that started in it)."""
    if window is not None:
        a = in_window(a, window).reset_index(drop=True)
        a["snapshot"] = range(1, len(a) + 1)
    merged = a.merge(b, on="snapshot", how="outer", suffixes=("_a", "_b"))
    merged["changed"] = [oa != ob for oa, ob in zip(merged.outcome_a, merged.outcome_b,
                                                    strict=True)]
    return merged


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


def in_window(frame: pd.DataFrame, window: tuple[float, float] | None,
              column: str = "start_s") -> pd.DataFrame:
    """The rows of a frame (an ``incident_frame``, say) whose ``column`` lies inside ``window``
    (all rows for None)."""
    if window is None:
        return frame
    ws, we = window
    return frame[(frame[column] >= ws) & (frame[column] <= we)]


def _without(frame: pd.DataFrame, keys: Iterable[IncidentKey]) -> pd.DataFrame:
    """``frame`` less one row per key (a multiset difference on the ``key`` column)."""
    left = Counter(keys)
    keep = []
    for key in frame.key:
        keep.append(left[key] <= 0)
        left[key] -= 1
    return frame[pd.Series(keep, index=frame.index, dtype=bool)]


def _incident_table(fa: pd.DataFrame, fb: pd.DataFrame, no_verdict: tuple[IncidentKey, ...],
                    as_captured_only: tuple[IncidentKey, ...]) -> pd.DataFrame:
    """``incident_verdicts``, with the incidents the as-captured replay did not reproduce (or
    had alone) taken out of both sides and listed as having no verdict."""
    unjudged = (*no_verdict, *as_captured_only)
    table = incident_verdicts(_without(fa, no_verdict), _without(fb, unjudged))
    first_a = {k: r for r in fa.itertuples() for k in [r.key]}
    rows = [{"status": NO_VERDICT_STATUS, "kind": k, "key_subject": s,
             "start_s_a": getattr(first_a.get((k, s)), "start_s", None), "start_s_b": None,
             "summary_a": getattr(first_a.get((k, s)), "summary", ""), "summary_b": ""}
            for k, s in unjudged]
    if not rows:
        return table
    return pd.concat([table, pd.DataFrame(rows, columns=table.columns)], ignore_index=True)


def compare_runs(store_a: RunStore, run_a: str, store_b: RunStore, run_b: str, *,
                 verdicts: Any = None) -> RunComparison:
    """Run A against run B. ``verdicts``: the ``ReplayRunResult`` of the replay that made B,
    whose window (both sides are cut to it), incidents with no verdict and the figures it
    compared with (for a window, the as-captured replay's) the comparison keeps. Each run's time
    zero is read once and handed to every reader."""
    window = getattr(verdicts, "window", None)
    require_run(store_a, run_a)
    require_run(store_b, run_b)
    origin_a, origin_b = origin_ns(store_a, run_a), origin_ns(store_b, run_b)
    before, after = timeline_frames(store_a, run_a, store_b, run_b, origins=(origin_a, origin_b))
    generation = generation_summary(store_b, run_b) or {}
    outcomes_a: Mapping[str, Any] = outcome_counts(store_a, run_a).as_dict()
    timings_a: Mapping[str, Any] = timing_summary(store_a, run_a, origin=origin_a)
    figures_note = ""
    against = getattr(verdicts, "figures_against", "capture")
    if against == "as-captured":
        outcomes_a = verdicts.outcomes_captured.as_dict()
        timings_a = {d.name: d.captured for d in verdicts.timing_deltas}
        figures_note = (f"Column a is the as-captured replay of the window: run {run_a}'s "
                        f"figures cover the whole run.")
    elif not against:
        outcomes_a = {k: None for k in outcomes_a}
        timings_a = {k: None for k in timings_a}
        figures_note = (f"Not compared: run {run_a}'s figures cover the whole run, run "
                        f"{run_b} only the window.")
    rollouts_b = rollout_outcomes(store_b, run_b, origin=origin_b)
    rollouts = _rollout_table(rollout_outcomes(store_a, run_a, origin=origin_a), rollouts_b)
    snapshots = _snapshot_table(snapshot_outcomes(store_a, run_a, origin=origin_a),
                                snapshot_outcomes(store_b, run_b, origin=origin_b), window=window)
    if window is not None:
        replayed = set(rollouts_b.prompt_idx.dropna())
        rollouts = rollouts[rollouts.prompt_idx.isin(replayed)].reset_index(drop=True)
        before = before[(before.end_s.fillna(window[1]) >= window[0])
                        & (before.start_s <= window[1])]
    return RunComparison(
        backend=str(generation.get("backend", "recorded")), latency=latency_table(generation),
        run_a=run_a, run_b=run_b, window=window, figures_note=figures_note,
        incidents=_incident_table(in_window(incident_frame(store_a, run_a, origin=origin_a),
                                            window),
                                  in_window(incident_frame(store_b, run_b, origin=origin_b),
                                            window),
                                  tuple(getattr(verdicts, "no_verdict", ())),
                                  tuple(getattr(verdicts, "as_captured_only", ()))),
        outcomes=_delta_table(outcomes_a, outcome_counts(store_b, run_b).as_dict()),
        timings=_delta_table(timings_a, timing_summary(store_b, run_b, origin=origin_b)),
        rollouts=rollouts, snapshots=snapshots,
        timeline=pd.concat([before, after], ignore_index=True))


# -- rendering ----------------------------------------------------------------------------------
NO_VERDICT_STATUS = "no verdict"
_VERDICT = {"reproduced": "reproduced in the replay", "vanished": "vanished in the replay",
            "appeared": "appeared in the replay",
            NO_VERDICT_STATUS: "not reproduced as captured: no verdict"}


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
    if cmp.window is not None:
        lines.append(f"Incidents starting in the window {cmp.window[0]:g}-{cmp.window[1]:g} s "
                     f"only.")
    for row in cmp.incidents.itertuples():
        lines.append(f"{row.kind} ({row.key_subject}): {_VERDICT[row.status]}")
    if cmp.incidents.empty:
        lines.append("No incident in either run.")
    return lines


def render_markdown(cmp: RunComparison, *, title: str | None = None,
                    notes: tuple[str, ...] = ()) -> str:
    out = [f"# {_md_escape(title or f'Replay report: {cmp.run_a} vs {cmp.run_b}')}", "",
           f"- before (A): `{cmp.run_a}`", f"- after (B): `{cmp.run_b}`", ""]
    out += ["## Verdict", ""] + [f"- {_md_escape(line)}" for line in headline(cmp)] + [""]
    if notes:
        out += ["## Notes", ""] + [f"- {_md_escape(n)}" for n in notes] + [""]
    out += ["## Incidents", ""] + _md_table(cmp.incidents)
    out += ["## Outcome counts", ""] + ([_md_escape(cmp.figures_note), ""] if cmp.figures_note
                                        else []) + _md_table(cmp.outcomes)
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
        note = (f"<p>{esc(cmp.figures_note)}</p>" if cmp.figures_note
                and heading == "Outcome counts" else "")
        parts.append(f"<h2>{esc(heading)}</h2>{note}{_html_table(df)}")
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
