"""The step ledger on built-in scenarios: each step's wall time split without overlap, and the
groups it waited for last with why, checked against what the scenario itself defines (its
snapshot, its deadline, its wedged shard), not against the ledger's own output."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from rolloutscope.cli import main
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore
from rolloutscope.store.ledger import SPLIT, ledger_table, straggler_table
from rolloutscope.store.steps import step_table

SCENARIOS = ("snapshot-outlasts-deadline", "retry-504-storm", "wedged-engine")
# demo's snapshots and weight syncs overlap each other and training: the split must not count
# a second twice
SPLIT_SCENARIOS = (*SCENARIOS, "demo")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("ledger") / "scenarios.duckdb"
    with RunStore(path) as store:
        for name in SPLIT_SCENARIOS:
            replay_into_store(get(name), store, run_id=name)
    return path


@pytest.fixture
def store(runs):
    with RunStore(runs, read_only=True) as s:
        yield s


@pytest.mark.parametrize("name", SPLIT_SCENARIOS)
def test_each_steps_wall_time_splits_into_parts_that_add_up_to_it(store, name):
    ledger = ledger_table(store, name)
    # the same steps, with the same boundaries, as rolloutscope diff counts them
    trained = step_table(store, name).query("trained")
    assert list(ledger.step) == list(trained.step)
    assert list(ledger.start_s) == pytest.approx(list(trained.start_s), abs=1e-3)
    assert list(ledger.end_s) == pytest.approx(list(trained.end_s), abs=1e-3)
    assert set(ledger.dialect) == {"rl"}
    for r in ledger.itertuples():
        parts = sum(getattr(r, c) for c in SPLIT)
        assert parts == pytest.approx(r.duration_s, abs=1e-6), r.step
        assert min(getattr(r, c) for c in SPLIT) >= -1e-6, r.step
        assert abs(r.other_s) < 1e-6  # every second of an 'rl' step has its part
        assert r.wait_s == pytest.approx(r.ready_s - r.wait_start_s, abs=1e-3)
        assert r.stragglers == max(1, math.ceil(r.groups / 10)) if r.groups else True
    # the steps follow each other: one starts where the previous one's training ended
    assert (ledger.start_s.iloc[1:].to_numpy() == ledger.end_s.iloc[:-1].to_numpy()).all()


def test_the_group_a_snapshot_parked_past_its_deadline_is_the_steps_straggler(store):
    sc = get("snapshot-outlasts-deadline")
    snapshot = sc.control.snapshots[0]
    (row,) = straggler_table(store, sc.name).itertuples()
    assert (row.step, row.rollout_id, row.prompt_idx) == (1, "p00000", 0)
    # try 0 timed out while parked, try 1 committed: a re-dispatch after a timeout
    assert (row.attempt, row.tries, row.failed_tries, row.timeouts) == (1, 2, 1, 1)
    assert row.failure_reasons == "RolloutTimeout"
    assert row.parked_s == pytest.approx(snapshot.commit_s)
    assert row.snapshots.endswith("snapshot-1")
    assert "deadline_fired_while_parked" in row.incidents
    assert row.why.startswith("re-dispatched: try 1 after 1 failed (RolloutTimeout)")
    assert "deadline fired 1x" in row.why and "parked 60.0 s by snapshot" in row.why
    # the try that committed started when the fence reopened, and ran a deadline's length
    assert row.duration_s == pytest.approx(sc.config.rollout.rollout_timeout_s)
    (step,) = ledger_table(store, sc.name).itertuples()
    assert step.parked_s == pytest.approx(snapshot.commit_s)  # the only snapshot in the wait
    assert step.ready_s == pytest.approx(row.committed_s)


def test_the_call_stuck_in_a_504_storm_is_still_running_after_the_last_step(store):
    sc = get("retry-504-storm")
    wedge = sc.faults.shard_wedges[0]
    stuck = next(p for p in sc.workload.prompts if p.arrival_s >= wedge.at_s)
    backend_timeout_s = sc.config.router.backend_timeout_s
    late = straggler_table(store, sc.name)
    pending = late[late.committed_s.isna()]
    assert list(pending.rollout_id) == [f"p{stuck.idx:05d}"]
    row = pending.iloc[0]
    assert row.step == sc.config.training.max_num_steps + 1
    # one 504 each time the hung backend's timeout ran out before the scenario's horizon
    assert row.retries == int((sc.horizon_s - stuck.arrival_s) // backend_timeout_s)
    assert row.retry_statuses == "504" and row.failed_shards == str(wedge.shard)
    assert "retry_storm" in row.incidents and "still running" in row.why
    # no trained step waited for it: the steps took the groups that committed
    assert f"p{stuck.idx:05d}" not in set(late[late.committed_s.notna()].rollout_id)


def test_the_last_group_of_a_step_after_the_wedge_failed_on_the_wedged_shard(store):
    sc = get("wedged-engine")
    wedge = sc.faults.shard_wedges[0]
    late = straggler_table(store, sc.name)
    assert list(late.step) == list(range(1, sc.config.training.max_num_steps + 1))
    arrivals = {f"p{p.idx:05d}": p.arrival_s for p in sc.workload.prompts}
    for row in late.itertuples():
        if arrivals[row.rollout_id] >= wedge.at_s:
            # one row of the group landed on the wedged shard, failed, and Gym retried it
            assert row.failed_shards == str(wedge.shard), row.rollout_id
            assert row.retries == 1 and row.retry_statuses == "500", row.rollout_id
            assert "generation failed on shard 1" in row.why
        else:
            assert pd.isna(row.failed_shards) and row.retries == 0
            assert row.why.startswith("no hold-up recorded"), row.rollout_id


def test_the_command_prints_each_steps_last_groups_and_the_json_holds_them(runs, capsys):
    assert main(["steps", str(runs), "--run-id", "snapshot-outlasts-deadline"]) == 0
    out = capsys.readouterr().out
    assert "1 train steps (rl)" in out
    assert "step 1: p00000 committed at 390 s: re-dispatched" in out
    assert main(["steps", str(runs), "--run-id", "retry-504-storm", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["steps"]) == 15
    assert doc["pending"][0]["step"] == 16
    assert doc["pending"][0]["straggler_groups"][0]["rollout_id"] == "p00002"
    assert all(len(s["straggler_groups"]) == 1 for s in doc["steps"])


def test_the_ledger_reads_the_same_through_a_collectors_query_endpoint(runs, tmp_path):
    """serve's live dashboard reads its run through the collector (RemoteRunStore)."""
    import shutil

    from rolloutscope.store.ledger import ledger_report
    from rolloutscope.store.remote import RemoteRunStore
    from tests.collectors.conftest import start_collector

    served = tmp_path / "served.duckdb"
    shutil.copy(runs, served)
    with RunStore(runs, read_only=True) as local:
        want = ledger_report(local, "snapshot-outlasts-deadline")
    collector = start_collector(served)
    try:
        with RemoteRunStore(collector.http) as remote:
            got = ledger_report(remote, "snapshot-outlasts-deadline")
    finally:
        assert collector.stop() == 0
    assert got == want
    assert got["steps"][0]["straggler_groups"][0]["rollout_id"] == "p00000"
