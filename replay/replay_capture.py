"""Replay captured runs against participant code, Temporal-style: one iterator, three calls.

``iter_replays`` (streaming), ``replay_runs`` (plural) and ``replay_run`` (singular) share one
generator, and take how to replay as one ``ReplayOptions`` (participants, where their upstream
code is, the determinism and reference checks, a real backend and its speed), handed down whole.
Each capture (a run in a store, optionally a window around one incident, or a golden capture
file) becomes a scenario, is replayed into an output store as a new run, and comes back as a
frozen ``ReplayRunResult``: the incidents that reproduced, vanished or appeared, outcome counts
before and after, timing deltas, and the divergence found (``Divergence`` records). A replay
that could not run (a plug-in that does not fit, say) is a result with a ``ReplayFailure`` set,
not an exception. Raising is the caller's choice: ``fail_on_divergence`` (on by default for the
singular call, off for the plural one, as in Temporal) raises ``ReplayDivergenceError`` carrying
the result.

Divergence is judged where the capture is the expectation: with the reference models and no
variant, the replay must reproduce the capture's incidents and outcome counts. Determinism is
judged always: each replay is run a second time with the same seed and the two runs' spans must
hash alike, so a participant that reads the wall clock or an unseeded random source is caught.
The exception is a replay on a real generation backend (``ReplayOptions.backend``): it runs
in wall-clock time, its timings are the engine's, and the run records them instead.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolloutscope.replay import compare
from rolloutscope.replay.compare import in_window
from rolloutscope.replay.backends.base import GenerationBackend
from rolloutscope.replay.divergence import Divergence, ReplayFailure
from rolloutscope.replay.errors import ReplayError
from rolloutscope.replay.extract import SCENARIO_DOCUMENT_KEY, ExtractionReport, extract_scenario
from rolloutscope.replay.plugins import (
    ENGINE_SLOT,
    Factory,
    ParticipantSpec,
    PluginKind,
    participant_factories,
)
from rolloutscope.replay.real.span_diff import first_difference
from rolloutscope.replay.real.records import ImplementationRecord, ReferenceComparison
from rolloutscope.replay.run_scenario import replay, replay_into_store, wall_clock_driver
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.telemetry import VIRTUAL_EPOCH_NS
from rolloutscope.replay.variants import Variant, ordered, parse_variants
from rolloutscope.store import RunStore, run_reads
from rolloutscope.store.run_reads import IncidentKey, OutcomeCounts
from rolloutscope.vocabulary import RunSource

GOLDEN_FORMAT = "rolloutscope-golden-capture"
NO_VERDICT_TAIL = "no verdict"
NO_VERDICT = f"not reproduced as captured: {NO_VERDICT_TAIL}"
GOLDEN_VERSION = 1


class ReplayDivergenceError(ReplayError):
    """The replay did not reproduce its capture; ``result`` says how."""

    def __init__(self, result: ReplayRunResult) -> None:
        self.result = result
        super().__init__(f"replay of {result.capture} diverged: " + "; ".join(result.divergence))


class GoldenCaptureError(ReplayError):
    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(f"golden capture {path}: {detail}")


# -- captures -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Capture:
    """What a replay is measured against: a scenario and what the captured run showed."""

    label: str
    scenario: Scenario
    incidents: tuple[IncidentKey, ...]  # a sorted multiset
    outcomes: OutcomeCounts
    timings: Mapping[str, float | None] = field(default_factory=dict)
    store_path: Path | None = None
    run_id: str | None = None
    variants: tuple[str, ...] = ()  # the variants the captured run itself had on
    extraction: ExtractionReport | None = None
    # a window's capture counts outcomes over the whole run: only its incidents are compared
    judge_outcomes: bool = True

    @property
    def window(self) -> tuple[float, float] | None:
        """The window (capture-clock seconds) a capture of one incident covers; None: all."""
        return None if self.extraction is None else self.extraction.window


def capture_from_store(path: str | Path | RunStore, run_id: str | None = None, *,
                       incident_id: str | None = None, pad_s: float | None = None) -> Capture:
    """A capture of a run in a store file, or in a store already open (a collector's, which
    holds its file: DuckDB admits no second connection to it)."""
    with ExitStack() as stack:
        store = path if isinstance(path, RunStore) else \
            stack.enter_context(RunStore(path, read_only=True))
        path = store.path
        extraction = extract_scenario(store, run_id, incident_id=incident_id, pad_s=pad_s)
        rid = extraction.report.run_id
        origin = run_reads.origin_ns(store, rid)
        incidents = run_reads.incident_frame(store, rid, origin=origin)
        outcomes = run_reads.outcome_counts(store, rid)
        timings = run_reads.timing_summary(store, rid, origin=origin)
        variants = store.query("SELECT variants FROM runs WHERE run_id = ?", [rid])
    keys = tuple(sorted(in_window(incidents, extraction.report.window).key))
    recorded = json.loads(variants[0][0]) if variants and variants[0][0] else []
    label = f"{Path(path).name}:{rid}" + (f"@{incident_id}" if incident_id else "")
    return Capture(label=label, scenario=extraction.scenario, incidents=keys, outcomes=outcomes,
                   timings=timings, store_path=Path(path), run_id=rid,
                   variants=tuple(recorded), extraction=extraction.report,
                   # a Gym-side-only or LLM-client-only capture has no RL outcomes for the
                   # replay's to match
                   judge_outcomes=(extraction.report.window is None
                                   and extraction.report.dialect == "rl"))


def capture_from_golden(path: str | Path) -> Capture:
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise GoldenCaptureError(str(p), str(exc)) from None
    if not isinstance(doc, dict) or doc.get("format") != GOLDEN_FORMAT:
        raise GoldenCaptureError(str(p), f"not a {GOLDEN_FORMAT} document")
    if doc.get("version") != GOLDEN_VERSION:
        raise GoldenCaptureError(str(p), f"version {doc.get('version')!r} is not "
                                 f"{GOLDEN_VERSION}")
    expected = doc.get("expected", {})
    try:
        return Capture(
            label=p.name, scenario=Scenario.from_dict(doc["scenario"]),
            incidents=tuple(sorted((str(k), str(s)) for k, s in expected.get("incidents", []))),
            outcomes=OutcomeCounts.from_dict(expected.get("outcomes", {})),
            timings=expected.get("timings", {}), run_id=doc.get("run_id"),
            variants=tuple(doc.get("variants", ())))
    except (KeyError, ValueError, TypeError, ReplayError) as exc:
        raise GoldenCaptureError(str(p), str(exc)) from None


def golden_document(capture: Capture) -> dict[str, Any]:
    """The JSON a golden capture file holds (``capture_from_golden`` reads it back)."""
    return {"format": GOLDEN_FORMAT, "version": GOLDEN_VERSION, "run_id": capture.run_id,
            "variants": list(capture.variants), "scenario": capture.scenario.to_dict(),
            "expected": {"incidents": [list(k) for k in capture.incidents],
                         "outcomes": capture.outcomes.as_dict(),
                         "timings": dict(capture.timings)}}


# -- results ------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TimingDelta:
    name: str
    captured: float | None
    replayed: float | None

    @property
    def delta(self) -> float | None:
        if self.captured is None or self.replayed is None:
            return None
        return round(self.replayed - self.captured, 6)


@dataclass(frozen=True, kw_only=True)
class ReplayRunResult:
    capture: str
    captured_run_id: str | None
    run_id: str  # the new run, in ``out``
    out: str
    variants: tuple[str, ...] = ()
    participants: tuple[str, ...] = ()
    reproduced: tuple[IncidentKey, ...] = ()
    vanished: tuple[IncidentKey, ...] = ()
    appeared: tuple[IncidentKey, ...] = ()
    outcomes_captured: OutcomeCounts = field(default_factory=OutcomeCounts)
    outcomes_replayed: OutcomeCounts = field(default_factory=OutcomeCounts)
    timing_deltas: tuple[TimingDelta, ...] = ()
    digest: str = ""
    divergences: tuple[Divergence, ...] = ()
    failure: ReplayFailure | None = None
    extraction: ExtractionReport | None = None
    generation: Mapping[str, Any] | None = None  # a real backend's summary (runner)
    # what ran in place of the reference models, and how the run compares with theirs
    implementations: tuple[ImplementationRecord, ...] = ()
    versus_reference: ReferenceComparison | None = None
    # a replay with variants the capture did not have is judged incident by incident against
    # the as-captured replay of the same scenario (window): a captured incident that replay
    # does not reproduce gets no verdict, nor does one only that replay has
    no_verdict: tuple[IncidentKey, ...] = ()
    as_captured_only: tuple[IncidentKey, ...] = ()
    window: tuple[float, float] | None = None  # the capture's window; incidents outside it
    # are in no verdict
    # what the outcome counts and timings are compared with: "capture" (the captured run),
    # "as-captured" (the as-captured replay of the window: the capture's figures cover the
    # whole run) or "" (not compared: a window replayed as captured)
    figures_against: str = "capture"

    @property
    def comparison_valid(self) -> bool:
        """Whether every incident of the capture (in the window) has a verdict: the as-captured
        replay reproduced the capture's incidents exactly."""
        return not self.no_verdict and not self.as_captured_only

    @property
    def divergence(self) -> tuple[str, ...]:
        """Each divergence as the sentence a report prints."""
        return tuple(d.message for d in self.divergences)

    @property
    def error(self) -> str | None:
        """Why the replay could not run, as ``"Type: message"``; None when it ran."""
        return None if self.failure is None else str(self.failure)

    @property
    def diverged(self) -> bool:
        return bool(self.divergences)

    @property
    def ok(self) -> bool:
        return self.failure is None and not self.divergences

    def lines(self) -> list[str]:
        if self.error is not None:
            return [f"replay of {self.capture} failed: {self.error}"]
        out = [f"replay of {self.capture} -> run {self.run_id} in {self.out}"
               + (f" (variants: {', '.join(self.variants)})" if self.variants else "")
               + (f" (participants: {', '.join(self.participants)})" if self.participants
                  else "")]
        for record in self.implementations:
            out.append(f"  ran {record.line()}")
        if self.versus_reference is not None:
            out.extend(f"  versus the reference models: {line}"
                       for line in self.versus_reference.lines())
        if self.window is not None:
            out.append(f"  verdicts on the incidents starting in the window "
                       f"{self.window[0]:g}-{self.window[1]:g} s only")
        for label, keys in (("reproduced", self.reproduced), ("vanished", self.vanished),
                            ("appeared", self.appeared),
                            (NO_VERDICT, self.no_verdict),
                            (f"appeared in the as-captured replay, not in the capture: "
                             f"{NO_VERDICT_TAIL}", self.as_captured_only)):
            for kind, subject in keys:
                out.append(f"  incident {kind} ({subject}) {label}")
        if not self.figures_against:
            out.append("  outcome counts and timings not compared: the capture's cover the "
                       "whole run, this replay only the window")
        elif self.figures_against == "as-captured":
            out.append("  outcome counts and timings against the as-captured replay of the "
                       "window (the capture's cover the whole run):")
        if self.figures_against:
            for name, (a, b) in self.outcomes_captured.differences(
                    self.outcomes_replayed).items():
                out.append(f"  {name}: {a} -> {b}")
            for d in self.timing_deltas:
                if d.delta:
                    out.append(f"  {d.name}: {d.captured:g} s -> {d.replayed:g} s "
                               f"({d.delta:+g} s)")
        if self.generation is not None:
            out.extend("  " + line for line in compare.generation_lines(self.generation))
        out.extend(f"  DIVERGED: {reason}" for reason in self.divergence)
        if not self.comparison_valid:
            out.append(f"  NOT VALID: the as-captured replay does not reproduce the capture's "
                       f"incidents ({len(self.no_verdict)} not reproduced, "
                       f"{len(self.as_captured_only)} only in the replay); the variants' "
                       f"verdicts cover only the incidents it reproduced")
        return out


@dataclass(frozen=True)
class ReplayRunResults:
    results: tuple[ReplayRunResult, ...]

    @property
    def diverged(self) -> tuple[ReplayRunResult, ...]:
        return tuple(r for r in self.results if r.diverged)

    @property
    def failed(self) -> tuple[ReplayRunResult, ...]:
        return tuple(r for r in self.results if r.error is not None)


# -- the options of a replay ---------------------------------------------------------------------
BackendFactory = Callable[[], GenerationBackend]


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """How a replay runs, stated once: the three calls take one and hand it down as it is.

    ``participants``: the code under test, as ``KIND=SOURCE`` specs (``ParticipantSpec``) or a
    mapping of kind to factory; none: the reference models. ``participant_paths``: where the
    upstream code of ``nemo_rl``/``nemo_gym`` participants is (``{"nemo_rl": CHECKOUT}``; else
    the environment variables). ``check_determinism``: replay each capture a second time and
    compare the two runs' span digests. ``compare_reference``: with plugged participants, also
    replay the reference models and report where the runs part. ``backend``/``speed``: serve
    the model calls on a real engine (a factory of one) at ``speed``x wall-clock time; such a
    replay's timings are the engine's, so it is neither re-run nor compared with the reference.
    """

    participants: Sequence[ParticipantSpec | str] | Mapping[str, Factory] = ()
    participant_paths: Mapping[str, str] | None = None
    check_determinism: bool = True
    compare_reference: bool = True
    backend: BackendFactory | None = None
    speed: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.participants, Mapping):
            object.__setattr__(self, "participants", tuple(self.participants))

    @property
    def on_backend(self) -> bool:
        return self.backend is not None


@dataclass(frozen=True)
class _Plugged:
    """The options' participants as the engine takes them."""

    factories: Mapping[str, Factory]
    labels: tuple[str, ...]
    records: tuple[ImplementationRecord, ...] = ()

    @classmethod
    def of(cls, options: ReplayOptions) -> _Plugged:
        if isinstance(options.participants, Mapping):
            return cls(dict(options.participants), tuple(sorted(options.participants)))
        specs = [ParticipantSpec.parse(s) if isinstance(s, str) else s
                 for s in options.participants]
        plugged = participant_factories(specs, paths=options.participant_paths)
        return cls(dict(plugged.factories), plugged.labels, plugged.implementations)


# -- the one iterator ---------------------------------------------------------------------------
def iter_replays(captures: Iterable[Capture], *, out: RunStore | str | Path,
                 variants: Iterable[str] = (),
                 options: ReplayOptions | None = None) -> Iterator[ReplayRunResult]:
    """Replay each capture into ``out`` as a new run with ``variants`` on, yielding each result
    as it is ready. ``options``: how (``ReplayOptions``; none: the defaults)."""
    options = options or ReplayOptions()
    chosen = ordered(parse_variants(variants))
    plugged = _Plugged.of(options)
    with ExitStack() as stack:
        store = out if isinstance(out, RunStore) else stack.enter_context(RunStore(out))
        for capture in captures:
            yield _replay_one(capture, store, chosen, plugged, options)


def replay_runs(captures: Iterable[Capture], *, out: RunStore | str | Path,
                variants: Iterable[str] = (), options: ReplayOptions | None = None,
                fail_on_divergence: bool = False) -> ReplayRunResults:
    results = []
    for result in iter_replays(captures, out=out, variants=variants, options=options):
        if fail_on_divergence and result.diverged:
            raise ReplayDivergenceError(result)
        results.append(result)
    return ReplayRunResults(tuple(results))


def replay_run(capture: Capture, *, out: RunStore | str | Path, variants: Iterable[str] = (),
               options: ReplayOptions | None = None,
               fail_on_divergence: bool = True) -> ReplayRunResult:
    return replay_runs([capture], out=out, variants=variants, options=options,
                       fail_on_divergence=fail_on_divergence).results[0]


# -- one replay ---------------------------------------------------------------------------------
def _new_run_id(store: RunStore, capture: Capture, variants: tuple[str, ...]) -> str:
    base = f"{capture.run_id or Path(capture.label).stem}.replay" + (
        "+" + "+".join(variants) if variants else "")
    taken = set(store.run_ids())
    run_id, n = base, 1
    while run_id in taken:
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def _run(scenario: Scenario, store: RunStore, run_id: str, variants: tuple[str, ...],
         factories: Mapping[str, Factory],
         options: ReplayOptions | None = None) -> Mapping[str, Any] | None:
    """Replay into ``store``; each plugged kind goes to the engine's ``<kind>_factory``; with
    ``options`` naming a backend, on that engine. Returns the generation summary of a replay
    on a real backend."""
    kwargs: dict[str, Any] = {"variants": variants, "run_id": run_id}
    if options is not None and options.backend is not None:
        kwargs["backend"] = options.backend()
        kwargs["driver"] = wall_clock_driver(options.speed)
    accepted = inspect.signature(replay).parameters
    for kind, factory in factories.items():
        name = ENGINE_SLOT.get(PluginKind(kind), f"{kind}_factory") \
            if kind in PluginKind._value2member_map_ else f"{kind}_factory"
        if name not in accepted:
            offered = sorted(p[: -len("_factory")] for p in accepted if p.endswith("_factory"))
            raise ReplayError(f"the replay engine cannot take a plugged {kind} (it accepts: "
                              f"{', '.join(offered) or 'none'})")
        kwargs[name] = factory
    return replay_into_store(scenario, store, **kwargs).stats.get("generation")


def run_digest(store: RunStore, run_id: str) -> str:
    """A hash of a run's spans and events, independent of its run id and of write order."""
    h = hashlib.sha256()
    for row in store.query(
            "SELECT name, trace_id, span_id, parent_span_id, start_ns, end_ns, status_code, "
            "status_message, attributes FROM spans WHERE run_id = ? "
            "ORDER BY start_ns, span_id, name", [run_id]):
        h.update(repr(row).encode())
    for row in store.query(
            "SELECT span_id, name, ts_ns, attributes FROM all_events WHERE run_id = ? "
            "ORDER BY ts_ns, span_id, name, attributes", [run_id]):
        h.update(repr(row).encode())
    return h.hexdigest()[:16]


def _second_digest(scenario: Scenario, variants: tuple[str, ...],
                   factories: Mapping[str, Factory]) -> str:
    with tempfile.TemporaryDirectory(prefix="rolloutscope-determinism-") as tmp:
        with RunStore(Path(tmp) / "again.duckdb") as again:
            _run(scenario, again, "again", variants, factories)
            return run_digest(again, "again")


# the fix variants that change what each kind's reference model does: a plugged
# implementation that matches the reference models with one of them on has that fix
KIND_VARIANTS = {
    PluginKind.FLEET_HEALTH.value: ("separate-reported-failure-streak",),
    PluginKind.ROUTER.value: ("router-500-not-504",),
    PluginKind.DEADLINE.value: ("pause-deadlines-during-snapshot", "counted-deadline-holders"),
    PluginKind.DEADLINE_REGISTRY.value: ("pause-deadlines-during-snapshot",
                                         "counted-deadline-holders"),
    PluginKind.AGENT_PARTICIPANT.value: ("retire-then-adopt", "calls-wait-at-closed-admission"),
}


def _versus_reference(scenario: Scenario, store: RunStore, run_id: str,
                      variants: tuple[str, ...], digest: str,
                      incidents: Counter, kinds: Iterable[str]) -> ReferenceComparison:
    """Replay the reference models the same way; where do the runs part, and does one of the
    plugged kinds' fix variants, on the reference models, give exactly the plugged run?"""
    effective = set(variants) | {str(v) for v in getattr(scenario, "fixes", ())}
    with tempfile.TemporaryDirectory(prefix="rolloutscope-reference-") as tmp:
        with RunStore(Path(tmp) / "reference.duckdb") as ref:
            _run(scenario, ref, "reference", variants, {})
            if run_digest(ref, "reference") == digest:
                return ReferenceComparison(same_spans=True)
            difference = first_difference(ref, "reference", store, run_id)
            theirs = Counter(run_reads.incident_frame(ref, "reference").key)
            tried = tuple(dict.fromkeys(v for k in kinds for v in KIND_VARIANTS.get(k, ())
                                        if v not in effective))
            matches, same_incidents = [], [""] if theirs == incidents else []
            for n, variant in enumerate(tried):
                rid = f"reference+{n}"
                _run(scenario, ref, rid, ordered(parse_variants([*variants, variant])), {})
                if run_digest(ref, rid) == digest:
                    matches.append(variant)
                if Counter(run_reads.incident_frame(ref, rid).key) == incidents:
                    same_incidents.append(variant)
    only_ref = sorted((theirs - incidents).elements())
    only_plugged = sorted((incidents - theirs).elements())
    return ReferenceComparison(
        same_spans=False, first_difference=difference,
        incidents_only_reference=tuple(only_ref), incidents_only_plugged=tuple(only_plugged),
        matches_reference_with=tuple(matches) if matches else None,
        incidents_match_with=tuple(same_incidents), variants_tried=tried)


def _captured_switches(capture: Capture) -> tuple[str, ...]:
    """The variants a replay turns on to be the capture as it ran: those the captured run had
    that its scenario's fixes do not already carry (names this version does not know are not
    switches it can turn)."""
    known = {v.value for v in Variant}
    fixes = {str(v) for v in capture.scenario.fixes}
    return ordered(parse_variants(v for v in capture.variants if v in known and v not in fixes))


@dataclass(frozen=True)
class _AsCaptured:
    incidents: Counter  # in the window
    outcomes: OutcomeCounts
    timings: Mapping[str, float | None]


# the as-captured replays already made, by scenario (frozen: equal scenarios hash alike),
# switches and window: a capture replayed with several variants (rolloutscope demo's fixes) is
# replayed as captured once
_AS_CAPTURED: dict[tuple[Scenario, tuple[str, ...], tuple[float, float] | None],
                   _AsCaptured] = {}
_AS_CAPTURED_KEPT = 8


def _as_captured(scenario: Scenario, switches: tuple[str, ...],
                 window: tuple[float, float] | None) -> _AsCaptured:
    """The scenario replayed with the reference models and the capture's own switches, into a
    store of its own: what a variant's replay is judged against."""
    key = (scenario, switches, window)
    if key not in _AS_CAPTURED:
        with tempfile.TemporaryDirectory(prefix="rolloutscope-as-captured-") as tmp:
            with RunStore(Path(tmp) / "as-captured.duckdb") as store:
                _run(scenario, store, "as-captured", switches, {})
                origin = run_reads.origin_ns(store, "as-captured")
                incidents = run_reads.incident_frame(store, "as-captured", origin=origin)
                _keep_as_captured(scenario, switches, window, _AsCaptured(
                    incidents=Counter(in_window(incidents, window).key),
                    outcomes=run_reads.outcome_counts(store, "as-captured"),
                    timings=run_reads.timing_summary(store, "as-captured", origin=origin)))
    return _AS_CAPTURED[key]


def _keep_as_captured(scenario: Scenario, switches: tuple[str, ...],
                      window: tuple[float, float] | None, found: _AsCaptured) -> None:
    key = (scenario, switches, window)
    _AS_CAPTURED.pop(key, None)
    while len(_AS_CAPTURED) >= _AS_CAPTURED_KEPT:
        del _AS_CAPTURED[next(iter(_AS_CAPTURED))]
    _AS_CAPTURED[key] = found


def _replay_one(capture: Capture, store: RunStore, variants: tuple[str, ...],
                plugged: _Plugged, options: ReplayOptions) -> ReplayRunResult:
    factories, labels, records = plugged.factories, plugged.labels, plugged.records
    on_backend = options.on_backend
    run_id = _new_run_id(store, capture, variants)
    base = {"capture": capture.label, "captured_run_id": capture.run_id, "run_id": run_id,
            "out": str(store.path), "variants": variants, "participants": labels,
            "outcomes_captured": capture.outcomes, "extraction": capture.extraction,
            "implementations": records}
    scenario = capture.scenario
    # plugged code may fail in any way, and that is a finding about it, not a crash of the
    # replayer; without plug-ins only the replay package's own typed errors are data
    expected: tuple[type[BaseException], ...] = (Exception,) if factories else (ReplayError,)
    try:
        generation = _run(scenario, store, run_id, variants, factories, options)
    except expected as exc:
        return ReplayRunResult(**base, failure=ReplayFailure.of(exc))
    store.register_run(
        run_id, source=RunSource.REPLAY, parent_run_id=capture.run_id, scenario=scenario.name,
        variants=variants, seed=scenario.seed, config=scenario.config_dict(),
        metadata={"horizon_s": scenario.horizon_s, "description": scenario.description,
                  "replayed_from": capture.label, "participants": list(labels),
                  "generation": generation or {"backend": "recorded"},
                  "implementations": [r.to_dict() for r in records],
                  SCENARIO_DOCUMENT_KEY: scenario.to_dict()},
        origin_ns=VIRTUAL_EPOCH_NS)
    window = capture.window
    origin = run_reads.origin_ns(store, run_id)
    replayed = in_window(run_reads.incident_frame(store, run_id, origin=origin), window)
    captured, seen = Counter(capture.incidents), Counter(replayed.key)
    outcomes = run_reads.outcome_counts(store, run_id)
    timings = run_reads.timing_summary(store, run_id, origin=origin)
    before_outcomes, before_timings = capture.outcomes, capture.timings
    figures = "capture" if window is None else ""
    no_verdict: list[IncidentKey] = []
    as_captured_only: list[IncidentKey] = []
    switches = _captured_switches(capture)
    if set(variants) == set(switches):  # this replay is the as-captured one
        reproduced, vanished, appeared = run_reads.match_incidents(captured, seen)
        if not factories and not on_backend:
            _keep_as_captured(scenario, switches, window,
                              _AsCaptured(incidents=seen, outcomes=outcomes, timings=timings))
    else:
        plain = _as_captured(scenario, switches, window)
        earned = captured & plain.incidents
        no_verdict = sorted((captured - plain.incidents).elements())
        as_captured_only = sorted((plain.incidents - captured).elements())
        reproduced, vanished, _ = run_reads.match_incidents(earned, seen)
        appeared = sorted((seen - (captured | plain.incidents)).elements())
        if window is not None:
            before_outcomes, before_timings = plain.outcomes, plain.timings
            figures = "as-captured"
    digest = run_digest(store, run_id)
    divergence: list[Divergence] = []
    # the capture is the expectation only for the same switches and the reference models
    effective = set(variants) | {str(v) for v in getattr(scenario, "fixes", ())}
    if effective == set(capture.variants) and not factories:
        if vanished or appeared:
            divergence.append(Divergence.incidents(vanished, appeared))
        diffs = capture.outcomes.differences(outcomes) if capture.judge_outcomes else {}
        if diffs:
            divergence.append(Divergence.outcomes(diffs))
    if options.check_determinism and not on_backend:  # a real engine's timings are its own
        again = _second_digest(scenario, variants, factories)
        if again != digest:
            divergence.append(Divergence.nondeterminism(digest, again))
    versus = None
    if factories and options.compare_reference and not on_backend:
        versus = _versus_reference(scenario, store, run_id, variants, digest,
                                   Counter(replayed.key), factories)
    return ReplayRunResult(
        **{**base, "outcomes_captured": before_outcomes},
        reproduced=tuple(reproduced), vanished=tuple(vanished),
        appeared=tuple(appeared), outcomes_replayed=outcomes, versus_reference=versus,
        no_verdict=tuple(no_verdict), as_captured_only=tuple(as_captured_only),
        window=window, figures_against=figures,
        timing_deltas=tuple(TimingDelta(name=k, captured=before_timings.get(k),
                                        replayed=v) for k, v in timings.items()),
        digest=digest, divergences=tuple(divergence), generation=generation)
