"""Pluggable participants: protocols checked by name, factories found by path or entry point,
the example adapter replaying a quarantine through a class with only the real API, and a
nondeterministic participant caught as divergence."""

from __future__ import annotations

import random

import pytest

from rolloutscope.replay.adapters import example_fleet
from rolloutscope.replay.participants.deadlines import DeadlineRegistry
from rolloutscope.replay.plugins import (
    ENTRY_POINT_GROUP,
    ParticipantSpec,
    PluginError,
    PluginKind,
    PluginLoadError,
    ProtocolMismatchError,
    UnknownPluginKindError,
    discover,
    engine_factory,
    protocol_members,
    resolve_factory,
    validate,
)
from rolloutscope.replay.replayer import capture_from_store, replay_run

EXAMPLE = "rolloutscope.replay.adapters.example_fleet:make_fleet_health"


class HalfAFleet:
    def record_probe(self, idx, ok, error=None): ...
    def report_failure(self, idx, error=None): ...


class JitteryDeadlineRegistry(DeadlineRegistry):
    """Reads randomness outside the runtime: every budget gets an unseeded few milliseconds."""

    def add(self, key, *, kind, budget_s):
        return super().add(key, kind=kind,
                           budget_s=budget_s + random.SystemRandom().uniform(0.001, 0.01))


def jittery_deadlines(*, clock, counted):
    return JitteryDeadlineRegistry(clock, counted=counted)


class TestProtocols:
    def test_a_plugged_object_missing_methods_is_refused_naming_every_one(self):
        with pytest.raises(ProtocolMismatchError) as err:
            validate("fleet_health", HalfAFleet())
        missing = set(err.value.missing)
        assert {"report_refit", "mark_restarting", "serving_shards", "shard",
                "membership_epoch"} <= missing
        assert "record_probe" not in missing
        assert "HalfAFleet lacks" in str(err.value)

    def test_the_example_class_has_exactly_the_real_api_and_passes(self):
        fleet = example_fleet.make_fleet_health(num_shards=2, config=_config(), clock=lambda: 0.0,
                                                base_urls=["http://a/v1", "http://b/v1"])
        assert validate("fleet_health", fleet) is fleet
        public = {n for n in dir(fleet) if not n.startswith("_")}
        assert public == set(protocol_members(PluginKind.FLEET_HEALTH))

    def test_every_kind_documents_its_protocol(self):
        for kind in PluginKind:
            assert protocol_members(kind)


class TestFinding:
    def test_a_spec_is_kind_equals_module_colon_factory(self):
        spec = ParticipantSpec.parse(f"fleet_health={EXAMPLE}")
        assert spec.kind is PluginKind.FLEET_HEALTH
        assert resolve_factory(spec) is example_fleet.make_fleet_health

    def test_an_unknown_kind_names_the_known_ones(self):
        with pytest.raises(UnknownPluginKindError, match="known: checkpoint_participant"):
            ParticipantSpec.parse("fleet=x:y")

    def test_a_spec_without_equals_is_refused(self):
        with pytest.raises(PluginError, match="expected KIND=module:factory"):
            ParticipantSpec.parse("fleet_health")

    def test_a_factory_that_cannot_be_imported_is_a_load_error(self):
        with pytest.raises(PluginLoadError, match="no module 'no_such_module'"):
            resolve_factory(ParticipantSpec.parse("router=no_such_module:make"))
        with pytest.raises(PluginLoadError, match="has no 'nothing'"):
            resolve_factory(ParticipantSpec.parse(f"router={example_fleet.__name__}:nothing"))

    def test_an_installed_entry_point_is_discovered_and_selected_by_name(
            self, tmp_path, monkeypatch):
        dist = tmp_path / "fleet_plugin-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fleet-plugin\n"
                                       "Version: 1.0\n")
        (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n"
                                               f"fleet_health.example = {EXAMPLE}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        assert discover()["fleet_health.example"] == EXAMPLE
        spec = ParticipantSpec.parse("fleet_health=example")
        assert resolve_factory(spec) is example_fleet.make_fleet_health
        with pytest.raises(PluginLoadError, match="no entry point 'fleet_health.other'"):
            resolve_factory(ParticipantSpec.parse("fleet_health=other"))

    def test_the_engine_factory_checks_what_the_plug_in_builds(self):
        build = engine_factory("fleet_health", lambda **kw: HalfAFleet())
        with pytest.raises(ProtocolMismatchError):
            build(num_shards=1, config=_config(), clock=lambda: 0.0, base_urls=("u",),
                  observer=lambda t: None)


def _config():
    from rolloutscope.replay.participants.fleet_health import FleetHealthConfig

    return FleetHealthConfig(enabled=True)


def test_the_example_adapter_replays_a_quarantine_through_only_the_real_api(
        capture_path, tmp_path):
    capture = capture_from_store(capture_path("chaos-kill-serving"))
    assert ("quarantine", "shard 0") in capture.incidents
    result = replay_run(capture, out=tmp_path / "adapted.duckdb",
                        participants=[f"fleet_health={EXAMPLE}"])
    assert result.ok, result.error or result.divergence
    assert ("quarantine", "shard 0") in result.reproduced
    assert result.outcomes_replayed.quarantined == capture.outcomes.quarantined == 1


def test_a_participant_that_reads_randomness_outside_the_runtime_is_caught(
        capture_path, tmp_path):
    capture = capture_from_store(capture_path("snapshot-outlasts-deadline"))
    factories = {"deadline_registry": engine_factory("deadline_registry", jittery_deadlines)}
    result = replay_run(capture, out=tmp_path / "a.duckdb", participants=factories,
                        fail_on_divergence=False)
    assert result.error is None
    assert result.diverged
    assert "nondeterministic" in result.divergence[0]
    # the reference registry, run the same way, is deterministic
    reference = {"deadline_registry": engine_factory(
        "deadline_registry", lambda *, clock, counted: DeadlineRegistry(clock, counted=counted))}
    assert not replay_run(capture, out=tmp_path / "b.duckdb", participants=reference).diverged


def test_a_kind_the_engine_cannot_take_comes_back_as_an_error_not_an_exception(
        capture_path, tmp_path):
    capture = capture_from_store(capture_path("lease-expiry"))
    factories = {"checkpoint_participant": engine_factory("checkpoint_participant", object)}
    result = replay_run(capture, out=tmp_path / "x.duckdb", participants=factories)
    assert result.error is not None and "cannot take a plugged checkpoint_participant" in \
        result.error


def test_a_replay_that_could_not_run_is_a_failure_record(capture_path, tmp_path):
    capture = capture_from_store(capture_path("lease-expiry"))
    factories = {"checkpoint_participant": engine_factory("checkpoint_participant", object)}
    result = replay_run(capture, out=tmp_path / "x.duckdb", participants=factories)
    assert result.failure is not None and result.failure.error_type == "ReplayError"
    assert result.failure.message.startswith("the replay engine cannot take a plugged "
                                             "checkpoint_participant")
    assert result.error == f"ReplayError: {result.failure.message}" == str(result.failure)
    assert not result.ok and not result.diverged
    assert result.lines() == [f"replay of {result.capture} failed: {result.error}"]
