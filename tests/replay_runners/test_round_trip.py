"""Capture live, extract, replay: every built-in incident scenario reproduces itself with the
reference models, and its fix makes the incident vanish (and the report says so)."""

from __future__ import annotations

import pytest

from rolloutscope.store import RunStore
from rolloutscope.replay import compare
from rolloutscope.replay.extract import ExtractionError, extract_scenario
from rolloutscope.replay.replay_capture import ReplayOptions, capture_from_store, replay_run
from rolloutscope.replay.scenarios import get
from rolloutscope.vocabulary import RunSource

INCIDENT_SCENARIOS = ["snapshot-outlasts-deadline", "lost-reply", "prepare-blocked-by-streaming",
                      "worker-lost-in-commit", "lease-expiry", "chaos-kill-serving",
                      "wedged-engine"]
FIXES = [("snapshot-outlasts-deadline", "pause-deadlines-during-snapshot",
          {"deadline_fired_while_parked", "stranded_completion"}),
         ("lost-reply", "retire-then-adopt", {"stranded_completion", "stall"}),
         ("prepare-blocked-by-streaming", "calls-wait-at-closed-admission",
          {"stranded_completion", "stall"})]


@pytest.mark.parametrize("name", INCIDENT_SCENARIOS)
def test_replaying_a_capture_reproduces_its_incidents_and_outcome_counts(
        name, capture_path, tmp_path):
    capture = capture_from_store(capture_path(name))
    assert capture.incidents, "a built-in incident scenario captures at least one incident"
    result = replay_run(capture, out=tmp_path / "replay.duckdb",
                        options=ReplayOptions(check_determinism=False))
    assert result.ok
    assert result.reproduced == capture.incidents
    assert (result.vanished, result.appeared) == ((), ())
    assert result.outcomes_replayed == capture.outcomes


@pytest.mark.parametrize(("name", "fix", "gone"), FIXES)
def test_with_the_fixing_variant_the_incident_vanishes_and_the_report_says_so(
        name, fix, gone, capture_path, tmp_path):
    capture = capture_from_store(capture_path(name))
    out = tmp_path / "fixed.duckdb"
    result = replay_run(capture, out=out, variants=[fix],
                        options=ReplayOptions(check_determinism=False))
    assert not result.diverged, "a fix is not a divergence"
    assert {kind for kind, _ in result.vanished} == gone
    assert result.outcomes_replayed.stranded == 0
    with RunStore(capture_path(name), read_only=True) as a, RunStore(out, read_only=True) as b:
        report = compare.render_markdown(compare.compare_runs(a, capture.run_id, b,
                                                              result.run_id))
    for kind in gone:
        assert f"{kind} (" in report and "vanished in the replay" in report


def test_the_extracted_scenario_equals_the_one_that_was_captured(capture_path):
    with RunStore(capture_path("lost-reply"), read_only=True) as store:
        extraction = extract_scenario(store)
    original = get("lost-reply").to_dict()
    extracted = extraction.scenario.to_dict()
    assert {k: v for k, v in extracted.items() if k != "description"} == \
        {k: v for k, v in original.items() if k != "description"}
    assert extraction.scenario.faults.lost_replies[0].row_idx == 1


def test_the_report_lists_turns_taken_from_the_recorded_document_as_defaulted(capture_path):
    with RunStore(capture_path("snapshot-outlasts-deadline"), read_only=True) as store:
        report = extract_scenario(store).report
    assert [n.item for n in report.defaulted if n.item == "workload.turns"]
    assert any("no model-call spans" in n.detail for n in report.defaulted)


def test_each_extraction_note_says_where_its_part_of_the_scenario_came_from(capture_path):
    from rolloutscope.replay.extract import Provenance

    with RunStore(capture_path("snapshot-outlasts-deadline"), read_only=True) as store:
        report = extract_scenario(store).report
    for provenance, notes in ((Provenance.INFERRED, report.inferred),
                              (Provenance.DEFAULTED, report.defaulted),
                              (Provenance.MISSING, report.missing)):
        assert all(n.provenance is provenance for n in notes)
    assert report.notes == report.inferred + report.defaulted + report.missing
    assert report.lines()[1:] == [f"{n.provenance.value}: {n.item}: {n.detail}"
                                  for n in report.notes]


def test_a_live_run_without_model_call_spans_gets_one_turn_per_row_listed_as_missing(
        capture_path, tmp_path):
    path = tmp_path / "live.duckdb"
    path.write_bytes(capture_path("healthy-baseline").read_bytes())
    with RunStore(path) as store:
        store.register_run("healthy-baseline.s0", source=RunSource.LIVE)
    with RunStore(path, read_only=True) as store:
        extraction = extract_scenario(store)
    rows = [row for p in extraction.scenario.workload.prompts for row in p.rows]
    assert all(len(row.turns) == 1 for row in rows)
    assert any(n.item == "workload.turns" and "one turn" in n.detail
               for n in extraction.report.missing)


def test_a_window_around_an_incident_keeps_the_history_that_reproduces_it(
        capture_path, tmp_path):
    path = capture_path("snapshot-outlasts-deadline")
    with RunStore(path, read_only=True) as store:
        incidents = store.view("incidents")
    p1 = incidents[incidents.kind == "deadline_fired_while_parked"].incident_id.iloc[0]
    capture = capture_from_store(path, incident_id=p1)
    ws, we = capture.extraction.window
    # 150 s snapshot, 180 s deadline, padded by prepare_timeout_s=300; snapshot 2 (450 s) runs
    # to its failure at 750 s; snapshots 3 and 4 fall outside
    assert (ws, we) == (0.0, 750.0)
    assert [s.at_s for s in capture.scenario.control.snapshots] == [150.0, 450.0]
    result = replay_run(capture, out=tmp_path / "window.duckdb",
                        options=ReplayOptions(check_determinism=False))
    assert result.ok
    assert {k for k, _ in result.reproduced} == {"deadline_fired_while_parked",
                                                 "stranded_completion"}


def test_an_unknown_incident_id_is_refused_with_the_known_ones(capture_path):
    with RunStore(capture_path("lease-expiry"), read_only=True) as store, \
            pytest.raises(ExtractionError, match="no incident 'p9-nope'; incidents: "):
        extract_scenario(store, incident_id="p9-nope")
