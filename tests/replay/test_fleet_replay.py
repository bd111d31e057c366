"""The generation fleet in the engine: gauges into the store, the participant seam, the scenario
model's fleet faults, determinism and the CLI's --without."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from rolloutscope.cli import main as cli_main
from rolloutscope.store import RunStore
from rolloutscope.replay import scenarios
from rolloutscope.replay.errors import ScenarioError
from rolloutscope.replay.participants.fleet_health import GenerationFleetHealth
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenario import Faults, Scenario, ShardKill
from rolloutscope.replay.sim.fleet import FleetHealthSpec


def _replay(tmp_path, name, **kw):
    store = RunStore(tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.duckdb")
    result = replay_into_store(scenarios.get(name), store, **kw)
    store.writer().flush()
    return store, result


def _stays(store):
    return store.query(
        "SELECT shard_idx, state, previous_state, trigger, start_ns, end_ns, weight_version "
        "FROM shard_states ORDER BY shard_idx, start_ns, state")


class ObserverlessFleetHealth:
    """A stand-in with only the real system's public methods: no observer hook."""

    def __init__(self, spec: FleetHealthSpec) -> None:
        self._inner = GenerationFleetHealth(num_shards=spec.num_shards, config=spec.config,
                                            clock=spec.clock, base_urls=spec.base_urls)
        for name in ("record_probe", "report_failure", "report_success", "mark_restarting",
                     "mark_loaded", "report_refit", "retire", "serving_shards",
                     "raise_if_exhausted", "snapshot", "shard_for_base_url"):
            setattr(self, name, getattr(self._inner, name))

    @property
    def membership_epoch(self) -> int:
        return self._inner.membership_epoch


class TestGauges:
    def test_the_watchdog_publishes_the_router_drop_from_two_backends_to_one(self, tmp_path):
        store, _ = _replay(tmp_path, "two-shard-failover")
        with store:
            serving = [v for (v,) in store.query(
                "SELECT value FROM metrics WHERE name = 'router/serving_backends' "
                "ORDER BY ts_ns")]
            dead = store.query("SELECT max(value) FROM metrics "
                               "WHERE name = 'gen_fleet/shards/dead'")[0][0]
        assert serving[0] == 2 and min(serving) == 1 and dead == 1

    def test_the_committed_counter_freezes_behind_a_hung_refit(self, tmp_path):
        store, _ = _replay(tmp_path, "hung-weight-sync")
        with store:
            late = store.query("SELECT DISTINCT value FROM metrics "
                               "WHERE name IN ('rollout/committed_total', 'rollout/inflight') "
                               "AND ts_ns > (SELECT min(ts_ns) + 300e9 FROM metrics) "
                               "ORDER BY value")
        assert late == [(0.0,), (12.0,)]


class TestParticipantSeam:
    def test_a_fleet_model_without_an_observer_gives_the_same_shard_stays(self, tmp_path):
        ref, _ = _replay(tmp_path, "wedged-engine", variants=["separate-reported-failure-streak"])
        plugged, result = _replay(tmp_path, "wedged-engine",
                                  variants=["separate-reported-failure-streak"],
                                  fleet_health_factory=ObserverlessFleetHealth)
        with ref, plugged:
            assert _stays(plugged) == _stays(ref)
        assert result.raised is None

    def test_a_router_factory_replaces_the_reference_router(self, tmp_path):
        built = []

        def factory(spec):
            from rolloutscope.replay.sim.fleet import reference_router
            built.append(spec)
            return reference_router(spec)

        store, _ = _replay(tmp_path, "chaos-kill-serving", router_factory=factory)
        store.close()
        assert [s.backends for s in built] == [("http://gen-0:8000/v1",)]
        assert built[0].health_managed


class TestFleetScenarios:
    def test_a_fault_on_a_shard_outside_the_fleet_is_refused_with_its_path(self):
        base = scenarios.get("chaos-kill-idle")
        with pytest.raises(ScenarioError) as err:
            dataclasses.replace(base, faults=Faults(shard_kills=(ShardKill(shard=3, at_s=1.0),)))
        assert err.value.path == "faults.shard_kills[0].shard"

    def test_an_unknown_fix_is_refused(self):
        data = scenarios.get("demo").to_dict()
        data["fixes"] = ["fleet-health-enabeld"]
        with pytest.raises(ScenarioError):
            Scenario.from_dict(data)

    @pytest.mark.parametrize("name", ["demo", "retry-504-storm"])
    def test_fleet_scenarios_round_trip_through_json(self, name):
        s = scenarios.get(name)
        assert Scenario.from_json(s.to_json()) == s

    def test_the_same_fleet_scenario_and_seed_give_identical_spans_and_gauges(self, tmp_path):
        digests = []
        for _ in range(2):
            store, _ = _replay(tmp_path, "demo")
            with store:
                h = hashlib.sha256()
                for table in ("spans", "span_events", "open_spans", "metrics"):
                    for row in store.query(f"SELECT * FROM {table} ORDER BY ALL"):
                        h.update(repr(row).encode())
                digests.append(h.hexdigest())
        assert digests[0] == digests[1]


def test_scenario_run_without_takes_a_fix_away(tmp_path, capsys):
    db = str(tmp_path / "cli.duckdb")
    assert cli_main(["scenario", "run", "chaos-kill-serving", "--db", db,
                     "--without", "fleet-health-enabled"]) == 0
    out = capsys.readouterr().out
    assert "run chaos-kill-serving.s0-fleet-health-enabled:" in out
    assert "the controller raised RolloutRedispatchExhausted" in out
