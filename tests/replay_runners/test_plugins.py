"""Pluggable participants: each kind checked against the real upstream signatures, refs found by
upstream name, dotted path or entry point, a participant written against the wrong calling
conventions refused by name, and a nondeterministic participant caught as divergence."""

from __future__ import annotations

import random

import pytest

from rolloutscope.replay.doubles import rl_fleet_health
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
    parse_paths,
    participant_factories,
    protocol_members,
    resolve_factory,
    validate,
)
from rolloutscope.replay.real.sources import UpstreamUnavailableError
from rolloutscope.replay.replay_capture import ReplayOptions, capture_from_store, replay_run

DOUBLE = "rolloutscope.replay.doubles.rl_fleet_health:GenerationFleetHealth"
DOUBLES = {"nemo_rl": "doubles", "nemo_gym": "doubles"}


class HalfAFleet:
    def record_probe(self, shard_idx, *, ok, error=""): ...
    def report_failure(self, shard_idx, error): ...


class PositionalFleet(rl_fleet_health.GenerationFleetHealth):
    """Written against a guessed API: report_refit takes the version positionally."""

    def report_refit(self, shard_idx, weight_version):  # noqa: D401 - the guess
        super().report_refit(shard_idx, weight_version=weight_version)


def positional_fleet(*, num_shards, config, clock, base_urls):
    policy = rl_fleet_health.FleetHealthPolicy()
    return PositionalFleet(shard_count=num_shards, policy=policy, base_urls=list(base_urls),
                           clock=clock)


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
        assert {"report_refit", "mark_restarting", "serving_shards", "snapshot",
                "membership_epoch"} <= missing
        assert "record_probe" not in missing
        assert "HalfAFleet lacks" in str(err.value)

    def test_a_method_called_differently_from_the_real_one_is_refused(self):
        with pytest.raises(ProtocolMismatchError) as err:
            validate("fleet_health", PositionalFleet)
        assert err.value.missing == ()
        assert "report_refit(shard_idx, weight_version) vs real report_refit(shard_idx, " \
               "*weight_version)" in str(err.value)

    def test_the_double_has_the_real_calling_conventions_and_passes(self):
        assert validate("fleet_health", rl_fleet_health.GenerationFleetHealth) is \
            rl_fleet_health.GenerationFleetHealth

    def test_every_kind_names_the_members_its_adapter_drives(self):
        for kind in PluginKind:
            assert protocol_members(kind)


class TestFinding:
    def test_a_spec_is_kind_equals_ref(self):
        spec = ParticipantSpec.parse(f"fleet_health={DOUBLE}")
        assert spec.kind is PluginKind.FLEET_HEALTH
        assert resolve_factory(spec) is rl_fleet_health.GenerationFleetHealth

    def test_an_unknown_kind_names_the_known_ones(self):
        with pytest.raises(UnknownPluginKindError, match="known: fleet_health, router, deadline"):
            ParticipantSpec.parse("fleet=x:y")

    def test_a_spec_without_equals_is_refused(self):
        with pytest.raises(PluginError, match="expected KIND=nemo_rl"):
            ParticipantSpec.parse("fleet_health")

    def test_a_participant_path_names_an_upstream(self):
        assert parse_paths(["nemo_rl=/src/RL", "nemo_gym=doubles"]) == {
            "nemo_rl": "/src/RL", "nemo_gym": "doubles"}
        with pytest.raises(PluginError, match="expected nemo_rl=PATH or nemo_gym=PATH"):
            parse_paths(["rl=/src/RL"])

    def test_a_factory_that_cannot_be_imported_is_a_load_error(self):
        with pytest.raises(PluginLoadError, match="no module 'no_such_module'"):
            resolve_factory(ParticipantSpec.parse("router=no_such_module:make"))
        with pytest.raises(PluginLoadError, match="has no 'nothing'"):
            resolve_factory(ParticipantSpec.parse(
                f"router={rl_fleet_health.__name__}:nothing"))

    def test_an_upstream_name_without_its_code_says_how_to_provide_it(self, monkeypatch):
        monkeypatch.delenv("ROLLOUTSCOPE_NEMO_RL_SRC", raising=False)
        with pytest.raises(UpstreamUnavailableError) as err:
            participant_factories(["fleet_health=nemo_rl"])
        assert "ROLLOUTSCOPE_NEMO_RL_SRC" in str(err.value)
        assert "--participant-path nemo_rl=CHECKOUT" in str(err.value)

    def test_a_kind_from_the_other_upstream_is_refused(self):
        with pytest.raises(PluginError, match="use fleet_health=nemo_rl"):
            participant_factories(["fleet_health=nemo_gym"], paths=DOUBLES)

    def test_an_installed_entry_point_is_discovered_and_selected_by_name(
            self, tmp_path, monkeypatch):
        dist = tmp_path / "fleet_plugin-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fleet-plugin\n"
                                       "Version: 1.0\n")
        (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n"
                                               f"fleet_health.example = {DOUBLE}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        assert discover()["fleet_health.example"] == DOUBLE
        spec = ParticipantSpec.parse("fleet_health=example")
        assert resolve_factory(spec) is rl_fleet_health.GenerationFleetHealth
        with pytest.raises(PluginLoadError, match="no entry point 'fleet_health.other'"):
            resolve_factory(ParticipantSpec.parse("fleet_health=other"))

    def test_the_engine_factory_checks_what_a_user_factory_builds(self):
        build = engine_factory("fleet_health", lambda **kw: HalfAFleet())
        with pytest.raises(ProtocolMismatchError):
            build(num_shards=1, config=_config(), clock=lambda: 0.0, base_urls=("u",),
                  observer=lambda t: None)

    def test_a_user_factory_with_the_guessed_api_is_refused_when_built(self):
        build = engine_factory("fleet_health", positional_fleet)
        with pytest.raises(ProtocolMismatchError, match="report_refit"):
            build(num_shards=2, config=_config(), clock=lambda: 0.0, base_urls=("a", "b"),
                  observer=lambda t: None)


def _config():
    from rolloutscope.replay.participants.fleet_health import FleetHealthConfig

    return FleetHealthConfig(enabled=True)


def test_the_real_class_by_dotted_path_replays_a_quarantine(capture_path, tmp_path):
    capture = capture_from_store(capture_path("chaos-kill-serving"))
    assert ("quarantine", "shard 0") in capture.incidents
    result = replay_run(capture, out=tmp_path / "adapted.duckdb",
                        options=ReplayOptions(participants=[f"fleet_health={DOUBLE}"],
                                              compare_reference=False))
    assert result.error is None, result.error
    assert ("quarantine", "shard 0") in result.reproduced
    assert result.outcomes_replayed.quarantined == capture.outcomes.quarantined == 1
    record, = result.implementations
    assert record.implementation.endswith(":GenerationFleetHealth")
    assert record.loaded_by == "plug-in"


def test_a_participant_that_reads_randomness_outside_the_runtime_is_caught(
        capture_path, tmp_path):
    capture = capture_from_store(capture_path("snapshot-outlasts-deadline"))
    factories = {"deadline_registry": engine_factory("deadline_registry", jittery_deadlines)}
    result = replay_run(capture, out=tmp_path / "a.duckdb", fail_on_divergence=False,
                        options=ReplayOptions(participants=factories, compare_reference=False))
    assert result.error is None
    assert result.diverged
    assert "nondeterministic" in result.divergence[0]
    # the reference registry, run the same way, is deterministic
    reference = {"deadline_registry": engine_factory(
        "deadline_registry", lambda *, clock, counted: DeadlineRegistry(clock, counted=counted))}
    assert not replay_run(capture, out=tmp_path / "b.duckdb",
                          options=ReplayOptions(participants=reference,
                                                compare_reference=False)).diverged


def test_a_kind_the_engine_cannot_take_comes_back_as_an_error_not_an_exception(
        capture_path, tmp_path):
    capture = capture_from_store(capture_path("lease-expiry"))
    factories = {"model_participant": engine_factory("fleet_health", object)}
    result = replay_run(capture, out=tmp_path / "x.duckdb",
                        options=ReplayOptions(participants=factories))
    assert result.error is not None and "cannot take a plugged model_participant" in \
        result.error


def test_a_gym_participant_the_replay_cannot_drive_says_exactly_why():
    from rolloutscope.replay.plugins import UnsupportedPluginKindError

    with pytest.raises(UnsupportedPluginKindError) as err:
        ParticipantSpec.parse("model_participant=nemo_gym")
    assert "nemo_gym._checkpoint.generation_cut" in str(err.value)
    assert "errors.InvalidRolloutIdError" in str(err.value)


def test_a_replay_that_could_not_run_is_a_failure_record(capture_path, tmp_path):
    capture = capture_from_store(capture_path("lease-expiry"))
    factories = {"model_participant": engine_factory("fleet_health", object)}
    result = replay_run(capture, out=tmp_path / "x.duckdb",
                        options=ReplayOptions(participants=factories))
    assert result.failure is not None and result.failure.error_type == "ReplayError"
    assert result.failure.message.startswith("the replay engine cannot take a plugged "
                                             "model_participant")
    assert result.error == f"ReplayError: {result.failure.message}" == str(result.failure)
    assert not result.ok and not result.diverged
    assert result.lines() == [f"replay of {result.capture} failed: {result.error}"]
