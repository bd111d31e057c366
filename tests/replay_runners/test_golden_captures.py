"""Golden captures checked in beside the test, replayed as CI runs: each is a small scenario
document with the incidents and outcome counts its capture showed (``golden_document`` of a
``capture_from_store``; regenerate one by capturing the built-in scenario again)."""

from __future__ import annotations

import json

import pytest

from rolloutscope.replay.replay_capture import (
    GoldenCaptureError,
    ReplayDivergenceError,
    ReplayOptions,
    capture_from_golden,
    replay_run,
    replay_runs,
)

from .conftest import GOLDEN

GOLDENS = sorted(GOLDEN.glob("*.json"))


def test_there_is_a_golden_capture_per_checkpoint_incident_scenario():
    assert {p.stem for p in GOLDENS} == {
        "snapshot-outlasts-deadline", "lost-reply", "prepare-blocked-by-streaming",
        "worker-lost-in-commit", "lease-expiry"}


def test_every_golden_capture_replays_without_divergence(tmp_path):
    results = replay_runs([capture_from_golden(p) for p in GOLDENS],
                          out=tmp_path / "goldens.duckdb")
    assert [r.capture for r in results.results] == [p.name for p in GOLDENS]
    assert results.diverged == () and results.failed == ()
    assert all(r.reproduced and not r.vanished and not r.appeared for r in results.results)


def test_a_golden_whose_expectation_no_longer_holds_raises_divergence_on_request(tmp_path):
    doc = json.loads((GOLDEN / "lost-reply.json").read_text())
    doc["expected"]["outcomes"]["committed"] = 2
    doc["expected"]["incidents"].append(["export_failed", "snapshot@200s"])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    capture = capture_from_golden(edited)
    with pytest.raises(ReplayDivergenceError) as err:
        replay_run(capture, out=tmp_path / "a.duckdb",
                   options=ReplayOptions(check_determinism=False))
    assert "export_failed (snapshot@200s) vanished" in str(err.value)
    assert "committed 2 -> 1" in str(err.value)
    # the plural call hands the same finding back as data
    result = replay_runs([capture], out=tmp_path / "b.duckdb",
                         options=ReplayOptions(check_determinism=False)).results[0]
    assert result.diverged and result.error is None


def test_a_file_that_is_not_a_golden_capture_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"format": "something-else"}')
    with pytest.raises(GoldenCaptureError, match="not a rolloutscope-golden-capture"):
        capture_from_golden(path)


def test_a_divergence_is_a_record_naming_what_was_expected_and_what_was_observed(tmp_path):
    from rolloutscope.replay.divergence import DivergenceKind

    doc = json.loads((GOLDEN / "lost-reply.json").read_text())
    doc["expected"]["outcomes"]["committed"] = 2
    doc["expected"]["incidents"].append(["export_failed", "snapshot@200s"])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    result = replay_runs([capture_from_golden(edited)], out=tmp_path / "b.duckdb",
                         options=ReplayOptions(check_determinism=False)).results[0]
    incidents, outcomes = result.divergences
    assert incidents.kind is DivergenceKind.INCIDENTS and incidents.subject == "incidents"
    assert incidents.expected == (("export_failed", "snapshot@200s"),)
    assert incidents.observed == ()
    assert outcomes.kind is DivergenceKind.OUTCOMES
    assert outcomes.expected == (("committed", 2),) and outcomes.observed == (("committed", 1),)
    # the rendered text is the records' messages, as reports and the raised error print them
    assert result.divergence == (incidents.message, outcomes.message)
    assert outcomes.message == "outcome counts differ: committed 2 -> 1" == str(outcomes)
    assert f"  DIVERGED: {incidents.message}" in result.lines()
