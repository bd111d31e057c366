"""A workload from released Gym's own telemetry: what extraction reads when a run has no RL side.

A run collected only from a Gym deployment (``gym env start`` with telemetry on, driven by any
caller) has Gym rollouts (``gym_rollouts``: one agent ``/run`` each) and their model calls
(``model_calls``) but no ``rl.rollout.prompt`` span to say what a prompt was. Here each Gym
rollout is a row: rows are grouped into prompts by Gym's task index (the ``<task>-<repeat>``
of the default rollout id) when every task has the same number of repeats, else each rollout is
a prompt of one row. A row's turns are its first attempt's model calls in order: ``model_s`` is
the call as the model server served it, ``tool_s`` the gap to the next call (tool calls and the
agent's own work; the last one runs to the rollout's end), ``setup_s`` the time before the
first call. Token counts are the call's where a span carries them (``gen_ai.usage.*`` on the Gym
span or its backend try; Gym 0.7.0 records none), else the engine's (vLLM's ``llm_request`` under
the call: its prompt and completion tokens), else 0; the report counts each. Later Gym attempts of a rollout (``rid-aN``) are restores or a caller's re-sends of a row
already in the workload, and are listed, not replayed as rows of their own.

Pure reading: the views in, ``Prompt`` records and notes out. The caller (``extract_scenario``)
owns the rest of the scenario and the report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from rolloutscope.replay.scenario import Prompt, Row, Turn
from rolloutscope.store import RunStore

Note = Callable[[str, str, str], None]  # (kind, item, detail), as _Notes.add takes them


@dataclass(frozen=True)
class GymWorkload:
    prompts: list[Prompt]
    rows_per_prompt: int


def gym_workload(store: RunStore, run_id: str, origin: int, note: Note) -> GymWorkload | None:
    """Prompts built from the run's Gym rollouts, or None when it has none."""
    rollouts = store.query_df(
        "SELECT capture_key, rollout_id, gym_attempt, task_index, repeat_index, start_ns, "
        "end_ns, outcome FROM gym_rollouts WHERE run_id = ? ORDER BY start_ns, rollout_id",
        [run_id])
    if not len(rollouts):
        return None
    calls = store.query_df(
        "SELECT capture_key, start_ns, end_ns, outcome, input_tokens, output_tokens, "
        "engine_prompt_tokens, engine_completion_tokens FROM model_calls WHERE run_id = ? AND capture_key IS NOT NULL ORDER BY start_ns",
        [run_id])
    by_key = {k: g for k, g in calls.groupby("capture_key")}
    first = rollouts.sort_values(["gym_attempt", "start_ns"]).drop_duplicates("rollout_id")
    later = rollouts[~rollouts.index.isin(first.index)]
    groups = _groups(first, note)
    n_rows = len(groups[0][1])
    prompts, from_calls, spanned, failed, tokens = [], 0, 0, 0, 0
    counted: Counter[str] = Counter()  # turns by where their token counts came from
    for idx, members in groups:
        rows = []
        for r in members.itertuples(index=False):
            row, how = _row(r, by_key.get(r.capture_key), counted)
            from_calls += how == "calls"
            spanned += how == "spanned"
            failed += r.outcome != "finished"
            tokens += any(t.input_tokens or t.output_tokens for t in row.turns)
            rows.append(row)
        arrival = round((int(members.start_ns.min()) - origin) / 1e9, 6)
        prompts.append(Prompt(idx=int(idx), arrival_s=max(arrival, 0.0), rows=tuple(rows)))
    note("inferred", "workload.prompts",
         f"{len(prompts)} prompt(s) of {n_rows} row(s) from {len(first)} Gym rollout(s) "
         f"(gym.rollout spans: no rl.rollout.prompt span in this run); arrivals at each "
         f"prompt's first /run")
    if from_calls:
        note("inferred", "workload.turns",
             f"{from_calls} row(s) from their model calls (gym.model.* spans or HTTP calls to "
             f"a generation route): model time as served, tool time the gaps between calls")
    if spanned:
        note("missing", "workload.turns",
             f"{spanned} row(s) without model-call spans (the model_call span group was off): "
             f"one turn spanning the /run, no tool steps")
    if failed:
        note("missing", "workload.turns",
             f"{failed} row(s) whose /run did not finish cleanly: their observed timings are "
             f"used as they are")
    if not tokens:
        note("defaulted", "workload.turns.tokens",
             "no span carries token counts (Gym 0.7.0 records none): 0 in and out")
    if counted["call"]:
        note("inferred", "workload.turns.tokens",
             f"{counted['call']} turn(s) from their model call's gen_ai.usage.* (or its backend "
             f"try's usage)")
    if counted["engine"]:
        note("inferred", "workload.turns.tokens",
             f"{counted['engine']} turn(s) from the engine's llm_request under the call (where "
             f"the call recorded none): its prompt and completion tokens")
    if len(later):
        keys = ", ".join(sorted(later.capture_key.astype(str))[:10])
        note("missing", "workload.gym_attempts",
             f"{len(later)} later Gym attempt(s) ({keys}): a restore's or a caller's re-send of "
             f"a rollout already in the workload; not replayed as rows of their own")
    return GymWorkload(prompts=prompts, rows_per_prompt=n_rows)


def _groups(first: pd.DataFrame, note: Note) -> list[tuple[int, pd.DataFrame]]:
    """Rollouts grouped into prompts: by task when every task has as many repeats, else one
    prompt per rollout."""
    if first.task_index.notna().all():
        sizes = first.groupby("task_index").size()
        if sizes.nunique() == 1:
            note("inferred", "workload.prompts.grouping",
                 f"by Gym task index ({len(sizes)} task(s) of {int(sizes.iloc[0])} repeat(s))")
            return [(int(task), g.sort_values("repeat_index"))
                    for task, g in first.groupby("task_index", sort=True)]
    note("defaulted", "workload.prompts.grouping",
         "rollout ids are not Gym's <task>-<repeat> form, or tasks differ in repeats: one "
         "prompt per rollout")
    return [(i, first.iloc[[i]]) for i in range(len(first))]


def _row(r, calls: pd.DataFrame | None, counted: Counter[str]) -> tuple[Row, str]:
    start = int(r.start_ns)
    end = int(r.end_ns) if pd.notna(r.end_ns) else None
    done = calls[calls.end_ns.notna()] if calls is not None else None
    if done is None or not len(done):
        span = 0.0 if end is None else (end - start) / 1e9
        return Row(turns=(Turn(model_s=round(max(span, 0.0), 6)),)), "spanned"
    done = done.sort_values("start_ns")
    starts, ends = done.start_ns.astype("int64").tolist(), done.end_ns.astype("int64").tolist()
    last = end if end is not None else ends[-1]
    turns = []
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        nxt = starts[i + 1] if i + 1 < len(starts) else last
        row = done.iloc[i]
        # each count the call's own, else the engine's (where the call recorded none)
        tin = row.input_tokens if pd.notna(row.input_tokens) else row.engine_prompt_tokens
        tout = row.output_tokens if pd.notna(row.output_tokens) else row.engine_completion_tokens
        counted["call"] += pd.notna(row.input_tokens) or pd.notna(row.output_tokens)
        counted["engine"] += ((pd.isna(row.input_tokens) and pd.notna(row.engine_prompt_tokens))
                              or (pd.isna(row.output_tokens)
                                  and pd.notna(row.engine_completion_tokens)))
        turns.append(Turn(
            model_s=round((e - s) / 1e9, 6), tool_s=round(max(0, nxt - e) / 1e9, 6),
            input_tokens=_count(tin), output_tokens=_count(tout)))
    return Row(turns=tuple(turns), setup_s=round(max(0, starts[0] - start) / 1e9, 6)), "calls"


def _count(v) -> int:
    return 0 if v is None or pd.isna(v) else int(v)
