"""P1 from the reference run: RL #4266's budget arithmetic, its timeline, and the fix replayed."""

from __future__ import annotations

import pytest

from rolloutscope.postmortem import deadline


@pytest.fixture(scope="module")
def incident(p1_run):
    with p1_run.open() as store:
        return deadline.parked_deadline(store, p1_run.run_id)


@pytest.fixture(scope="module")
def fixed(p1_run, tmp_path_factory):
    return deadline.replay_with_fix(p1_run, out=tmp_path_factory.mktemp("fix") / "r.duckdb")


def test_the_reference_run_has_one_p1_fired_with_thirty_seconds_parked(p1_run):
    with p1_run.open() as store:
        table = deadline.incidents(store, p1_run.run_id)
    assert len(table) == 1
    row = table.iloc[0]
    assert (row.start_s, row.subject, row.budget_left_s, row.parked_s) == (
        180.0, "p00000 try 0", 30.0, 30.0)


def test_the_budget_arithmetic_of_a_snapshot_outlasting_the_deadline(incident):
    assert (incident.deadline_start_s, incident.budget_s, incident.snapshot_start_s,
            incident.parked_at_s, incident.fired_at_s, incident.snapshot_end_s) == (
        0.0, 180.0, 150.0, 150.0, 180.0, 210.0)
    assert incident.budget_left_at_snapshot_s == 30.0
    assert incident.parked_when_fired_s == 30.0
    assert incident.snapshot_s == 60.0
    assert incident.overrun_s == 30.0


def test_the_budget_table_agrees_with_the_incident_view(p1_run, incident):
    table = deadline.budget_table(incident).set_index("quantity").seconds
    with p1_run.open() as store:
        view = store.view(deadline.KIND, run_id=p1_run.run_id).iloc[0]
    assert table["budget left when the snapshot started"] == view.budget_left_s
    assert table["parked time when it fired"] == view.parked_s
    assert table["snapshot outlasted the budget left by"] == 30.0


def test_a_suspended_deadline_keeps_the_time_it_was_suspended():
    base = dict(incident_id="i", run_id="r", rollout_id="p0", attempt=0, checkpoint_id="c",
                summary="", budget_s=180.0, deadline_start_s=0.0, snapshot_start_s=150.0,
                snapshot_end_s=None, parked_at_s=150.0, fired_at_s=200.0, released_at_s=None)
    incident = deadline.ParkedDeadline(**base, suspended_s=20.0)
    assert incident.budget_left_at_snapshot_s == 50.0
    assert incident.snapshot_s is None and incident.overrun_s is None


def test_asking_for_an_incident_the_run_lacks_is_an_error(p1_run):
    with p1_run.open() as store, pytest.raises(deadline.PostmortemError, match="no incident x"):
        deadline.parked_deadline(store, p1_run.run_id, "x")


def test_the_timeline_around_the_incident_is_its_rollout_the_snapshot_and_the_incidents(
        p1_run, incident):
    with p1_run.open() as store:
        rows = deadline.timeline_around(store, incident, pad_s=60.0)
    story = [(r.kind, r.label, r.start_s, r.outcome) for r in rows.itertuples()]
    assert ("try", "try 0", 0.0, "failed") in story
    assert ("parked", "p00000-0 parked", 150.0, "parked_with_boundary") in story
    assert ("deadline_fired", "try 0 deadline fired", 180.0, "parked") in story
    assert ("snapshot", "snapshot 1", 150.0, "committed") in story
    assert ("completion", "p00000-0 completed", 240.0, "unacknowledged") in story
    assert all(s <= 270.0 for s in rows.start_s)  # the failed snapshot at 450 s is outside
    assert set(rows.lane) == {"p00000", "snapshots", "incidents"}


def test_the_replay_without_the_fix_reproduces_the_incident(fixed):
    assert fixed.reproduces
    assert fixed.p1_captured == fixed.p1_reproduced == 1


def test_pausing_deadlines_during_the_snapshot_removes_the_p1_and_the_failed_snapshots(fixed):
    assert fixed.p1_fixed == 0
    assert sorted(fixed.comparison.incident_status("vanished")) == [
        ("deadline_fired_while_parked", "p00000 try 0"),
        ("stranded_completion", "p00000-0 try 0")]
    outcomes = fixed.comparison.outcomes.set_index("metric")
    assert (outcomes.loc["snapshots_failed", "a"], outcomes.loc["snapshots_failed", "b"]) == (3, 0)
    assert list(fixed.comparison.snapshots.outcome_b) == ["committed"] * 4


def test_with_the_fix_the_deadline_is_suspended_for_the_snapshot_and_completes(fixed):
    after = fixed.deadlines[fixed.deadlines.run == "after"]
    before = fixed.deadlines[fixed.deadlines.run == "before"]
    assert list(before.outcome) == ["fired", "completed"]
    assert list(after.outcome) == ["completed"]
    assert after.suspended_s.iloc[0] == 60.0 and after.ended_s.iloc[0] == 240.0


def test_the_fix_report_speaks_of_both_replays(fixed):
    text = fixed.report()
    assert "reproduced" in text and "vanished" in text
    assert "pause-deadlines-during-snapshot" in text
    assert fixed.fixed_run.run_id == fixed.fixed.run_id
