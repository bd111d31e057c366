"""The same replays against the real NeMo-RL / NeMo-Gym code, when ``ROLLOUTSCOPE_NEMO_RL_SRC``
and ``ROLLOUTSCOPE_NEMO_GYM_SRC`` point at checkouts (skipped with that reason otherwise):
RL's ``GenerationFleetHealth`` and ``GenerationRouterImpl`` with no glue, RL's ``_Deadline``
and Gym's ``AgentSessionParticipant`` reproducing NVIDIA-NeMo/RL #4266 in process, and the
counted-holders fix removing it."""

from __future__ import annotations

from rolloutscope.replay.replay_capture import ReplayOptions, capture_from_store, replay_run

P1 = ("deadline_fired_while_parked", "p00000 try 0")
COUNTED = "rolloutscope.replay.examples.counted_deadlines:CountedRequestDeadlineRegistry"


def _replay(capture_path, tmp_path, scenario, participants, paths, **kw):
    capture = capture_from_store(capture_path(scenario))
    result = replay_run(capture, out=tmp_path / f"{scenario}.duckdb", fail_on_divergence=False,
                        options=ReplayOptions(participants=participants,
                                              participant_paths=paths), **kw)
    assert result.error is None, result.error
    assert not [d for d in result.divergence if "nondeterministic" in d], result.divergence
    for record in result.implementations:
        assert record.loaded_by != "double", record
        assert record.signature_drift == (), record.signature_drift
    return capture, result


def test_real_fleet_health_with_no_glue_condemns_the_wedged_engine(
        capture_path, tmp_path, real_rl):
    _, result = _replay(capture_path, tmp_path, "wedged-engine", ["fleet_health=nemo_rl"],
                        {"nemo_rl": str(real_rl)})
    record, = result.implementations
    assert record.upstream == "NVIDIA-NeMo/RL" and record.file_sha256
    assert ("quarantine", "shard 1") in result.appeared
    assert "separate-reported-failure-streak" in result.versus_reference.incidents_match_with


def test_real_router_answers_500_so_the_retry_storm_is_gone(capture_path, tmp_path, real_rl):
    _, result = _replay(capture_path, tmp_path, "retry-504-storm",
                        ["router=nemo_rl", "fleet_health=nemo_rl"], {"nemo_rl": str(real_rl)})
    assert ("retry_storm", "p00002-0") in result.vanished


def test_real_deadline_and_real_agent_reproduce_4266_and_the_fix_removes_it(
        capture_path, tmp_path, real_paths):
    capture, result = _replay(capture_path, tmp_path, "snapshot-outlasts-deadline",
                              ["deadline=nemo_rl", "agent_participant=nemo_gym"], real_paths)
    assert P1 in capture.incidents and P1 in result.reproduced
    _, fixed = _replay(capture_path, tmp_path / "fixed", "snapshot-outlasts-deadline",
                       ["deadline=nemo_rl", f"deadline_registry={COUNTED}",
                        "agent_participant=nemo_gym"], real_paths,
                       variants=["pause-deadlines-during-snapshot"])
    assert P1 in fixed.vanished


def test_real_gym_lease_watcher_expires_the_lease(capture_path, tmp_path, real_gym):
    capture, result = _replay(capture_path, tmp_path, "lease-expiry",
                              ["agent_participant=nemo_gym"], {"nemo_gym": str(real_gym)})
    assert ("lease_expired", "snapshot@100s agent") in result.reproduced


def test_the_real_class_by_its_dotted_path_is_recognised_by_its_file(
        capture_path, tmp_path, real_rl, monkeypatch):
    """``--participant fleet_health=fleet_health:GenerationFleetHealth`` with RL's file on the
    path: built with its real constructor, and the report knows which commit the file is."""
    monkeypatch.syspath_prepend(str(real_rl / "nemo_rl" / "models" / "generation"))
    _, result = _replay(capture_path, tmp_path, "wedged-engine",
                        ["fleet_health=fleet_health:GenerationFleetHealth"], {})
    record, = result.implementations
    assert record.loaded_by == "plug-in"
    assert (record.upstream, record.commit_source) == ("NVIDIA-NeMo/RL", "known file hash")
    assert ("quarantine", "shard 1") in result.appeared
