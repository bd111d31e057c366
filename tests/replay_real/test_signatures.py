"""The doubles, and the real code when a checkout is given, against the recorded upstream
signatures: parameter names, kinds, keyword-only markers, defaults, sync or async."""

from __future__ import annotations

import importlib

import pytest

from rolloutscope.replay.real import signatures
from rolloutscope.replay.real.sources import (
    DOUBLE_OF,
    LoadMethod,
    Upstream,
    UpstreamCode,
    file_sha256,
)

TABLE = signatures.load_table()
ENTRIES = {f"{f.module}@{f.short_commit}": f for f in TABLE}


def test_the_table_names_a_double_for_every_recorded_file_and_nothing_else():
    assert {(f.module, f.short_commit) for f in TABLE} == set(DOUBLE_OF)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_each_double_has_the_recorded_upstream_signatures(entry):
    recorded = ENTRIES[entry]
    double = importlib.import_module(DOUBLE_OF[(recorded.module, recorded.short_commit)])
    live = signatures.describe(double, {q: list(m) for q, m in recorded.objects.items()})
    assert signatures.differences(recorded.objects, live) == []


def test_a_changed_signature_is_reported_member_by_member():
    recorded = ENTRIES["nemo_rl.models.generation.fleet_health@7ea279a"]

    class Drifted:
        def report_refit(self, shard_idx, weight_version):  # positional: not the real one
            ...

    live = {"GenerationFleetHealth": {"report_refit": signatures.describe_member(
        Drifted, "report_refit")}}
    expected = {"GenerationFleetHealth": {
        "report_refit": recorded.objects["GenerationFleetHealth"]["report_refit"]}}
    diff, = signatures.differences(expected, live)
    assert diff == ("GenerationFleetHealth.report_refit: method report_refit(shard_idx, "
                    "weight_version) != expected method report_refit(shard_idx, "
                    "*weight_version)")


def test_the_table_records_keyword_only_constructors_and_async_members():
    fleet = ENTRIES["nemo_rl.models.generation.fleet_health@7ea279a"].objects
    kinds = {p.name: p.kind for p in fleet["GenerationFleetHealth"]["__init__"].params}
    assert kinds == {"shard_count": "KEYWORD_ONLY", "policy": "KEYWORD_ONLY",
                     "base_urls": "KEYWORD_ONLY", "clock": "KEYWORD_ONLY"}
    control = ENTRIES["nemo_gym._checkpoint.control@011c338"].objects
    assert control["ParticipantControlPlane"]["prepare"].kind == "async"
    agent = ENTRIES["nemo_gym._checkpoint.agent@011c338"].objects
    assert agent["AgentSessionParticipant"]["activation"].kind == "asynccontextmanager"


def _check_real(upstream: Upstream, root) -> list[str]:
    code = UpstreamCode.locate(upstream, paths={upstream.value: str(root)})
    problems, checked = [], 0
    for entry in TABLE:
        if entry.upstream != upstream.value or entry.sha256 is None:
            continue  # a branch version recorded from an excerpt: not in a checkout
        loaded = code.module(entry.module, classes=tuple(q for q in entry.objects if q != "."))
        assert loaded.loaded_by is not LoadMethod.DOUBLE
        live = signatures.describe(loaded.module,
                                   {q: list(m) for q, m in entry.objects.items()})
        same_file = file_sha256(loaded.file) == entry.sha256
        for diff in signatures.differences(entry.objects, live):
            problems.append(f"{entry.module} ({'same file as' if same_file else 'changed since'}"
                            f" {entry.short_commit}): {diff}")
        checked += 1
    assert checked, f"no {upstream.value} entry was checked"
    return problems


def test_the_real_nemo_rl_code_has_the_recorded_signatures(real_rl):
    assert _check_real(Upstream.NEMO_RL, real_rl) == [], (
        "upstream drifted: refresh replay/real/upstream_signatures.json with "
        "scripts/record_upstream_signatures.py and check the adapters")


def test_the_real_nemo_gym_code_has_the_recorded_signatures(real_gym):
    assert _check_real(Upstream.NEMO_GYM, real_gym) == [], (
        "upstream drifted: refresh replay/real/upstream_signatures.json with "
        "scripts/record_upstream_signatures.py and check the adapters")
