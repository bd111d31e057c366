"""Checkpoint figures at scale: Gym #3883's table, the resized scenarios, the replayed figures."""

from __future__ import annotations

import dataclasses

import pytest

from rolloutscope.postmortem import scale
from rolloutscope.replay import scenarios

SMALL = 0.1  # 800 and 1,600 rollouts: the shape of scale-16k in a second


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return scale.replayed(scale.replay_sizes(tmp_path_factory.mktemp("scale"), scale=SMALL))


def test_gym_3883s_published_table_is_carried_verbatim():
    table = scale.comparison_table({})
    assert list(table.source) == ["Gym #3883", "Gym #3883", "Gym #3883", "Gym #3883 (rerun)"]
    assert list(table.prepare_s) == [0.67, 0.56, 7.57, 3.60]
    assert list(table.commit_s) == [0.60, 0.69, 4.64, 1.83]
    assert list(table.restore_s) == [0.60, 0.56, 4.97, 3.23]
    assert list(table.in_flight) == [4_201, 4_083, 14_320, 12_228]


def test_the_16k_scenario_at_full_scale_is_scale_16k_in_all_but_its_description():
    base = scenarios.get("scale-16k")
    assert dataclasses.replace(scale.scale_scenario(16_000), description=base.description) == base


def test_the_8k_variant_halves_the_prompts_and_commits_in_gym_3883s_8k_time():
    base, small = scenarios.get("scale-16k"), scale.scale_scenario(8_000)
    assert small.name == "scale-8k"
    assert small.workload.generated.count == base.workload.generated.count // 2 == 1_000
    assert {s.commit_s for s in small.control.snapshots} == {0.69}
    assert small.config == base.config
    assert [s.at_s for s in small.control.snapshots] == [s.at_s for s in base.control.snapshots]


def test_a_scaled_down_variant_says_so_in_its_name_and_keeps_its_sizes_commit():
    sc = scale.scale_scenario(16_000, scale=0.25)
    assert sc.name == "scale-16k-x0.25" and sc.workload.generated.count == 500
    assert {s.commit_s for s in sc.control.snapshots} == {4.64}


@pytest.mark.parametrize(("rollouts", "factor"), [(12_000, 1.0), (8_000, 0.0), (8_000, 2.0)])
def test_sizes_and_scales_gym_3883_did_not_publish_are_refused(rollouts, factor):
    with pytest.raises(scale.PostmortemError):
        scale.scale_scenario(rollouts, scale=factor)


def test_the_busiest_snapshot_parks_nearly_every_rollout(checkpoints):
    for size, c in checkpoints.items():
        assert c.rollouts == round(size * SMALL)
        assert c.in_flight / c.rollouts > 0.95
        assert c.checkpoint_id.endswith("snapshot-1")


def test_the_replayed_commit_is_the_configured_one_and_nothing_is_restored(checkpoints):
    assert checkpoints[8_000].commit_s == 0.69
    assert checkpoints[16_000].commit_s == 4.64
    assert checkpoints[8_000].restore_s is None and checkpoints[16_000].restore_s is None


def test_the_replayed_prepare_is_the_wait_for_tool_steps_not_the_model_stage(checkpoints):
    bound = scale.longest_tool_step_s(scale.scale_scenario(16_000, scale=SMALL))
    assert bound == 90.0
    for c in checkpoints.values():
        assert c.model_prepare_s == 0.0
        assert 0 < c.prepare_s <= bound


def test_the_findings_set_the_replay_against_gym_3883s_growth(checkpoints):
    found = scale.findings(checkpoints, scale=SMALL)
    assert found.published_in_flight_share == 0.764  # 12,228 of 16,000
    assert found.measured_growth == (5.37, 13.52)  # 3.60 / 0.67 and 7.57 / 0.56
    assert found.replayed_growth < 1.2
    assert found.replayed_in_flight_share > found.published_in_flight_share
    assert found.replayed_prepare_s <= found.prepare_bound_s
