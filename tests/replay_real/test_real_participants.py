"""Replays against the stand-ins of the real NeMo-RL / NeMo-Gym code, through every seam: fleet
health and the router with their real calling conventions, RL's ``_Deadline`` as the async
context manager it is, Gym's agent participant and control plane on the virtual clock; the fix
variants removing their incidents; determinism; a participant that sleeps in wall time caught."""

from __future__ import annotations

import pytest

from rolloutscope.replay.replay_capture import ReplayOptions, capture_from_store, replay_run

DOUBLES = {"nemo_rl": "doubles", "nemo_gym": "doubles"}
P1 = ("deadline_fired_while_parked", "p00000 try 0")
COUNTED = "rolloutscope.replay.examples.counted_deadlines:CountedRequestDeadlineRegistry"
BRANCH = "rolloutscope.replay.doubles.rl_rollout_manager_00420a1"


def _replay(capture_path, tmp_path, scenario, participants, **kw):
    capture = capture_from_store(capture_path(scenario))
    result = replay_run(capture, out=tmp_path / f"{scenario}.duckdb", fail_on_divergence=False,
                        options=ReplayOptions(participants=participants,
                                              participant_paths=DOUBLES), **kw)
    assert result.error is None, result.error
    assert not [d for d in result.divergence if "nondeterministic" in d], result.divergence
    return capture, result


def test_fleet_health_by_upstream_name_replays_a_wedged_engine(capture_path, tmp_path):
    _, result = _replay(capture_path, tmp_path, "wedged-engine", ["fleet_health=nemo_rl"])
    record, = result.implementations
    assert (record.kind, record.loaded_by, record.commit_source) == (
        "fleet_health", "double", "stand-in mirrors")
    assert record.commit.startswith("7ea279a")
    assert record.implementation == \
        "nemo_rl.models.generation.fleet_health:GenerationFleetHealth"
    # the real class has the separate reported-failure streak: the wedged shard is condemned
    assert ("quarantine", "shard 1") in result.appeared
    versus = result.versus_reference
    assert versus.diverged
    assert "separate-reported-failure-streak" in versus.incidents_match_with
    # ... but a reported failure does not reset its probe-success streak, as the reference
    # model does: the suspect shard comes back one probe tick earlier
    first = versus.first_difference
    assert (first.at_s, first.span, first.field) == (65.0, "rl.gen_fleet.shard_state", "end_s")
    assert "shard 1" in first.subject
    assert (first.reference, first.plugged) == ("75.0", "70.0")
    assert versus.matches_reference_with is None


def test_the_router_answers_a_failed_backend_itself(capture_path, tmp_path):
    _, result = _replay(capture_path, tmp_path, "retry-504-storm",
                        ["router=nemo_rl", "fleet_health=nemo_rl"])
    assert [r.kind for r in result.implementations] == ["router", "fleet_health"]
    assert ("retry_storm", "p00002-0") in result.vanished
    assert "router-500-not-504" in result.versus_reference.incidents_match_with


def test_rl_deadline_and_gym_agent_reproduce_a_snapshot_outlasting_a_deadline(
        capture_path, tmp_path):
    capture, result = _replay(capture_path, tmp_path, "snapshot-outlasts-deadline",
                              ["deadline=nemo_rl", "agent_participant=nemo_gym"])
    assert P1 in capture.incidents
    assert P1 in result.reproduced
    kinds = {r.kind: r for r in result.implementations}
    assert kinds["deadline"].implementation == "nemo_rl.experience.rollout_manager:_Deadline"
    assert kinds["agent_participant"].commit.startswith("011c338")
    # a generation-2 agent keeps no finished result, so nothing blocks the later snapshots
    assert result.outcomes_replayed.snapshots_ok == 4
    assert capture.outcomes.snapshots_ok == 1


@pytest.mark.parametrize("plugged", [
    pytest.param(["deadline=nemo_rl", f"deadline_registry={COUNTED}"],
                 id="main _Deadline patched by the counted registry"),
    pytest.param([f"deadline={BRANCH}:_Deadline", f"deadline_registry={BRANCH}:"
                   f"RequestDeadlineRegistry"], id="the registry-aware branch"),
])
def test_suspending_deadlines_during_the_snapshot_removes_the_incident(
        capture_path, tmp_path, plugged):
    _, result = _replay(capture_path, tmp_path, "snapshot-outlasts-deadline",
                        [*plugged, "agent_participant=nemo_gym"],
                        variants=["pause-deadlines-during-snapshot"])
    assert P1 in result.vanished
    assert result.outcomes_replayed.timed_out == 0
    if "nemo_rl" in plugged[0]:
        deadline = next(r for r in result.implementations if r.kind == "deadline")
        assert "made registry-aware by CountedRequestDeadlineRegistry.patch" in deadline.note


def test_main_deadline_cannot_be_suspended_so_the_fix_variant_alone_changes_nothing(
        capture_path, tmp_path):
    _, result = _replay(capture_path, tmp_path, "snapshot-outlasts-deadline",
                        ["deadline=nemo_rl"], variants=["pause-deadlines-during-snapshot"])
    assert P1 in result.reproduced


def test_gym_lease_watcher_resumes_on_the_virtual_clock(capture_path, tmp_path):
    capture, result = _replay(capture_path, tmp_path, "lease-expiry",
                              ["agent_participant=nemo_gym"])
    lease = ("lease_expired", "snapshot@100s agent")
    assert lease in capture.incidents and lease in result.reproduced
    assert result.versus_reference.incidents_match_with[:1] == ("",)


def test_replays_with_real_style_async_participants_are_deterministic(capture_path, tmp_path):
    capture = capture_from_store(capture_path("snapshot-outlasts-deadline"))
    plugged = ["deadline=nemo_rl", f"deadline_registry={COUNTED}", "agent_participant=nemo_gym"]
    digests = {replay_run(capture, out=tmp_path / f"{i}.duckdb", fail_on_divergence=False,
                          variants=["pause-deadlines-during-snapshot"],
                          options=ReplayOptions(participants=plugged, participant_paths=DOUBLES,
                                                compare_reference=False)).digest
               for i in range(2)}
    assert len(digests) == 1 and "" not in digests


def test_a_participant_that_sleeps_in_wall_time_fails_the_replay_by_name(
        capture_path, tmp_path):
    capture = capture_from_store(capture_path("snapshot-outlasts-deadline"))
    result = replay_run(capture, out=tmp_path / "sleepy.duckdb",
                        options=ReplayOptions(participants=[
                            "deadline=tests.replay_real.sleepy.deadline:SleepyDeadline"]))
    assert result.error is not None
    assert result.error.startswith("WallClockSleepError: participant deadline: called "
                                   "time.sleep(0.5) in tests.replay_real.sleepy.deadline")


def test_a_participant_that_raises_fails_the_replay_by_name(capture_path, tmp_path):
    capture = capture_from_store(capture_path("snapshot-outlasts-deadline"))
    result = replay_run(capture, out=tmp_path / "crash.duckdb",
                        options=ReplayOptions(participants=[
                            "deadline=tests.replay_real.sleepy.deadline:CrashingDeadline"]))
    assert result.error is not None and "registry not configured" in result.error
    assert "participant deadline" in result.error
