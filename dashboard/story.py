"""An incident told as a short numbered story: what happened, when, why it matters, what fixes it.

Pure: an incident row plus the view frames in, a ``Story`` out. The chronology is the incident's
evidence spans found in the model views, each said as one sentence at its time since the run
started, the way NVIDIA-NeMo/RL #4266's incident write-up walks through its incident step by step.
Why it matters and what fixes it are per pattern (docs/domain/incidents.md). Rendering to HTML
escapes every string that came from the data.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

S = 1e9


@dataclass(frozen=True)
class Note:
    why: str
    fix: str


NOTES: dict[str, Note] = {
    "deadline_fired_while_parked": Note(
        "RL stops reading the try without cancelling it, so Gym resumes it after the snapshot "
        "and finishes it, and nobody ever acknowledges the result. Gym will not commit while a "
        "finished run is unacknowledged: every later snapshot waits out prepare_timeout_s and "
        "fails, for the rest of the process.",
        "Pause RL's rollout deadlines while a Gym snapshot holds admission "
        "(suspend_request_deadlines at admission close, resume at every reopen), with a holder "
        "count in the deadline registry so the training switch and a snapshot cannot resume "
        "each other's clocks. Retire-then-adopt removes the stall itself."),
    "stranded_completion": Note(
        "A finished result nobody acknowledges keeps Gym's prepare from ever being ready; every "
        "snapshot after it fails after prepare_timeout_s.",
        "Acknowledge or retire the abandoned try (retire-then-adopt); remove the trigger that "
        "made RL give up on it (see the incident that caused it)."),
    "stall": Note(
        "Nothing commits and nothing trains while the job looks alive; the watchdog's line is "
        "the only sign, and GPUs sit idle for the whole stretch.",
        "Find what holds the rollout gate: a hung weight sync (bound the NCCL broadcast, probe "
        "ranks before refit), a failing snapshot, or an exhausted fleet."),
    "quarantine": Note(
        "The fleet lost a serving shard: capacity drops and in-flight generations on it are "
        "re-dispatched.",
        "Expected handling when the shard is really dead; check the trigger and the error, and "
        "whether the router dropped the backend on the next probe tick."),
    "router_fleet_divergence": Note(
        "The router sends work to backends the fleet considers out of service, so requests hit "
        "dead or stale engines.",
        "Push membership to the router on every transition and after a router restart; the "
        "router must start with no backends until told."),
    "wedged_backend": Note(
        "An engine that answers probes but fails generations stays in service and, under "
        "least-outstanding routing, attracts every request.",
        "Keep the reported-failure streak apart from the probe streak so reported failures "
        "alone quarantine the shard; drop the backend from routing on the first failure."),
    "retry_storm": Note(
        "Each retry waits about backend_timeout_s; the rollout burns its whole group deadline "
        "retrying a call that cannot succeed.",
        "The router answers 500 (bounded retry) on a backend timeout and 409 when no backend is "
        "healthy; the client must not raise its retry ceiling on each try."),
    "prepare_blocked": Note(
        "A snapshot waits for a response that started streaming; the prepare runs to its "
        "deadline and the snapshot is abandoned.",
        "Count a response as started only at its first data chunk; cut and hold keep-alive-only "
        "streams."),
    "export_failed": Note(
        "A worker lost during commit makes the checkpoint unusable, and retried commits fail "
        "the same way.",
        "Treat the checkpoint as failed, restart the server before the next restore, and fail "
        "prepare (not block it) when a worker disconnects."),
    "lease_expired": Note(
        "The controller went silent mid-checkpoint; participants resumed on their own and "
        "fenced the checkpoint id.",
        "Find why the controller stalled; renew leases during long operations."),
    "late_retired_attempt": Note(
        "Work of a retired attempt arrived after the retire; after a forget this is a bug.",
        "Forget a rollout only once nothing of any attempt can still run."),
    "redispatch_exhausted": Note(
        "An infrastructure outage outlasted the retry budget and the prompt group was dropped.",
        "Restore the fleet; if only redispatches rise the fleet is recovering."),
    "data_failure_config": Note(
        "A deterministic data failure (context too long) repeats on every try.",
        "Align max_total_sequence_length with the engine's max_model_len."),
    "stale_weights_serving": Note(
        "A serving shard generates with weights older than the trainer's; its rollouts train "
        "off-policy.",
        "Refit or quarantine shards whose weight version lags the trainer."),
    "cut_degraded": Note(
        "Calls whose generation cut failed or was skipped regenerate after a restore: a cost, "
        "not a failure.",
        "Check the inference workers' generation-cut endpoint."),
    "engine_wedged": Note(
        "The engine holds requests and finishes none: every rollout routed to it waits until "
        "its deadline, while probes of the server may still answer.",
        "Restart the engine (or quarantine its shard); report it as a failure so fleet health "
        "stops routing to it."),
    "engine_saturated": Note(
        "Requests spend most of their latency queued in the engine, not generating: rollouts "
        "slow down and deadlines fire on work that never started.",
        "Route fewer requests to the engine (or add engines); check its KV cache use and "
        "preemptions for a memory limit."),
    "engine_backlog_while_healthy": Note(
        "Fleet health keeps routing to a shard whose engine cannot keep up: its queue grows, "
        "and so does every latency behind it.",
        "Weigh the engine's own queue (vllm:num_requests_waiting) in routing, or treat a "
        "growing queue as a health signal."),
    "env_unhealthy": Note(
        "A Gym subprocess died; rollouts time out without an explanation.",
        "Restart the environment servers; treat their health failures as infrastructure."),
}


@dataclass(frozen=True)
class Story:
    title: str
    severity: str
    summary: str
    when: str
    steps: tuple[tuple[float, str], ...]  # (seconds since run start, sentence)
    why: str
    fix: str
    caused_by: str | None
    leads_to: tuple[str, ...]
    unmatched_evidence: int


def _t(ns, t0_ns: int) -> float:
    return (int(ns) - t0_ns) / S


def _has(v) -> bool:
    return v is not None and not (isinstance(v, float) and pd.isna(v)) and v is not pd.NA


def _try(a) -> str:
    return f"try {int(a)}" if _has(a) else "try ?"


def context_steps(spans: pd.DataFrame, events: pd.DataFrame, t0_ns: int, *,
                  start_ns: int, end_ns: int | None) -> tuple[list[tuple[float, str]], set[str]]:
    """Sentences for spans and events no model view holds (``DataStore.incident_context``:
    evidence read from all_spans, train steps, weight syncs, injected faults), and the span ids
    they covered. Of many train steps only the last before the incident and the first after it
    are told."""
    steps: list[tuple[float, str]] = []
    found: set[str] = set()
    if spans is None or not len(spans):
        return steps, found
    spans = spans[spans.status != "incident"]
    steps_rows = spans[spans.name == "rl.train_step"]
    before = steps_rows[steps_rows.end_ns.notna() & (steps_rows.end_ns <= start_ns)]
    after = steps_rows[steps_rows.start_ns >= (end_ns if end_ns is not None else 2**62)]
    for r in before.tail(1).itertuples(index=False):
        steps.append((_t(r.end_ns, t0_ns), f"The last train step before it ends ({r.detail})."))
    for r in after.head(1).itertuples(index=False):
        steps.append((_t(r.start_ns, t0_ns), f"The next train step starts ({r.detail})."))
    found |= set(steps_rows.span_id)
    for r in spans[spans.name != "rl.train_step"].itertuples(index=False):
        found.add(r.span_id)
        if r.name == "rl.stall_watchdog.tick":
            continue  # its events (the stall line) say what it saw
        what = {"rl.weight_sync": "A weight sync (refit)",
                "rolloutscope.fault": "A fault is injected",
                "rl.stall_watchdog.tick": "The stall watchdog ticks"}.get(r.name, f"{r.name}")
        if r.name == "rolloutscope.fault":
            res = ""
        elif _has(r.end_ns) and r.end_ns > r.start_ns:
            res = f", {(r.end_ns - r.start_ns) / S:,.1f} s" + (
                f", {r.status.lower()}" if r.status and r.status != "UNSET" else "")
        elif _has(r.end_ns):
            res = ""
        else:
            res = "; it never ends (still running at the end of the capture)"
        detail = f" ({r.detail})" if r.detail else ""
        steps.append((_t(r.start_ns, t0_ns), f"{what}{detail}{res}."))
    for r in (events.itertuples(index=False) if events is not None else ()):
        if r.lane == "incident":
            continue
        name = "The watchdog's stall line" if r.name in ("rl.stall", "the watchdog's stall line") \
            else f"Event {r.name}"
        steps.append((_t(r.ts_ns, t0_ns), f"{name}: {r.detail}." if r.detail else f"{name}."))
    return steps, found


def evidence_steps(evidence: frozenset[str], frames: Mapping[str, pd.DataFrame],
                   t0_ns: int) -> tuple[list[tuple[float, str]], int]:
    """Sentences for the evidence spans found in the model views, and how many were not."""
    steps: list[tuple[float, str]] = []
    found: set[str] = set()

    def rows(name: str) -> pd.DataFrame:
        df = frames.get(name)
        if df is None or not len(df) or "span_id" not in df:
            return pd.DataFrame()
        return df[df.span_id.isin(evidence)]

    for r in rows("deadlines").itertuples(index=False):
        found.add(r.span_id)
        steps.append((_t(r.start_ns, t0_ns), f"RL's {r.kind} deadline for rollout "
                      f"{r.rollout_id} {_try(r.attempt)} starts, budget {r.budget_s:g} s."))
        if _has(r.fired_ns):
            steps.append((_t(r.fired_ns, t0_ns), f"The deadline fires while the try is "
                          f"{r.state_when_fired or 'in an unknown state'}; RL gives up on it."))
    for r in rows("parked_intervals").itertuples(index=False):
        found.add(r.span_id)
        steps.append((_t(r.start_ns, t0_ns), f"Snapshot {r.checkpoint_id} parks rollout "
                      f"{r.rollout_id} {_try(r.attempt)}."))
        if _has(r.end_ns):
            steps.append((_t(r.end_ns, t0_ns), f"The snapshot releases it after "
                          f"{(r.end_ns - r.start_ns) / S:,.1f} s parked."))
    for r in rows("rollout_attempts").itertuples(index=False):
        found.add(r.span_id)
        end = (f"; it ends {r.outcome} at {_t(r.end_ns, t0_ns):,.1f} s" if _has(r.end_ns)
               else "; it is still running")
        why = f" ({r.failure_class}: {r.failure_reason})" if _has(r.failure_reason) else ""
        steps.append((_t(r.start_ns, t0_ns), f"RL starts rollout {r.rollout_id} "
                      f"{_try(r.attempt)}{end}{why}."))
    for r in rows("completions").itertuples(index=False):
        found.add(r.span_id)
        ack = (f"acknowledged at {_t(r.ack_ns, t0_ns):,.1f} s" if _has(r.ack_ns)
               else "nobody acknowledges it")
        steps.append((_t(r.completed_ns, t0_ns), f"Gym finishes rollout {r.rollout_id} "
                      f"{_try(r.attempt)} and keeps its result; {ack}."))
    for r in rows("checkpoint_ops").itertuples(index=False):
        found.add(r.span_id)
        who = r.participant_kind + (f" {r.instance}" if _has(r.instance) else "")
        if _has(r.end_ns):
            res = f"takes {(r.end_ns - r.start_ns) / S:,.1f} s and ends {r.outcome}"
            res += f" ({r.code})" if _has(r.code) else ""
        else:
            res = "is still running"
        blk = f", {int(r.blockers)} blocker(s)" if _has(r.blockers) and r.blockers else ""
        steps.append((_t(r.start_ns, t0_ns), f"The {who} {r.op} of {r.checkpoint_id} "
                      f"{res}{blk}."))
    for r in rows("shard_states").itertuples(index=False):
        found.add(r.span_id)
        err = f" ({r.last_error})" if _has(r.last_error) else ""
        prev = f"{r.previous_state} -> " if _has(r.previous_state) else ""
        steps.append((_t(r.start_ns, t0_ns), f"Shard {int(r.shard_idx)} goes {prev}{r.state} "
                      f"on {r.trigger or 'an unknown trigger'}{err}."))
    steps.sort(key=lambda s: s[0])
    return steps, len(evidence - found)


def incident_story(incident: Mapping, frames: Mapping[str, pd.DataFrame], *, t0_ns: int,
                   incidents: pd.DataFrame,
                   context: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> Story:
    """``context``: the spans and events around it that no model view holds
    (``DataStore.incident_context``), told in its chronology too."""
    raw = incident.get("evidence")
    evidence = frozenset(str(e) for e in (list(raw) if raw is not None
                                          and not isinstance(raw, (str, float)) else []))
    steps, unmatched = evidence_steps(evidence, frames, t0_ns)
    if context is not None:
        end = incident.get("end_ns")
        more, covered = context_steps(*context, t0_ns, start_ns=int(incident["start_ns"]),
                                      end_ns=int(end) if _has(end) else None)
        steps = sorted(steps + more, key=lambda s: s[0])
        unmatched = max(unmatched - len(evidence & covered), 0)
    start = _t(incident["start_ns"], t0_ns)
    if _has(incident.get("end_ns")) and incident["end_ns"] != incident["start_ns"]:
        when = (f"{start:,.1f} s to {_t(incident['end_ns'], t0_ns):,.1f} s after the run "
                f"started ({(incident['end_ns'] - incident['start_ns']) / S:,.1f} s)")
    elif _has(incident.get("end_ns")):
        when = f"at {start:,.1f} s after the run started"
    else:
        when = f"since {start:,.1f} s after the run started, still going"
    note = NOTES.get(str(incident["kind"]), Note("", ""))
    leads = incidents[incidents.caused_by == incident["incident_id"]] if len(incidents) else \
        incidents
    caused = incident.get("caused_by")
    return Story(
        title=str(incident["kind"]).replace("_", " "),
        severity=str(incident["severity"]),
        summary=str(incident["summary"]),
        when=when,
        steps=tuple(steps),
        why=note.why, fix=note.fix,
        caused_by=str(caused) if _has(caused) else None,
        leads_to=tuple(f"{k.replace('_', ' ')}: {s}" for k, s in
                       zip(leads.kind.astype(str), leads.summary.astype(str))),
        unmatched_evidence=unmatched)


def story_html(story: Story, *, subject: str, caused_by_summary: str | None = None) -> str:
    """The story as HTML; every string from the data is escaped."""
    e = html.escape
    items = "".join(f"<li><span class='rs-t'>{t:,.1f} s</span> {e(text)}</li>"
                    for t, text in story.steps)
    parts = [f"<div class='rs-story'><h3 class='rs-{e(story.severity)}'>{e(story.title)} "
             f"<small>{e(subject)}</small></h3>",
             f"<p><b>What happened.</b> {e(story.summary)}</p>",
             f"<p class='rs-when'><b>When.</b> {e(story.when)}.</p>"]
    if story.caused_by:
        parts.append(f"<p><b>Caused by.</b> {e(caused_by_summary or story.caused_by)}</p>")
    if story.steps:
        parts.append(f"<p><b>Step by step.</b></p><ol>{items}</ol>")
    if story.unmatched_evidence:
        parts.append(f"<p class='rs-muted'>{story.unmatched_evidence} more evidence span(s) "
                     f"outside the model views.</p>")
    if story.leads_to:
        leads = "".join(f"<li>{e(s)}</li>" for s in story.leads_to)
        parts.append(f"<p><b>What it led to.</b></p><ul>{leads}</ul>")
    if story.why:
        parts.append(f"<p><b>Why it matters.</b> {e(story.why)}</p>")
    if story.fix:
        parts.append(f"<p><b>What fixes it.</b> {e(story.fix)}</p>")
    parts.append("</div>")
    return "".join(parts)
