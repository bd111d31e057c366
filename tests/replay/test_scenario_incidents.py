"""Every built-in incident scenario yields exactly its expected incident kinds, and each fix
variant removes its incident: the incident views judged against the engine's ground truth."""

from __future__ import annotations

import pytest

from rolloutscope.collectors.store import RunStore
from rolloutscope.replay.runner import replay_into_store
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
]


def _kinds(tmp_path, name, variants):
    path = tmp_path / f"{name}.duckdb"
    with RunStore(path) as store:
        replay_into_store(get(name), store, variants=variants)
    with RunStore(path, read_only=True) as store:
        return set(store.view("incidents").kind), store.view("incidents")


@pytest.mark.parametrize(("name", "variants", "expected"), EXPECTED,
                         ids=[f"{n}{'+' + '+'.join(v) if v else ''}" for n, v, _ in EXPECTED])
def test_the_scenario_yields_exactly_its_incident_kinds(tmp_path, name, variants, expected):
    kinds, _ = _kinds(tmp_path, name, variants)
    assert kinds == expected


def test_the_seed004_incident_tells_the_seed004_numbers(tmp_path):
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
