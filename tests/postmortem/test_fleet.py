"""P4 from RL #3590's idle kill: lanes, detection, serving backends, the probe sweep."""

from __future__ import annotations

import holoviews as hv
import pytest

from rolloutscope.postmortem import fleet


@pytest.fixture(scope="module")
def sweep(idle_kill_run, tmp_path_factory):
    return fleet.probe_sweep(idle_kill_run, tmp_path_factory.mktemp("sweep"),
                             probe_intervals_s=(5.0,), thresholds=(1, 3))


def test_the_shard_goes_healthy_suspect_dead_on_failed_probes(idle_kill_run):
    with idle_kill_run.open() as store:
        stays = fleet.shard_stays(store, idle_kill_run.run_id)
    assert list(stays.state) == ["healthy", "suspect", "dead"]
    assert list(stays.from_s) == [0.0, 90.0, 150.0]
    assert list(stays.trigger) == ["initial", "probe_failure", "probe_failure"]
    assert stays.probe_failures.iloc[-1] == 3 and not stays.serving.iloc[-1]


def test_the_idle_kill_is_quarantined_62_seconds_later(idle_kill_run):
    with idle_kill_run.open() as store:
        found = fleet.detection(store, idle_kill_run.run_id)
        injected = fleet.faults(store, idle_kill_run.run_id)
        table = fleet.quarantines(store, idle_kill_run.run_id)
    assert (found.fault_s, found.detected_s, found.by, found.seconds) == (
        88.0, 150.0, "quarantine", 62.0)
    assert list(injected.kind) == ["shard_kill"] and injected.at_s[0] == 88.0
    assert list(table.detection_s) == [62.0]


def test_the_router_serving_set_empties_at_the_quarantine(idle_kill_run):
    with idle_kill_run.open() as store:
        serving = fleet.serving_backends(store, idle_kill_run.run_id)
    assert list(serving.serving) == [1, 0]
    assert serving.t_s.iloc[-1] == 150.0


def test_without_fleet_health_only_the_retry_budget_ends_the_run_after_222_seconds(sweep):
    row = sweep.table[sweep.table["mode"] == fleet.NO_FLEET_HEALTH].iloc[0]
    assert (row.detection_s, row.detected_by, row.run_ended_by) == (
        222.0, "redispatch_exhausted", "RolloutRedispatchExhausted")


def test_detection_is_the_next_probe_plus_one_period_per_further_failure(sweep):
    assert sweep.detection_s(fleet.WATCHDOG_TICK, threshold=1) == 2.0
    assert sweep.detection_s(fleet.WATCHDOG_TICK, threshold=3) == 62.0
    assert sweep.detection_s(fleet.PROBE_INTERVAL, threshold=1, every_s=5.0) == 2.0
    assert sweep.detection_s(fleet.PROBE_INTERVAL, threshold=3, every_s=5.0) == 12.0


def test_the_sweep_grid_has_a_row_per_cadence_and_a_column_per_threshold(sweep):
    grid = sweep.grid()
    assert list(grid.columns) == ["T=1", "T=3"]
    assert list(grid.index) == ["on the watchdog tick (30 s)", "every probe_interval_s = 5 s"]
    assert grid.loc["on the watchdog tick (30 s)", "T=3"] == 62.0
    assert sweep.table.error.isna().all()


def test_an_ambiguous_lookup_in_the_sweep_is_an_error(sweep):
    with pytest.raises(fleet.PostmortemError, match="has 2 replays"):
        sweep.detection_s(fleet.WATCHDOG_TICK)


def test_the_heatmap_holds_one_cell_per_probed_replay(sweep):
    plot = fleet.detection_heatmap(sweep)
    heat = plot.get(0)
    assert isinstance(heat, hv.HeatMap)
    assert sorted(heat.dimension_values("detection_s")) == [2.0, 2.0, 12.0, 62.0]


def test_a_run_without_a_fleet_cannot_be_probe_swept(p1_run, tmp_path):
    with pytest.raises(fleet.PostmortemError, match="no generation fleet"):
        fleet.probe_sweep(p1_run, tmp_path)
