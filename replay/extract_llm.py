"""A workload from an LLM client's own call spans: what extraction reads when a run has neither an
RL side nor Gym rollouts.

A run collected from an agent that calls an OpenAI-compatible endpoint through an instrumented
client (the ``openai`` SDK under opentelemetry-instrumentation-openai-v2 or an OpenInference
instrumentation, or any client whose HTTP requests to a generation route are traced) has model
calls (``model_calls``: source genai, openinference or http) and nothing that says what a rollout
or a prompt was. Here:

- a rollout is one trace. An agent works one task under one root span (``agent.rollout``,
  opened before its first call, closed after its last tool step), and every call it makes for
  the task is in that trace however deeply its turns nest; grouping by a call's parent span
  would split a rollout whose turns each have a span of their own. A call made outside any span
  is a trace, and so a rollout, of its own.
- each rollout is a prompt of one row (client spans name no task to group rows by), arriving at
  its trace root's start.
- a row's turns are its finished calls in start order: ``model_s`` the call span as the client
  saw it (the network and the engine's queue included), ``tool_s`` the gap to the next call (the
  last one runs to the root's end), ``setup_s`` the root's start to the first call.
- tokens: the call's own (``gen_ai.usage.*``, ``llm.token_count.*``, or the HTTP answer's
  usage: ``model_calls.input_tokens``), else the engine's prompt / completion tokens (vLLM's
  ``llm_request`` under the call), else 0.

Every one of these is counted in a note. Pure reading: the views and spans in, ``Prompt``
records and notes out; the caller (``extract_scenario``) owns the rest of the scenario.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from rolloutscope.replay.extract_gym import Note
from rolloutscope.replay.scenario import Prompt, Row, Turn
from rolloutscope.store import RunStore

# the spans of a trace that have no stored parent: its root, or several where a parent was lost
_ROOTS_SQL = """
SELECT s.trace_id, min(s.start_ns) AS start_ns, max(s.end_ns) AS end_ns,
       bool_or(s.end_ns IS NULL) AS open, count(*) AS roots,
       arg_min(s.span_id, s.start_ns) AS root_span_id
FROM all_spans s
WHERE s.run_id = ?
  AND s.trace_id IN (SELECT trace_id FROM model_calls WHERE run_id = ?)
  AND NOT EXISTS (SELECT 1 FROM all_spans p WHERE p.run_id = s.run_id
                  AND p.trace_id = s.trace_id AND p.span_id = s.parent_span_id)
GROUP BY s.trace_id
"""
_CALLS_SQL = """
SELECT trace_id, span_id, source, start_ns, end_ns, outcome, http_status,
       input_tokens, output_tokens, engine_queue_s, engine_e2e_s,
       engine_prompt_tokens, engine_completion_tokens
FROM model_calls WHERE run_id = ? ORDER BY start_ns, span_id
"""


@dataclass(frozen=True)
class CallWorkload:
    prompts: list[Prompt]
    rows_per_prompt: int
    sources: tuple[str, ...]  # the model_calls sources the turns came from


@dataclass
class _Tally:
    """What the rows were built from, for the report."""

    tokens: Counter[tuple[str, str]] = field(default_factory=Counter)  # (in|out, call|engine|none)
    failed: Counter[str] = field(default_factory=Counter)  # HTTP status (or "no status")
    open_calls: int = 0
    overlapping: int = 0
    engine: int = 0
    engine_queue_s: float = 0.0
    engine_e2e_s: float = 0.0
    engine_longer: int = 0  # calls whose engine e2e outlasts the client's span of them


def call_workload(store: RunStore, run_id: str, origin: int, note: Note) -> CallWorkload | None:
    """One prompt of one row per trace holding model calls, or None when the run has none."""
    calls = store.query_df(_CALLS_SQL, [run_id])
    if not len(calls):
        return None
    roots = {r.trace_id: r for r in store.query_df(_ROOTS_SQL, [run_id, run_id])
             .itertuples(index=False)}
    tally = _Tally()
    traces = []
    for trace_id, mine in calls.groupby("trace_id", sort=False):
        root = roots[trace_id]
        traces.append((int(root.start_ns), str(trace_id), root, mine))
    traces.sort(key=lambda t: t[:2])
    prompts, bare, lost_parents, empty = [], 0, 0, 0
    for idx, (start, _, root, mine) in enumerate(traces):
        end = None if root.open or pd.isna(root.end_ns) else int(root.end_ns)
        bare += root.root_span_id in set(mine.span_id)
        lost_parents += int(root.roots) > 1
        row = _row(mine, start, end, tally)
        empty += row is None
        arrival = round((start - origin) / 1e9, 6)
        prompts.append(Prompt(idx=idx, arrival_s=max(arrival, 0.0),
                              rows=(row or Row(turns=(Turn(model_s=0.0),)),)))
    sources = tuple(sorted(set(calls.source)))
    _notes(note, tally, n_calls=len(calls), n_traces=len(traces), sources=sources, bare=bare,
           lost_parents=lost_parents, empty=empty)
    return CallWorkload(prompts=prompts, rows_per_prompt=1, sources=sources)


def _row(calls: pd.DataFrame, start: int, end: int | None, tally: _Tally) -> Row | None:
    done = calls[calls.end_ns.notna()]
    tally.open_calls += len(calls) - len(done)
    if not len(done):
        return None
    starts = done.start_ns.astype("int64").tolist()
    ends = done.end_ns.astype("int64").tolist()
    last = max(end if end is not None else ends[-1], ends[-1])
    turns = []
    for i, c in enumerate(done.itertuples(index=False)):
        nxt = starts[i + 1] if i + 1 < len(starts) else last
        tally.overlapping += nxt < ends[i]
        if c.outcome == "error":
            tally.failed["no status" if pd.isna(c.http_status) else str(int(c.http_status))] += 1
        if pd.notna(c.engine_e2e_s):
            tally.engine += 1
            tally.engine_e2e_s += float(c.engine_e2e_s)
            tally.engine_queue_s += 0.0 if pd.isna(c.engine_queue_s) else float(c.engine_queue_s)
            tally.engine_longer += float(c.engine_e2e_s) > (ends[i] - starts[i]) / 1e9
        turns.append(Turn(
            model_s=round((ends[i] - starts[i]) / 1e9, 6),
            tool_s=round(max(0, nxt - ends[i]) / 1e9, 6),
            input_tokens=_tokens(c.input_tokens, c.engine_prompt_tokens, "in", tally),
            output_tokens=_tokens(c.output_tokens, c.engine_completion_tokens, "out", tally)))
    return Row(turns=tuple(turns), setup_s=round(max(0, starts[0] - start) / 1e9, 6))


def _tokens(client, engine, which: str, tally: _Tally) -> int:
    """The call's own count, else the engine's, else 0; tallied by where it came from."""
    for source, value in (("call", client), ("engine", engine)):
        if value is not None and not pd.isna(value):
            tally.tokens[(which, source)] += 1
            return int(value)
    tally.tokens[(which, "none")] += 1
    return 0


def _notes(note: Note, t: _Tally, *, n_calls: int, n_traces: int, sources: tuple[str, ...],
           bare: int, lost_parents: int, empty: int) -> None:
    note("inferred", "workload.prompts",
         f"{n_traces} prompt(s) of 1 row from {n_calls} model call(s) of {', '.join(sources)} "
         f"spans (no rl.rollout.prompt or gym.rollout span in this run); arrivals at each "
         f"trace root's start")
    note("inferred", "workload.prompts.grouping",
         f"by trace: one rollout per trace holding model calls ({bare} of them a call made "
         f"outside any span); client spans name no task, so each rollout is a prompt of its own")
    if lost_parents:
        note("missing", "workload.prompts.grouping",
             f"{lost_parents} trace(s) with more than one span whose parent is not stored: the "
             f"rollout runs from the first one's start to the last one's end")
    note("inferred", "workload.turns",
         f"{n_calls - t.open_calls} finished call(s) as turns: model time the client's call "
         f"span, tool time the gap to the next call (the last one's to the trace root's end), "
         f"setup the root's start to the first call")
    note("defaulted", "workload.turns.streaming",
         "client call spans do not say whether a call streamed: every turn replays "
         "non-streaming")
    for which, name in (("in", "input"), ("out", "output")):
        got = {s: t.tokens[(which, s)] for s in ("call", "engine", "none")}
        note("inferred" if got["call"] + got["engine"] else "defaulted",
             f"workload.turns.{name}_tokens",
             f"{got['call']} call(s) from the call's span (gen_ai.usage.*, llm.token_count.* or "
             f"the HTTP answer's usage), {got['engine']} from the engine's llm_request (the "
             f"call recorded none), {got['none']} with none recorded: 0")
    if t.engine:
        note("inferred", "workload.turns.model_s",
             f"{t.engine} call(s) carry the engine's own record (vLLM llm_request): model time "
             f"stays the client's span, which holds the engine's {t.engine_queue_s:g} s queued "
             f"and {t.engine_e2e_s:g} s end to end (in all) and the network between them")
    if t.engine_longer:
        note("missing", "workload.turns.model_s",
             f"{t.engine_longer} call(s) whose engine end-to-end time outlasts the client's span "
             f"of the call: the two records disagree; the client's is used")
    if t.failed:
        said = ", ".join(f"{s} x{n}" for s, n in sorted(t.failed.items()))
        note("missing", "workload.turns",
             f"{sum(t.failed.values())} call(s) failed (HTTP {said}): turns of their observed "
             f"length; the scenario model has no failed model call, so the replay serves them")
    if t.overlapping:
        note("missing", "workload.turns",
             f"{t.overlapping} call(s) overlapping the next call of their trace (concurrent "
             f"calls): replayed one after another, no tool time between them")
    if t.open_calls:
        note("missing", "workload.turns",
             f"{t.open_calls} call(s) never finished (open spans): not replayed")
    if empty:
        note("missing", "workload.turns",
             f"{empty} trace(s) whose calls all stayed open: one turn of 0 s")
