"""``rolloutscope why`` (rolloutscope.store.waiting) on the built-in scenarios, each replayed into
a real run file: at a moment taken from the scenario's definition and its incidents, the answer
names the real blocker."""

from __future__ import annotations

import json

import pytest

from rolloutscope.cli import main
from rolloutscope.replay import scenarios
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.store import RunStore
from rolloutscope.store.waiting import MomentError, WaitState, waiting_on

RUN = "r"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """name -> (scenario, path): each scenario replayed on the virtual clock into its file."""
    out = {}
    for name in ("hung-weight-sync", "retry-504-storm", "wedged-engine",
                 "snapshot-outlasts-deadline"):
        path = tmp_path_factory.mktemp("why") / f"{name}.duckdb"
        scenario = scenarios.get(name)
        with RunStore(path) as store:
            replay_into_store(scenario, store, run_id=RUN)
        out[name] = (scenario, path)
    return out


def _incident(store: RunStore, kind: str) -> dict:
    rows = store.query_df("SELECT i.*, (i.start_ns - t.origin_ns) / 1e9 AS start_s "
                          "FROM incidents i JOIN run_thresholds t USING (run_id) "
                          "WHERE kind = ? ORDER BY start_ns", [kind])
    assert len(rows), f"no {kind} incident"
    return rows.iloc[0].to_dict()


class TestTheAnswerNamesTheRealBlocker:
    def test_a_hung_weight_sync_holds_every_waiting_group_at_admission(self, stores):
        scenario, path = stores["hung-weight-sync"]
        with RunStore(path, read_only=True) as store:
            stall = _incident(store, "stall")
            th = store.query("SELECT stall_timeout_s FROM run_thresholds")[0][0]
            # the moment the watchdog's threshold passed
            w = waiting_on(store, at_s=stall["start_s"] + th)
        assert w.waiting > 0
        assert "weight sync" in w.answer
        assert {g.state for g in w.groups} == {WaitState.ADMISSION}
        assert {g.resource.kind for g in w.groups} == {"weight_sync"}
        sync_at = scenario.control.weight_syncs[0].at_s
        assert {g.evidence.name for g in w.groups} == {"rl.weight_sync"}
        assert {g.evidence.start_s for g in w.groups} == {sync_at}

    def test_a_retry_storm_waits_on_the_hung_backend(self, stores):
        scenario, path = stores["retry-504-storm"]
        hung = scenario.faults.shard_wedges[0].shard
        backend_timeout_s = scenario.config.router.backend_timeout_s
        with RunStore(path, read_only=True) as store:
            storm = _incident(store, "retry_storm")
            # halfway through the retried call's second try
            w = waiting_on(store, at_s=storm["start_s"] + backend_timeout_s / 2)
        (group,) = [g for g in w.groups if g.rollout == storm["subject"]]
        assert group.state == WaitState.GENERATING
        assert group.resource.name.startswith(f"shard {hung} ")
        assert group.resource.in_trouble
        assert group.evidence.name == "rl.router.request"
        assert f"shard {hung}" in w.answer and "finished nothing" in w.answer

    def test_a_wedged_engine_is_named_while_a_group_waits_on_it(self, stores):
        scenario, path = stores["wedged-engine"]
        wedged = scenario.faults.shard_wedges[0].shard
        with RunStore(path, read_only=True) as store:
            inc = _incident(store, "wedged_backend")
            assert inc["subject"] == f"shard {wedged}"
            # the middle of one of the failed requests the incident cites
            start, end = store.query(
                "SELECT start_ns, end_ns FROM all_spans WHERE span_id = ? "
                "AND name = 'rl.router.request'", [list(inc["evidence"])[-1]])[0]
            w = waiting_on(store, at_ns=(start + end) // 2)
        blocked = [g for g in w.groups if g.resource.name.startswith(f"shard {wedged} ")]
        assert blocked and all(g.resource.in_trouble for g in blocked)
        assert f"shard {wedged}" in w.answer

    def test_a_snapshot_that_parks_a_rollout_is_what_its_group_waits_on(self, stores):
        scenario, path = stores["snapshot-outlasts-deadline"]
        snap = scenario.control.snapshots[0]
        with RunStore(path, read_only=True) as store:
            first = store.query("SELECT checkpoint_id FROM checkpoint_windows "
                                "ORDER BY start_ns LIMIT 1")[0][0]
            w = waiting_on(store, at_s=snap.at_s + snap.commit_s / 4)
        (group,) = w.groups
        assert group.state == WaitState.PARKED
        assert group.resource.kind == "snapshot" and first in group.resource.name
        assert group.evidence.name == "gym.agent.parked"
        assert group.for_s == pytest.approx(snap.commit_s / 4)
        assert "parked by snapshot 1" in w.answer


class TestMoments:
    def test_the_default_moment_is_the_last_the_store_holds(self, stores):
        scenario, path = stores["hung-weight-sync"]
        with RunStore(path, read_only=True) as store:
            w = waiting_on(store)
        assert w.at_s == pytest.approx(scenario.horizon_s, abs=5.0)

    def test_a_step_is_read_at_the_end_of_its_longest_wait(self, stores):
        scenario, path = stores["wedged-engine"]
        with RunStore(path, read_only=True) as store:
            steps = store.query("SELECT count(*) FROM all_spans WHERE name = 'rl.train_step'")
            w = waiting_on(store, step=3)
            last = waiting_on(store, step=steps[0][0] + 1)
            default = waiting_on(store)
        assert w.step == 3 and w.waiting >= 1
        # the step that never trained: the last moment held
        assert last.at_ns == default.at_ns

    def test_a_step_the_run_never_reached_is_refused_with_what_it_has(self, stores):
        _, path = stores["wedged-engine"]
        with RunStore(path, read_only=True) as store, pytest.raises(MomentError) as err:
            waiting_on(store, step=99)
        assert "no train step 99" in str(err.value) and "completed" in str(err.value)


class TestTheCommand:
    def test_why_prints_the_answer_then_each_group_with_its_evidence(self, stores, capsys):
        _, path = stores["hung-weight-sync"]
        assert main(["why", str(path), "--at", "500"]) == 0
        out = capsys.readouterr().out
        first, *rest = out.splitlines()
        assert first.startswith(f"run {RUN} at 500.0 s: step ") and "weight sync" in first
        assert any("[rl.weight_sync " in line for line in rest)

    def test_why_json_is_the_answer_record(self, stores, capsys):
        _, path = stores["snapshot-outlasts-deadline"]
        assert main(["why", str(path), "--at", "170", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["at_s"] == 170.0 and doc["groups"][0]["state"] == "parked"
        assert doc["groups"][0]["evidence"]["name"] == "gym.agent.parked"

    def test_why_refuses_step_and_at_together_and_an_unknown_run(self, stores, capsys):
        _, path = stores["wedged-engine"]
        assert main(["why", str(path), "--at", "5", "--step", "2"]) == 2
        assert "not both" in capsys.readouterr().err
        assert main(["why", str(path), "--run-id", "nope"]) == 2
        assert "no run 'nope'" in capsys.readouterr().err
