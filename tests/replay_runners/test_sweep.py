"""Sweeps as Ray tasks on a local Ray (one session for the module): the 3x3 table of
snapshot-outlasts-deadline checked against what the scenario's numbers predict."""

from __future__ import annotations

import pytest

from rolloutscope.replay.scenarios import get
from rolloutscope.replay.sweep import (
    SweepError,
    UnknownGridKeyError,
    apply_point,
    heatmap_png,
    parse_grid,
    run_sweep,
    start_ray,
    write_table,
)

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    assert start_ray("local", num_cpus=2)  # as `rolloutscope sweep --ray local` starts it
    yield
    ray.shutdown()


def _stranded_expected(timeout_s: float, snapshot_s: float) -> bool:
    """snapshot-outlasts-deadline: the row needs 150 s of work before the snapshot parks it at
    150 s and 30 s after; the deadline runs through the snapshot (no pause fix). Try 0 ends
    in time iff 150 + snapshot + 30 <= timeout; otherwise it is abandoned and its completion
    stranded: the snapshot outlasts the budget left (timeout - 150) less the work left (30)."""
    turns = get("snapshot-outlasts-deadline").workload.prompts[0].rows[0].turns
    work = sum(t.model_s + t.tool_s for t in turns)
    first_snapshot = get("snapshot-outlasts-deadline").control.snapshots[0].at_s
    before = turns[0].model_s + turns[0].tool_s
    assert (work, first_snapshot, before) == (180.0, 150.0, 150.0)
    return snapshot_s > timeout_s - work


def test_a_3x3_sweep_on_local_ray_strands_exactly_where_the_snapshot_outlasts_the_budget(
        local_ray, tmp_path):
    grid = parse_grid(["rollout_timeout_s=120,180,240", "snapshot_duration_s=30,60,90"])
    seen = []
    result = run_sweep(get("snapshot-outlasts-deadline"), grid, out_dir=tmp_path,
                       ray="local", progress=seen.append)
    table = result.table
    assert result.executor == "ray:local" and len(table) == 9 and len(seen) == 9
    assert table.error.isna().all()
    for row in table.itertuples():
        expected = _stranded_expected(row.rollout_timeout_s, row.snapshot_duration_s)
        assert (row.stranded > 0) == expected, row
        assert ("stranded_completion" in row.incidents) == expected
    assert len({row.run_file for row in table.itertuples()}) == 9  # a run file per point
    csv, parquet = write_table(result)
    assert csv.read_text().startswith("point,rollout_timeout_s,snapshot_duration_s,committed")
    png = heatmap_png(result, "stranded", tmp_path / "heatmap.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failing_grid_point_is_a_row_with_its_error_not_the_end_of_the_sweep(
        local_ray, tmp_path):
    grid = parse_grid(["rollout_timeout_s=-5,240"])
    result = run_sweep(get("snapshot-outlasts-deadline"), grid, out_dir=tmp_path, ray="local")
    bad, good = result.table.iloc[0], result.table.iloc[1]
    assert "ScenarioError" in bad.error and "must be positive" in bad.error
    assert good.error is None and good.committed == 1
    assert len(result.failures) == 1


def test_grid_keys_map_onto_scenario_fields_and_unknown_ones_are_refused():
    scenario = get("snapshot-outlasts-deadline")
    changed = apply_point(scenario, {"config.checkpoint.prepare_timeout_s": 120,
                                     "snapshot_duration_s": 5, "seed": 7})
    assert changed.config.checkpoint.prepare_timeout_s == 120.0
    assert {s.commit_s for s in changed.control.snapshots} == {5.0}
    assert changed.seed == 7
    with pytest.raises(UnknownGridKeyError, match="rolout_timeout_s"):
        apply_point(scenario, {"rolout_timeout_s": 1})
    with pytest.raises(SweepError, match="expected KEY=v1,v2"):
        parse_grid(["rollout_timeout_s"])


def test_a_local_ray_the_sweep_starts_runs_its_workers_at_the_drivers_priority(local_ray):
    import os

    @ray.remote(num_cpus=1)
    def niceness() -> int:
        return os.nice(0)

    # Ray's default niceness 15 lets every other process on a shared machine go first
    assert ray.get([niceness.remote() for _ in range(2)]) == [os.nice(0)] * 2
