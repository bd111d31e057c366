"""The run a postmortem works on: given by path and id, or replayed from a built-in scenario."""

from __future__ import annotations

import pytest

from rolloutscope.store import RunStore
from rolloutscope.postmortem import run_tables
from rolloutscope.replay import scenarios
from rolloutscope.replay.run_scenario import replay_into_store


def test_a_postmortem_without_a_run_replays_the_named_scenario_into_a_scratch_store(p1_run):
    assert p1_run.replayed_from == "snapshot-outlasts-deadline"
    assert p1_run.run_id == "snapshot-outlasts-deadline.s0"
    with p1_run.open() as store:
        assert store.run_ids() == [p1_run.run_id]


def test_a_store_with_one_run_needs_no_run_id(p1_run):
    ref = run_tables.open_run(p1_run.path, scenario="unused-when-a-path-is-given")
    assert (ref.path, ref.run_id, ref.replayed_from) == (p1_run.path, p1_run.run_id, None)


def test_a_store_with_several_runs_asks_which_one(tmp_path):
    path = tmp_path / "two.duckdb"
    with RunStore(path) as store:
        for seed in (0, 1):
            replay_into_store(scenarios.get("snapshot-outlasts-deadline"), store, seed=seed)
    with pytest.raises(run_tables.PostmortemError, match="holds 2 runs; name one of"):
        run_tables.open_run(path, scenario="snapshot-outlasts-deadline")
    with pytest.raises(run_tables.PostmortemError, match="holds no run 'nope'"):
        run_tables.open_run(path, "nope", scenario="snapshot-outlasts-deadline")
    assert run_tables.open_run(path, "snapshot-outlasts-deadline.s1",
                         scenario="snapshot-outlasts-deadline").run_id.endswith(".s1")


def test_the_incident_table_counts_seconds_from_the_run_start_like_the_summaries(p1_run):
    with p1_run.open() as store:
        table = run_tables.incident_table(store, p1_run.run_id)
        only_p1 = run_tables.incident_table(store, p1_run.run_id,
                                      kinds=["deadline_fired_while_parked"])
        first = run_tables.earliest_incident(store, p1_run.run_id, "stranded_completion")
        none = run_tables.earliest_incident(store, p1_run.run_id, "quarantine")
    assert list(table.kind) == ["deadline_fired_while_parked", "stranded_completion"]
    assert list(table.start_s) == [180.0, 240.0]
    assert "fired at 180.0 s" in table.summary[0]
    assert list(only_p1.kind) == ["deadline_fired_while_parked"]
    assert first is not None and first["start_s"] == 240.0 and none is None


def test_watchdog_changes_keep_only_the_samples_where_a_watched_gauge_moved(idle_kill_run):
    with idle_kill_run.open() as store:
        changes = run_tables.watchdog_changes(store, idle_kill_run.run_id,
                                        ["gen_fleet/shards/suspect", "gen_fleet/shards/dead"])
    suspect = list(changes["gen_fleet/shards/suspect"])
    assert suspect[0] == 0 and 1 in suspect
    assert all(a != b for a, b in zip(suspect[:-2], suspect[1:-1], strict=True))
