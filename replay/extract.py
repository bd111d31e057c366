"""From a captured run back to a scenario: what the run recorded and what its spans show.

Rule: nothing is guessed silently. Each part of the scenario comes from one named source, and
the ``ExtractionReport`` lists it as an ``ExtractionNote`` whose ``provenance`` is ``inferred``
(read from the run's config or spans), ``defaulted`` (the run did not record it; a stated
default or the recorded scenario document stands in) or ``missing`` (observed but with no place
in the scenario model, or not observed at all). A replay of the extracted scenario is only as
faithful as that list says.

Sources, in the order they are used:

- config: ``runs.config`` (a replay's nested blocks, or an import's flat keys);
- prompts and arrivals: ``rl.rollout.prompt`` spans; rows: the first /run of each row;
- turns and token counts: policy model-call spans (``gym.model.responses`` /
  ``gym.model.chat_completions``) under the row's first /run; without them, the scenario
  document the run recorded (a replay's); without that, one turn per row spanning the observed
  active time of the run (listed as missing: turn boundaries decide where a snapshot parks);
- control: ``rl.rollout_snapshot`` (attempt times), the first coordinated commit (its
  duration), a prepared-to-commit gap (a silent controller), ``rl.weight_sync``;
- faults: lost replies (a completion RL never received on its stream), injected row failures,
  policy workers lost in a commit; fault spans with no place in the scenario model are listed.
- a run with no RL side at all (collected only from a Gym deployment): the workload comes from
  Gym's own rollouts and model calls (``extract_gym``); the report says so (``dialect`` gym),
  and everything RL would have decided is the reference model's defaults;
- a run with neither (an agent calling a model through an instrumented LLM client: GenAI,
  OpenInference or plain HTTP spans): one rollout per trace of its model calls
  (``extract_llm``), dialect llm, the same defaults.

``--incident ID`` keeps a window around one incident: from ``pad_s`` before it (and from the
arrival of every prompt still running then) to ``pad_s`` after it, with the snapshots, syncs
and faults inside. Times are kept on the capture's clock, so the replay lines up with it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rolloutscope.config import FLAT_KEYS
from rolloutscope.store import RunStore
from rolloutscope.vocabulary import (
    Attr,
    DeadlineHolder,
    EventName,
    RunSource,
    SpanName,
)
from rolloutscope.replay import scenarios
from rolloutscope.replay.extract_gym import gym_workload
from rolloutscope.replay.extract_llm import call_workload
from rolloutscope.store.run_reads import origin_ns, require_run
from rolloutscope.replay.errors import ReplayError, ScenarioError, UnknownScenarioError
from rolloutscope.replay.scenario import (
    Config,
    ControllerSilence,
    Faults,
    Prompt,
    Row,
    RowFailure,
    RowRef,
    Scenario,
    SnapshotAttempt,
    Turn,
    WeightSync,
)

# runs.metadata key under which a replay made by this package records its scenario document
SCENARIO_DOCUMENT_KEY = "scenario_document"
MODEL_CALL_SPANS = (SpanName.GYM_MODEL_RESPONSES, SpanName.GYM_MODEL_CHAT)
_HTTP_STATUS = re.compile(r"HTTP (\d{3})")
# the detail a replay's Gym gives a /run it failed on purpose; fleet faults fail runs with
# their own detail and are read from the fault list instead
INJECTED_FAULT = "injected fault"
_DEFAULT_COMMIT_S = SnapshotAttempt.__dataclass_fields__["commit_s"].default


class ExtractionError(ReplayError):
    """The run cannot become a scenario (no prompts, an unknown incident, several runs)."""


class Provenance(StrEnum):
    INFERRED = "inferred"  # read from the run's config or spans
    DEFAULTED = "defaulted"  # not recorded: a stated default or the recorded document stands in
    MISSING = "missing"  # observed with no place in the scenario model, or not observed at all


@dataclass(frozen=True, kw_only=True)
class ExtractionNote:
    provenance: Provenance
    item: str  # where in the scenario, e.g. "config.watchdog" or "workload.turns"
    detail: str

    def line(self) -> str:
        return f"{self.provenance.value}: {self.item}: {self.detail}"


@dataclass(frozen=True, kw_only=True)
class ExtractionReport:
    run_id: str
    source: str
    incident_id: str | None = None
    window: tuple[float, float] | None = None
    inferred: tuple[ExtractionNote, ...] = ()
    defaulted: tuple[ExtractionNote, ...] = ()
    missing: tuple[ExtractionNote, ...] = ()
    # whose spans the workload came from: rl (rl.rollout.prompt and its rows), gym (the run
    # has no RL side: Gym's rollouts, see extract_gym) or llm (neither: an LLM client's model
    # calls, one rollout per trace, see extract_llm)
    dialect: str = "rl"

    @property
    def notes(self) -> tuple[ExtractionNote, ...]:
        return self.inferred + self.defaulted + self.missing

    def lines(self) -> list[str]:
        out = [f"extracted from run {self.run_id} ({self.source})"]
        if self.dialect == "gym":
            out.append("Gym side only: the run has no RL-side spans, so the workload is the Gym "
                       "deployment's rollouts and the replay's controller, deadlines, retries "
                       "and snapshots are the reference model's defaults; the captured outcome "
                       "counts are not compared")
        elif self.dialect == "llm":
            out.append("LLM client side only: the run has neither RL-side spans nor Gym "
                       "rollouts, so the workload is its model calls (one rollout per trace) "
                       "and the replay's controller, deadlines, retries and snapshots are the "
                       "reference model's defaults; the captured outcome counts are not "
                       "compared")
        if self.window is not None:
            out.append(f"window {self.window[0]:g}-{self.window[1]:g} s around incident "
                       f"{self.incident_id}")
        out.extend(n.line() for n in self.notes)
        return out


@dataclass(frozen=True, kw_only=True)
class Extraction:
    scenario: Scenario
    report: ExtractionReport


@dataclass
class _Notes:
    inferred: list[ExtractionNote] = field(default_factory=list)
    defaulted: list[ExtractionNote] = field(default_factory=list)
    missing: list[ExtractionNote] = field(default_factory=list)

    def add(self, provenance: Provenance | str, item: str, detail: str) -> None:
        note = ExtractionNote(provenance=Provenance(provenance), item=item, detail=detail)
        getattr(self, note.provenance.value).append(note)


@dataclass(frozen=True)
class _Span:
    span_id: str
    name: str
    start: float
    end: float | None
    status: str | None
    message: str | None
    rollout_id: str | None
    prompt_idx: int | None
    checkpoint_id: str | None
    parent: str | None
    attrs: Mapping[str, Any]


@dataclass(frozen=True)
class _Event:
    span_id: str
    name: str
    t: float
    rollout_id: str | None
    checkpoint_id: str | None
    attrs: Mapping[str, Any]


class _RunData:
    """The spans and events extraction reads, on the run's clock (seconds from its origin)."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        origin = origin_ns(store, run_id)
        names = [SpanName.RL_PROMPT, SpanName.RL_ATTEMPT, SpanName.AGENT_EXECUTION,
                 SpanName.AGENT_PARKED, SpanName.RL_SNAPSHOT, SpanName.CK_COORDINATE_PREPARE,
                 SpanName.CK_COORDINATE_COMMIT, SpanName.CK_COORDINATE_RETIRE,
                 SpanName.RL_WEIGHT_SYNC, SpanName.RL_DEADLINE, SpanName.FAULT,
                 SpanName.GYM_ROLLOUT, *MODEL_CALL_SPANS]
        marks = ", ".join("?" for _ in names)
        rows = store.query(
            f"SELECT span_id, name, start_ns, end_ns, status_code, status_message, rollout_id, "
            f"prompt_idx, checkpoint_id, parent_span_id, attributes FROM all_spans "
            f"WHERE run_id = ? AND name IN ({marks}) ORDER BY start_ns, span_id",
            [run_id, *names])
        self.spans: dict[str, list[_Span]] = {n: [] for n in names}
        for sid, name, s, e, st, msg, rid, pidx, ck, parent, attrs in rows:
            self.spans[name].append(_Span(
                sid, name, (s - origin) / 1e9, None if e is None else (e - origin) / 1e9, st,
                msg, rid, pidx, ck, parent, json.loads(attrs) if attrs else {}))
        events = [EventName.AGENT_COMPLETED, EventName.ROW_RECEIVED, EventName.CK_WORKER_LOST,
                  EventName.DEADLINE_SUSPEND, EventName.MODEL_RESPONSE_STARTED]
        marks = ", ".join("?" for _ in events)
        rows = store.query(
            f"SELECT span_id, name, ts_ns, rollout_id, checkpoint_id, attributes FROM all_events "
            f"WHERE run_id = ? AND name IN ({marks}) ORDER BY ts_ns, span_id",
            [run_id, *events])
        self.events: dict[str, list[_Event]] = {n: [] for n in events}
        for sid, name, ts, rid, ck, attrs in rows:
            self.events[name].append(_Event(sid, name, (ts - origin) / 1e9, rid, ck,
                                            json.loads(attrs) if attrs else {}))
        last = store.query("SELECT max(coalesce(end_ns, start_ns)) FROM all_spans "
                           "WHERE run_id = ?", [run_id])[0][0]
        self.last_s = 0.0 if last is None else (last - origin) / 1e9


# -- the entry point ----------------------------------------------------------------------------
def extract_scenario(store: RunStore, run_id: str | None = None, *,
                     incident_id: str | None = None, pad_s: float | None = None) -> Extraction:
    """The scenario a captured run describes, with the report of where each part came from."""
    run_id = _the_run(store, run_id, incident_id)
    rows = store.query("SELECT source, scenario, seed, config, metadata FROM runs "
                       "WHERE run_id = ?", [run_id])
    # a run known only by its spans (a collector that never registered it) is a live run
    source, name, seed, config_json, metadata_json = rows[0] if rows else (
        RunSource.LIVE.value, None, None, None, None)
    recorded = json.loads(config_json) if config_json else {}
    metadata = json.loads(metadata_json) if metadata_json else {}
    notes = _Notes()
    data = _RunData(store, run_id)
    config = _config(recorded, notes)
    document = _recorded_document(source, name, seed, metadata, notes)
    horizon = _horizon(metadata, data, notes)
    if seed is None:
        notes.add("defaulted", "seed", "the run recorded no seed; 0")
    dialect = "rl"
    if data.spans[SpanName.RL_PROMPT]:
        prompts = _prompts(data, config, document, notes)
    else:
        prompts, dialect, config = _workload_without_rl(store, run_id, config, notes)
    if not prompts:
        raise ExtractionError(f"run {run_id} has no rl.rollout.prompt spans: no workload")
    snapshots, silences, ck_index = _snapshots(data, horizon, notes)
    syncs = _weight_syncs(data, notes)
    _nominal_sync_durations(recorded, syncs, notes)
    scenario_dict: dict[str, Any] = {
        "name": name or run_id,
        "description": f"extracted from run {run_id} of {store.path.name}",
        "seed": int(seed or 0), "horizon_s": horizon,
        "config": Scenario(name="config", horizon_s=1.0, config=config).to_dict()["config"],
        "workload": {"prompts": [dataclasses.asdict(p) for p in prompts]},
        "control": {"snapshots": [dataclasses.asdict(s) for s in snapshots],
                    "weight_syncs": [dataclasses.asdict(w) for w in syncs]},
        "faults": _faults(data, ck_index, silences, notes),
    }
    _recorded_extras(recorded, scenario_dict, data, notes)
    window = None
    if incident_id is not None:
        window = _window(store, run_id, incident_id, pad_s, data, scenario_dict, notes)
    try:
        scenario = Scenario.from_dict(scenario_dict)
    except ScenarioError as exc:
        raise ExtractionError(f"run {run_id} does not make a valid scenario: {exc}") from None
    return Extraction(scenario=scenario, report=ExtractionReport(
        run_id=run_id, source=source, incident_id=incident_id, window=window,
        inferred=tuple(notes.inferred), defaulted=tuple(notes.defaulted),
        missing=tuple(notes.missing), dialect=dialect))


def _workload_without_rl(store: RunStore, run_id: str, config: Config, notes: _Notes
                         ) -> tuple[list[Prompt], str, Config]:
    """A run with no RL side: Gym's rollouts where it has them, else its LLM client's calls."""
    origin = origin_ns(store, run_id)
    workload = gym_workload(store, run_id, origin, notes.add)
    dialect = "gym"
    if workload is None:
        workload, dialect = call_workload(store, run_id, origin, notes.add), "llm"
    if workload is None:
        raise ExtractionError(f"run {run_id} has neither rl.rollout.prompt nor gym.rollout "
                              f"spans, nor model calls: no workload to replay")
    rows = workload.rows_per_prompt
    config = dataclasses.replace(config, rollout=dataclasses.replace(
        config.rollout, num_generations_per_prompt=rows))
    whose = "the Gym rollouts per prompt" if dialect == "gym" else "one rollout per prompt"
    notes.add("inferred", "config.rollout.num_generations_per_prompt", f"{rows}, {whose}")
    notes.defaulted = [_without(n, "num_generations_per_prompt")
                       if n.item == "config.rollout" else n for n in notes.defaulted]
    return workload.prompts, dialect, config


def _without(note: ExtractionNote, name: str) -> ExtractionNote:
    """A 'not recorded, the model's defaults: a, b, c' note without one of its names."""
    head, sep, names = note.detail.partition(": ")
    kept = [n for n in names.split(", ") if n != name]
    return (ExtractionNote(provenance=note.provenance, item=note.item,
                           detail=head + sep + ", ".join(kept)) if sep else note)


def _the_run(store: RunStore, run_id: str | None, incident_id: str | None = None) -> str:
    """The run named, else the store's only run, else the one run holding ``incident_id``."""
    if run_id is not None:
        require_run(store, run_id)
        return run_id
    runs = store.run_ids()
    if len(runs) == 1:
        return runs[0]
    if incident_id is not None:
        holding = [r[0] for r in store.query(
            "SELECT DISTINCT run_id FROM incidents WHERE incident_id = ? ORDER BY run_id",
            [incident_id])]
        if len(holding) == 1:
            return holding[0]
        if not holding:
            raise ExtractionError(f"no run of {store.path} has incident {incident_id!r} "
                                  f"(runs: {', '.join(runs) or 'none'})")
        runs = holding
    which = " with that incident" if incident_id is not None else ""
    raise ExtractionError(f"{store.path} holds {len(runs)} runs{which} ({', '.join(runs)}); "
                          f"name one with --run-id (run_id in Python)")


# -- config -------------------------------------------------------------------------------------
def _config(recorded: Mapping[str, Any], notes: _Notes) -> Config:
    sections: dict[str, dict[str, Any]] = {}
    used: set[str] = {"scenario_version", "control", "faults", "fixes"}
    for f in dataclasses.fields(Config):
        block = recorded.get(f.name)
        if isinstance(block, Mapping):
            used.add(f.name)
            sections[f.name] = dict(block)
    for key, (section, name) in FLAT_KEYS.items():
        if key in recorded and name not in sections.get(section, {}):
            used.add(key)
            sections.setdefault(section, {})[name] = recorded[key]
    for f in dataclasses.fields(Config):
        known = {g.name for g in dataclasses.fields(f.default_factory())}  # type: ignore[misc]
        block = sections.get(f.name, {})
        for key in sorted(set(block) - known):
            notes.add("missing", f"config.{f.name}.{key}",
                      f"recorded value {block[key]!r} has no place in the scenario model")
            del block[key]
        if block:
            notes.add("inferred", f"config.{f.name}",
                      f"from runs.config: {', '.join(sorted(block))}")
        unset = sorted(known - set(block))
        if unset:
            notes.add("defaulted", f"config.{f.name}",
                      f"not recorded, the model's defaults: {', '.join(unset)}")
    for key in sorted(set(recorded) - used):
        notes.add("missing", f"config.{key}", "recorded, but the scenario model has no such key")
    try:
        return Scenario.from_dict({"name": "config", "horizon_s": 1.0,
                                   "config": sections}).config
    except ScenarioError as exc:
        raise ExtractionError(f"runs.config does not fit the scenario model: {exc}") from None


def _recorded_document(source: str, name: str | None, seed: int | None,
                       metadata: Mapping[str, Any], notes: _Notes) -> Scenario | None:
    """The scenario document a replay ran from: recorded in metadata, else a built-in name."""
    doc = metadata.get(SCENARIO_DOCUMENT_KEY)
    if isinstance(doc, Mapping):
        try:
            return Scenario.from_dict(doc)
        except ScenarioError as exc:
            notes.add("missing", "workload.turns", f"the recorded scenario document is "
                      f"invalid ({exc})")
            return None
    if source != RunSource.REPLAY.value or not name:
        return None
    try:
        return scenarios.get(name).with_seed(int(seed or 0))
    except UnknownScenarioError:
        return None


def _horizon(metadata: Mapping[str, Any], data: _RunData, notes: _Notes) -> float:
    recorded = metadata.get("horizon_s")
    if isinstance(recorded, int | float) and recorded > 0:
        notes.add("inferred", "horizon_s", f"{recorded:g} s, from runs.metadata")
        return float(recorded)
    horizon = float(max(1, math.ceil(data.last_s)))
    notes.add("inferred", "horizon_s", f"{horizon:g} s, the end of the run's last span")
    return horizon


# -- workload -----------------------------------------------------------------------------------
def _first_runs(data: _RunData) -> dict[tuple[int, int], _Span]:
    """The first /run of each (prompt, row): the execution whose timings describe the row."""
    first: dict[tuple[int, int], _Span] = {}
    for s in data.spans[SpanName.AGENT_EXECUTION]:
        row = s.attrs.get(Attr.ROW_IDX)
        if s.prompt_idx is None or row is None:
            continue
        first.setdefault((int(s.prompt_idx), int(row)), s)
    return first


def _prompts(data: _RunData, config: Config, document: Scenario | None,
             notes: _Notes) -> list[Prompt]:
    arrivals: dict[int, float] = {}
    for s in data.spans[SpanName.RL_PROMPT]:
        if s.prompt_idx is not None:
            arrivals.setdefault(int(s.prompt_idx), round(s.start, 6))
    n_rows = config.rollout.num_generations_per_prompt
    first = _first_runs(data)
    calls = _model_calls(data)
    recorded = {p.idx: p for p in document.prompts()} if document is not None else {}
    from_calls = from_document = spanned = disagree = 0
    prompts = []
    for idx, arrival in sorted(arrivals.items()):
        rows = []
        for r in range(n_rows):
            run = first.get((idx, r))
            row = _row_from_calls(run, calls, data) if run is not None else None
            if row is not None:
                from_calls += 1
            elif idx in recorded and r < len(recorded[idx].rows):
                row = recorded[idx].rows[r]
                from_document += 1
                disagree += run is not None and not _agrees(row, run, data)
            else:
                row = _row_spanning(run, data)
                spanned += 1
            rows.append(row)
        prompts.append(Prompt(idx=idx, arrival_s=arrival, rows=tuple(rows)))
    notes.add("inferred", "workload.prompts",
              f"{len(prompts)} prompt(s), arrivals from rl.rollout.prompt spans; "
              f"{n_rows} row(s) each (num_generations_per_prompt)")
    if from_calls:
        notes.add("inferred", "workload.turns",
                  f"{from_calls} row(s) from their policy model-call spans")
    if from_document:
        notes.add("defaulted", "workload.turns",
                  f"{from_document} row(s): no model-call spans in the run; turn timings and "
                  f"token counts from the recorded scenario document '{document.name}'")
    if disagree:
        notes.add("missing", "workload.turns",
                  f"{disagree} row(s) whose observed first /run does not match the recorded "
                  f"turns; the recorded turns are used")
    if spanned:
        notes.add("missing", "workload.turns",
                  f"{spanned} row(s) without model-call spans or a recorded document: one turn "
                  f"spanning the observed active time, no tool steps, no token counts")
    return prompts


def _model_calls(data: _RunData) -> dict[str, list[_Span]]:
    by_parent: dict[str, list[_Span]] = {}
    for name in MODEL_CALL_SPANS:
        for s in data.spans[name]:
            if s.parent is not None and s.end is not None:
                by_parent.setdefault(s.parent, []).append(s)
    return by_parent


def _row_from_calls(run: _Span, calls: Mapping[str, list[_Span]], data: _RunData) -> Row | None:
    # model calls hang under the /run's gym.rollout span or the execution span itself
    mine = list(calls.get(run.span_id, ()))
    for s in data.spans.get(SpanName.GYM_ROLLOUT, ()):
        if s.parent == run.span_id:
            mine.extend(calls.get(s.span_id, ()))
    # only a clean /run describes its row: a failed one, or one whose calls failed and were
    # retried, shows the fault's consequences rather than the row's own turns
    if not mine or run.end is None or run.status == "ERROR" or any(
            c.status == "ERROR" for c in mine):
        return None
    mine.sort(key=lambda s: s.start)
    started = {e.attrs.get(Attr.MODEL_CALL_ID): e.t
               for e in data.events[EventName.MODEL_RESPONSE_STARTED]}
    end = run.end if run.end is not None else mine[-1].end
    turns = []
    for i, call in enumerate(mine):
        nxt = mine[i + 1].start if i + 1 < len(mine) else end
        model_s = round(call.end - call.start, 6)
        first_chunk = started.get(call.attrs.get(Attr.MODEL_CALL_ID))
        turns.append(Turn(
            model_s=model_s, tool_s=round(max(0.0, nxt - call.end), 6),
            streaming=first_chunk is not None,
            first_chunk_s=min(model_s, round(first_chunk - call.start, 6)) if first_chunk else 0.0,
            input_tokens=int(call.attrs.get(Attr.TOKENS_IN) or 0),
            output_tokens=int(call.attrs.get(Attr.TOKENS_OUT) or 0)))
    return Row(turns=tuple(turns), setup_s=round(max(0.0, mine[0].start - run.start), 6))


def _parked_s(run: _Span, data: _RunData) -> float:
    total = 0.0
    for p in data.spans[SpanName.AGENT_PARKED]:
        if p.parent == run.span_id:
            total += (p.end if p.end is not None else data.last_s) - p.start
    return total


def _agrees(row: Row, run: _Span, data: _RunData) -> bool:
    """A /run that completed unparked and unharmed must take exactly the recorded time."""
    if run.end is None or run.status == "ERROR" or _parked_s(run, data) > 0:
        return True  # nothing to check it against
    work = row.setup_s + sum(t.model_s + t.tool_s for t in row.turns)
    return math.isclose(run.end - run.start, work, abs_tol=1e-6)


def _row_spanning(run: _Span | None, data: _RunData) -> Row:
    if run is None:
        return Row(turns=(Turn(model_s=0.0),))
    end = run.end if run.end is not None else data.last_s
    return Row(turns=(Turn(model_s=round(max(0.0, end - run.start - _parked_s(run, data)), 6)),))


# -- control ------------------------------------------------------------------------------------
def _snapshots(data: _RunData, horizon: float, notes: _Notes
               ) -> tuple[list[SnapshotAttempt], list[ControllerSilence], dict[str, int]]:
    commits: dict[str, _Span] = {}
    for s in data.spans[SpanName.CK_COORDINATE_COMMIT]:
        if s.checkpoint_id is not None:
            commits.setdefault(s.checkpoint_id, s)
    prepared: dict[str, float] = {}
    for s in data.spans[SpanName.CK_COORDINATE_PREPARE]:
        if (s.checkpoint_id is not None and s.end is not None
                and s.attrs.get(Attr.CK_PREPARED) is True):
            prepared.setdefault(s.checkpoint_id, s.end)
    out, silences, index, never = [], [], {}, 0
    for i, s in enumerate(data.spans[SpanName.RL_SNAPSHOT], 1):
        ck = s.checkpoint_id or ""
        index[ck] = i
        commit = commits.get(ck)
        if commit is not None and commit.end is not None:
            commit_s = round(commit.end - commit.start, 6)
        else:
            commit_s, never = _DEFAULT_COMMIT_S, never + 1
        out.append(SnapshotAttempt(at_s=round(s.start, 6), commit_s=commit_s))
        if ck in prepared:
            commit_at = commit.start if commit is not None else horizon
            if commit_at - prepared[ck] > 1e-9:
                silences.append(ControllerSilence(snapshot_index=i,
                                                  duration_s=round(commit_at - prepared[ck], 6)))
    notes.add("inferred", "control.snapshots",
              f"{len(out)} attempt(s) from rl.rollout_snapshot spans, commit durations from "
              f"the first coordinated commit")
    if never:
        notes.add("defaulted", "control.snapshots.commit_s",
                  f"{never} attempt(s) never committed; commit_s {_DEFAULT_COMMIT_S:g} s")
    notes.add("missing", "control.snapshots",
              "attempts the controller skipped (one came due while another ran) leave no span")
    return out, silences, index


def _weight_syncs(data: _RunData, notes: _Notes) -> list[WeightSync]:
    suspends = {round(e.t, 6) for e in data.events[EventName.DEADLINE_SUSPEND]
                if e.attrs.get(Attr.DEADLINE_HOLDER) == DeadlineHolder.COLOCATED_TRAINING.value}
    out, guessed = [], 0
    for s in data.spans[SpanName.RL_WEIGHT_SYNC]:
        end = s.end if s.end is not None else data.last_s
        if round(s.start, 6) in suspends:
            colocated = True
        elif any(d.start <= s.start and (d.end is None or d.end > s.start)
                 for d in data.spans[SpanName.RL_DEADLINE]):
            colocated = False  # deadlines were live and none was suspended
        else:
            colocated, guessed = True, guessed + 1
        out.append(WeightSync(at_s=round(s.start, 6), duration_s=round(end - s.start, 6),
                              colocated=colocated))
    if out:
        notes.add("inferred", "control.weight_syncs", f"{len(out)} from rl.weight_sync spans")
    if guessed:
        notes.add("defaulted", "control.weight_syncs.colocated",
                  f"{guessed} sync(s) with no live deadline to show it; colocated")
    return out


def _nominal_sync_durations(recorded: Mapping[str, Any], syncs: list[WeightSync],
                            notes: _Notes) -> None:
    """An observed sync can outlast its nominal duration because of a fault the engine models
    (a refit waiting on a dead shard); replaying the observed length would count that twice.
    Where the run recorded its schedule and the starts agree, the recorded length is used."""
    control = recorded.get("control")
    planned = control.get("weight_syncs") if isinstance(control, Mapping) else None
    if not isinstance(planned, list) or len(planned) != len(syncs):
        return
    for i, (seen, plan) in enumerate(zip(syncs, planned, strict=True)):
        if not isinstance(plan, Mapping) or plan.get("at_s") != seen.at_s:
            return
        nominal = float(plan.get("duration_s", seen.duration_s))
        if abs(nominal - seen.duration_s) > 1e-6:
            notes.add("inferred", f"control.weight_syncs[{i}].duration_s",
                      f"observed {seen.duration_s:g} s; the recorded {nominal:g} s is used, the "
                      f"rest being the modelled consequence of a fault")
            syncs[i] = dataclasses.replace(seen, duration_s=nominal)


# -- faults -------------------------------------------------------------------------------------
def _faults(data: _RunData, ck_index: Mapping[str, int], silences: list[ControllerSilence],
            notes: _Notes) -> dict[str, Any]:
    first = _first_runs(data)
    firsts = {s.span_id for s in first.values()}
    received = {(e.rollout_id, round(e.t, 6)) for e in data.events[EventName.ROW_RECEIVED]}
    # retire-then-adopt retires a lost row's attempt at the instant its stream ended short and
    # receives the adopted reply then: at that instant a lost reply and a delivered one look
    # alike, and only the retire's episode count tells how many there were
    retired = {round(s.start, 6): int(s.attrs.get(Attr.CK_EPISODES) or 0)
               for s in data.spans[SpanName.CK_COORDINATE_RETIRE]}
    tries = {(s.prompt_idx, s.attrs.get(Attr.RL_ATTEMPT)): s
             for s in data.spans[SpanName.RL_ATTEMPT]}
    runs = {s.span_id: s for s in data.spans[SpanName.AGENT_EXECUTION]}
    lost: list[RowRef] = []
    adopted: dict[float, list[RowRef]] = {}
    for e in data.events[EventName.AGENT_COMPLETED]:
        run = runs.get(e.span_id)
        if run is None or run.span_id not in firsts:
            continue
        attempt = run.attrs.get(Attr.RL_ATTEMPT)
        t = tries.get((run.prompt_idx, attempt))
        if t is None or (t.end is not None and t.end < e.t - 1e-9):
            continue  # RL had stopped reading this try: an unread reply, not a lost one
        ref = RowRef(prompt_idx=int(run.prompt_idx), row_idx=int(run.attrs[Attr.ROW_IDX]),
                     rl_attempt=int(attempt or 0))
        if (run.rollout_id, round(e.t, 6)) not in received:
            lost.append(ref)
        elif round(e.t, 6) in retired:
            adopted.setdefault(round(e.t, 6), []).append(ref)
    for at, refs in sorted(adopted.items()):
        if len(refs) == retired[at]:
            lost.extend(refs)
        else:
            notes.add("missing", "faults.lost_replies",
                      f"at {at:g} s {retired[at]} of {len(refs)} rows completing together were "
                      f"retired and adopted; which ones lost their reply cannot be told, so none "
                      f"is replayed as lost")
    worker_lost_at = {round(e.t, 6) for e in data.events[EventName.CK_WORKER_LOST]}
    lost_workers = sorted({ck_index[e.checkpoint_id] for e in data.events[EventName.CK_WORKER_LOST]
                           if e.checkpoint_id in ck_index})
    closed = [(s.start, s.end if s.end is not None else data.last_s)
              for s in data.spans[SpanName.RL_SNAPSHOT]]
    failures = []
    for run in (runs[sid] for sid in firsts):
        if (run.status != "ERROR" or run.end is None or round(run.end, 6) in worker_lost_at
                or INJECTED_FAULT not in (run.message or "")):
            continue  # failures that follow from other faults (a dead shard, a lost worker)
        match = _HTTP_STATUS.search(run.message or "")
        status = int(match.group(1)) if match else 500
        if status == 409 and any(a <= run.end <= b for a, b in closed):
            continue  # refused at closed admission: the gate's answer, not an injected fault
        failures.append(RowFailure(
            row=RowRef(prompt_idx=int(run.prompt_idx), row_idx=int(run.attrs[Attr.ROW_IDX]),
                       rl_attempt=int(run.attrs.get(Attr.RL_ATTEMPT) or 0)),
            after_s=round(run.end - run.start, 6), http_status=status))
    notes.add("inferred", "faults",
              f"{len(lost)} lost reply(ies), {len(failures)} row failure(s), "
              f"{len(lost_workers)} worker(s) lost in a commit, {len(silences)} controller "
              f"silence(s), from the run's spans")
    return {"lost_replies": [dataclasses.asdict(r) for r in lost],
            "row_failures": [dataclasses.asdict(f) for f in failures],
            "worker_lost_in_commit": lost_workers,
            "controller_silences": [dataclasses.asdict(s) for s in silences]}


def _recorded_extras(recorded: Mapping[str, Any], doc: dict[str, Any], data: _RunData,
                     notes: _Notes) -> None:
    """What the spans cannot state in the scenario model's terms, from the run's own record:
    fault kinds other than the four read from spans, and the fixes the system already had."""
    observed = set(doc["faults"])
    faults = recorded.get("faults")
    fault_fields = {f.name for f in dataclasses.fields(Faults)}
    if isinstance(faults, Mapping):
        taken = sorted(k for k, v in faults.items()
                       if k in fault_fields and k not in observed and v)
        for key in taken:
            doc["faults"][key] = faults[key]
        if taken:
            notes.add("defaulted", "faults",
                      f"{', '.join(taken)}: from the fault list the run recorded (runs.config), "
                      f"not from its spans")
    else:
        kinds = sorted({str(s.attrs.get(Attr.FAULT_KIND, "unknown"))
                        for s in data.spans[SpanName.FAULT]})
        if kinds:
            notes.add("missing", "faults", f"fault span(s) of kind {', '.join(kinds)}: the run "
                      f"recorded no fault list to state them in the scenario model's terms; "
                      f"not replayed")
    scenario_fields = {f.name for f in dataclasses.fields(Scenario)}
    fixes = recorded.get("fixes")
    if "fixes" in scenario_fields and fixes:
        doc["fixes"] = list(fixes)
        notes.add("inferred", "fixes", f"{', '.join(fixes)}, from runs.config")


# -- a window around one incident ---------------------------------------------------------------
def _window(store: RunStore, run_id: str, incident_id: str, pad_s: float | None,
            data: _RunData, doc: dict[str, Any], notes: _Notes) -> tuple[float, float]:
    origin = origin_ns(store, run_id)
    rows = store.query("SELECT start_ns, end_ns, caused_by, kind FROM incidents "
                       "WHERE run_id = ? AND incident_id = ?", [run_id, incident_id])
    if not rows:
        known = [r[0] for r in store.query(
            "SELECT incident_id FROM incidents WHERE run_id = ? ORDER BY start_ns", [run_id])]
        raise ExtractionError(f"run {run_id} has no incident {incident_id!r}; incidents: "
                              f"{', '.join(known) or 'none'}")
    start_ns, end_ns, caused_by, kind = rows[0]
    t0 = (start_ns - origin) / 1e9
    if caused_by:  # begin at the cause: the stranded completion's deadline, say
        cause = store.query("SELECT start_ns FROM incidents WHERE run_id = ? AND incident_id = ?",
                            [run_id, caused_by])
        if cause:
            t0 = min(t0, (cause[0][0] - origin) / 1e9)
    t1 = (end_ns - origin) / 1e9 if end_ns is not None else t0
    cfg = doc["config"]
    incidents = [(k, (s - origin) / 1e9, _established_s(k, s, e, origin, cfg))
                 for k, s, e in store.query(
                     "SELECT kind, start_ns, end_ns FROM incidents WHERE run_id = ?", [run_id])]
    t1 = max(t1, _established_s(kind, start_ns, end_ns, origin, cfg))
    if pad_s is None:
        pad_s = max(cfg["checkpoint"]["prepare_timeout_s"],
                    cfg["rollout"]["rollout_timeout_s"] or 0.0)
    ws = max(0.0, t0 - pad_s)
    we = min(doc["horizon_s"], t1 + pad_s)
    ends = {s.prompt_idx: (s.end if s.end is not None else doc["horizon_s"])
            for s in data.spans[SpanName.RL_PROMPT]}
    prompts = doc["workload"]["prompts"]
    for p in prompts:  # a prompt still running at the window's start brings its history
        if p["arrival_s"] < ws < ends.get(p["idx"], doc["horizon_s"]):
            ws = p["arrival_s"]
    snaps = doc["control"]["snapshots"]
    snap_ends = [s.end if s.end is not None else doc["horizon_s"]
                 for s in data.spans[SpanName.RL_SNAPSHOT]]
    grown: list[str] = []
    while True:
        # an incident that begins in the window is in it until it is established (a stall
        # once stall_timeout_s has passed), or the replay could not show it
        for kind, s, est in incidents:
            if ws <= s <= we < min(est, doc["horizon_s"]):
                we = min(est, doc["horizon_s"])
                grown.append(f"{kind} at {s:g} s")
        kept = [p for p in prompts if p["arrival_s"] <= we and ends.get(p["idx"], we) >= ws]
        keep_snap = [i for i, s in enumerate(snaps, 1)
                     if s["at_s"] <= we and snap_ends[i - 1] >= ws]
        # a kept attempt runs to its end, or its outcome would differ from the capture's
        end = max([we, *(min(snap_ends[i - 1], doc["horizon_s"]) for i in keep_snap)])
        if end == we and not any(ws <= s <= we < min(est, doc["horizon_s"])
                                 for _, s, est in incidents):
            break
        we = end
    if grown:
        notes.add("inferred", "window", f"ends at {we:g} s, when the incident(s) beginning in "
                  f"it are established: {', '.join(dict.fromkeys(grown))}")
    renumber = {old: new for new, old in enumerate(keep_snap, 1)}
    idxs = {p["idx"] for p in kept}
    syncs = doc["control"]["weight_syncs"]
    keep_sync = [i for i, w in enumerate(syncs, 1)
                 if w["at_s"] <= we and w["at_s"] + w["duration_s"] >= ws]
    sync_renumber = {old: new for new, old in enumerate(keep_sync, 1)}
    doc["faults"], left_out = _window_faults(doc["faults"], ws, we, idxs, renumber,
                                             sync_renumber, notes)
    doc["control"] = {"snapshots": [snaps[i - 1] for i in keep_snap],
                      "weight_syncs": [syncs[i - 1] for i in keep_sync]}
    doc["workload"]["prompts"] = kept
    doc["horizon_s"] = we
    training = cfg["training"]
    steps = min(training["max_num_steps"], len(kept) // training["prompts_per_step"])
    if steps != training["max_num_steps"]:
        notes.add("inferred", "config.training.max_num_steps",
                  f"{steps}: what the {len(kept)} prompt(s) in the window can train (the run "
                  f"recorded {training['max_num_steps']}), so the watchdog sees the same work left")
        training["max_num_steps"] = steps
    notes.add("inferred", "window",
              f"{ws:g}-{we:g} s: incident {incident_id} at {t0:g}-{t1:g} s padded by {pad_s:g} s")
    dropped = {"prompt(s)": len(prompts) - len(kept),
               "snapshot attempt(s)": len(snaps) - len(keep_snap),
               "weight sync(s)": len(syncs) - len(keep_sync), **left_out}
    said = [f"{n} {what}" for what, n in dropped.items() if n]
    notes.add("inferred", "window", "left out, acting only outside it: "
              + (", ".join(said) if said else "nothing"))
    return (ws, we)


def _established_s(kind: str, start_ns: int, end_ns: int | None, origin: int,
                   cfg: Mapping[str, Any]) -> float:
    """When an incident is whole, on the run's clock: a stall once its stretch outlasts
    stall_timeout_s (and the watchdog's next tick), any other at its end (its start if it has
    none)."""
    start = (start_ns - origin) / 1e9
    if kind == "stall":
        watchdog = cfg["watchdog"]
        return start + watchdog["stall_timeout_s"] + watchdog["interval_s"]
    return (end_ns - origin) / 1e9 if end_ns is not None else start


# fault kinds that act from an instant on, and stay acting (a killed shard stays dead)
_TIMED_FAULTS = ("shard_kills", "shard_wedges", "slow_shards", "router_restarts",
                 "gym_subprocess_deaths")


def _window_faults(faults: Mapping[str, Any], ws: float, we: float, idxs: set[int],
                   snapshots: Mapping[int, int], syncs: Mapping[int, int], notes: _Notes
                   ) -> tuple[dict[str, Any], dict[str, int]]:
    """Every fault kind the run recorded, as much of it as acts in the window ``ws``-``we``:
    row faults of the kept prompts, commit and silence faults of the kept snapshots (renumbered),
    refit misses of the kept syncs (renumbered), and every timed fault that began before the
    window ended (a shard killed before the window is still dead in it). Returns the faults and,
    per kind, how many were left out."""
    out = dict(faults)  # a kind this function does not know is kept whole, never dropped
    out["lost_replies"] = [r for r in faults.get("lost_replies", ()) if r["prompt_idx"] in idxs]
    out["row_failures"] = [f for f in faults.get("row_failures", ())
                           if f["row"]["prompt_idx"] in idxs]
    out["worker_lost_in_commit"] = [snapshots[k] for k in faults.get("worker_lost_in_commit", ())
                                    if k in snapshots]
    out["controller_silences"] = [{**c, "snapshot_index": snapshots[c["snapshot_index"]]}
                                  for c in faults.get("controller_silences", ())
                                  if c["snapshot_index"] in snapshots]
    if "refit_misses" in faults:
        out["refit_misses"] = [{**m, "sync_index": syncs[m["sync_index"]]}
                               for m in faults["refit_misses"] if m["sync_index"] in syncs]
    for kind in _TIMED_FAULTS:
        if kind not in faults:
            continue
        kept = []
        for f in faults[kind]:
            if f["at_s"] > we:
                continue
            if f["at_s"] < ws and f.get("state", "any") != "any":
                # the state it waited for (a generation in flight) came before the window, on
                # prompts the window leaves out: the shard is dead when the window starts
                notes.add("inferred", f"faults.{kind}",
                          f"shard {f['shard']} killed at {f['at_s']:g} s while {f['state']}, "
                          f"before the window: replayed as killed then in any state")
                f = {**f, "state": "any"}
            kept.append(f)
        out[kind] = kept
    left_out = {kind.replace("_", " "): len(faults[kind]) - len(out[kind])
                for kind in faults if isinstance(faults[kind], list)}
    return out, left_out
