"""Every built-in incident scenario yields exactly its expected incident kinds, and each fix
variant removes its incident: the incident views judged against the engine's ground truth."""

from __future__ import annotations

import pytest

from rolloutscope.store import RunStore
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get

# (scenario, variants) -> the incident kinds it must produce, and nothing else
EXPECTED = [
    ("snapshot-outlasts-deadline", (), {"deadline_fired_while_parked", "stranded_completion"}),
    ("snapshot-outlasts-deadline", ("pause-deadlines-during-snapshot",), set()),
    # the lost reply strands its completion; no prompt group commits for 600 s meanwhile
    ("lost-reply", (), {"stranded_completion", "stall"}),
    ("lost-reply", ("retire-then-adopt",), set()),
    # the older gate answers 409 to a sibling's call at closed admission: a data failure that
    # abandons the try (stranding the streamed row) and holds back every commit for 600 s
    ("prepare-blocked-by-streaming", (), {"prepare_blocked", "stranded_completion", "stall"}),
    ("prepare-blocked-by-streaming", ("calls-wait-at-closed-admission",), {"prepare_blocked"}),
    ("worker-lost-in-commit", (), {"export_failed"}),
    # the silent controller commits nothing for 1000 s while work remains
    ("lease-expiry", (), {"lease_expired", "stall"}),
    ("healthy-baseline", (), set()),
    # RL #3590. A leading "-" takes a fix away from the scenario's own (the merged system's).
    # Part 1's system: the dead endpoint parks each try in Gym's transport loop until its 30 s
    # deadline; five tries raise RolloutRedispatchExhausted 222 s after the kill
    ("chaos-kill-idle", (), {"redispatch_exhausted"}),
    ("chaos-kill-idle", ("fleet-health-enabled",), {"quarantine"}),
    ("chaos-kill-serving", (), {"quarantine"}),
    ("chaos-kill-serving", ("-fleet-health-enabled",), {"redispatch_exhausted"}),
    ("two-shard-failover", (), {"quarantine"}),
    ("two-shard-failover", ("-fleet-health-enabled",), set()),
    # the refit hangs on the dead rank either way; fleet health adds the quarantine
    ("hung-weight-sync", (), {"quarantine", "stall"}),
    ("hung-weight-sync", ("-fleet-health-enabled",), {"stall"}),
    # the engine stays wedged; the fix is that reported failures condemn it
    ("wedged-engine", (), {"wedged_backend"}),
    ("wedged-engine", ("separate-reported-failure-streak",), {"wedged_backend", "quarantine"}),
    # the hung backend fails one call per backend_timeout_s either way; the 500 ends the storm
    ("retry-504-storm", (), {"retry_storm", "wedged_backend"}),
    ("retry-504-storm", ("router-500-not-504",), {"wedged_backend"}),
    ("stale-weights-serving", (), {"stale_weights_serving"}),
    ("fleet-exhausted", (), {"quarantine"}),
    ("demo", (), {"quarantine", "deadline_fired_while_parked", "stranded_completion", "stall"}),
]


def _kinds(tmp_path, name, variants):
    path = tmp_path / f"{name}.duckdb"
    added = [v for v in variants if not v.startswith("-")]
    removed = [v[1:] for v in variants if v.startswith("-")]
    with RunStore(path) as store:
        replay_into_store(get(name), store, variants=added, without=removed)
    with RunStore(path, read_only=True) as store:
        return set(store.view("incidents").kind), store.view("incidents")


@pytest.mark.parametrize(("name", "variants", "expected"), EXPECTED,
                         ids=[f"{n}{'+' + '+'.join(v) if v else ''}" for n, v, _ in EXPECTED])
def test_the_scenario_yields_exactly_its_incident_kinds(tmp_path, name, variants, expected):
    kinds, _ = _kinds(tmp_path, name, variants)
    assert kinds == expected


def test_the_p1_incident_tells_the_snapshots_and_deadlines_numbers(tmp_path):
    _, incidents = _kinds(tmp_path, "snapshot-outlasts-deadline", ())
    p1 = incidents[incidents.kind == "deadline_fired_while_parked"].iloc[0]
    assert "its 180 s deadline fired at 180.0 s" in p1.summary
    assert "30.0 s of budget left when the snapshot began at 150.0 s" in p1.summary
    stranded = incidents[incidents.kind == "stranded_completion"].iloc[0]
    assert stranded.caused_by == p1.incident_id
    assert "finished at 240.0 s" in stranded.summary
    assert "3 later snapshot prepare(s) failed behind it, each waiting out " \
           "prepare_timeout_s=300 s" in stranded.summary


def test_the_lease_expiry_names_the_phase_it_expired_in(tmp_path):
    _, incidents = _kinds(tmp_path, "lease-expiry", ())
    leases = incidents[incidents.kind == "lease_expired"]
    assert len(leases) == 4  # environment, model, agent, resources
    assert all("expired at 1000.0 s in phase prepared" in s for s in leases.summary)


def _one(incidents, kind):
    rows = incidents[incidents.kind == kind]
    assert len(rows) == 1
    return rows.iloc[0]


class TestFleetIncidentNumbers:
    def test_an_idle_kill_without_fleet_health_fails_222_s_after_the_kill(self, tmp_path):
        _, incidents = _kinds(tmp_path, "chaos-kill-idle", ())
        row = _one(incidents, "redispatch_exhausted")
        assert "failed 5 times on infrastructure errors (RolloutTimeout) from 145.0 s to " \
               "310.0 s" in row.summary  # the kill was at 88 s

    def test_fleet_health_detects_the_idle_kill_in_62_s_on_the_watchdog_tick(self, tmp_path):
        _, incidents = _kinds(tmp_path, "chaos-kill-idle", ("fleet-health-enabled",))
        row = _one(incidents, "quarantine")
        assert "quarantined at 150.0 s" in row.summary
        assert "62.0 s after the fault" in row.summary
        assert "serving backends 1 -> 0" in row.summary

    def test_probes_at_their_own_interval_detect_the_idle_kill_in_12_s(self, tmp_path):
        _, incidents = _kinds(tmp_path, "chaos-kill-idle",
                              ("fleet-health-enabled", "probe-at-probe-interval"))
        assert "12.0 s after the fault" in _one(incidents, "quarantine").summary

    def test_a_serving_kill_is_condemned_by_reported_failures_within_seconds(self, tmp_path):
        _, incidents = _kinds(tmp_path, "chaos-kill-serving", ())
        row = _one(incidents, "quarantine")
        assert "dead on reported_failure" in row.summary
        assert "7.0 s after the fault" in row.summary

    def test_failover_drops_the_router_from_two_backends_to_one(self, tmp_path):
        _, incidents = _kinds(tmp_path, "two-shard-failover", ())
        assert "serving backends 2 -> 1" in _one(incidents, "quarantine").summary

    def test_the_hung_refit_stalls_with_nothing_in_flight(self, tmp_path):
        _, incidents = _kinds(tmp_path, "hung-weight-sync", ())
        row = _one(incidents, "stall")
        assert "(0 rollouts in flight, 12 groups committed, step 2/150, " \
               "stall_timeout_s=360)" in row.summary

    def test_a_wedged_engine_oscillates_without_the_separate_streak(self, tmp_path):
        _, incidents = _kinds(tmp_path, "wedged-engine", ())
        row = _one(incidents, "wedged_backend")
        assert "it was never quarantined" in row.summary
        assert "healthy <- suspect flip(s)" in row.summary

    def test_with_the_separate_streak_reported_failures_condemn_the_wedged_engine(
            self, tmp_path):
        _, incidents = _kinds(tmp_path, "wedged-engine", ("separate-reported-failure-streak",))
        assert "reported failures condemned it at 85.0 s" in \
            _one(incidents, "wedged_backend").summary

    def test_the_504_storm_raises_the_ceiling_on_every_try(self, tmp_path):
        _, incidents = _kinds(tmp_path, "retry-504-storm", ())
        row = _one(incidents, "retry_storm")
        assert "retried 3 times on HTTP 504" in row.summary
        assert "rising from 4 to 6" in row.summary
