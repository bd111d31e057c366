"""The engine end to end: built-in scenarios replayed into a real run store, read back through
the model views; the P1 timeline of RL #4266 to the second; determinism; the CLI."""

from __future__ import annotations

import hashlib
import json

import pytest

from rolloutscope.cli import main as cli_main
from rolloutscope.store import RunStore
from rolloutscope.replay import scenarios
from rolloutscope.replay.event_engine import PacedDriver, Scheduler
from rolloutscope.replay.errors import ScenarioError, UnknownVariantError
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.telemetry import VIRTUAL_EPOCH_NS

SMALL = [n for n in scenarios.names() if n != "scale-16k"]


def _s(ns) -> float:
    return round((int(ns) - VIRTUAL_EPOCH_NS) / 1e9, 3)


def _replay(tmp_path, name, *variants, seed=None, scenario=None):
    store = RunStore(tmp_path / f"{name}-{seed}-{'-'.join(variants)}.duckdb")
    result = replay_into_store(scenario or scenarios.get(name), store, variants=variants,
                               seed=seed)
    store.writer().flush()
    return store, result


def _digest(store: RunStore) -> str:
    h = hashlib.sha256()
    for table in ("spans", "span_events", "open_spans"):
        for row in store.query(f"SELECT * EXCLUDE (attributes), attributes::VARCHAR FROM {table} "
                               "ORDER BY ALL"):
            h.update(repr(row).encode())
    return h.hexdigest()


class TestSnapshotOutlastsDeadline:
    def test_reproduces_the_captured_timeline_to_the_second(self, tmp_path):
        store, result = _replay(tmp_path, "snapshot-outlasts-deadline")
        with store:
            windows = store.view("checkpoint_windows").sort_values("start_ns")
            assert [(_s(r.start_ns), _s(r.end_ns), r.outcome) for r in windows.itertuples()] == [
                (150.0, 210.0, "committed"), (450.0, 750.0, "failed"),
                (800.0, 1100.0, "failed"), (1150.0, 1450.0, "failed")]
            d = store.view("deadlines").sort_values("attempt")
            first = d.iloc[0]
            assert (first.outcome, _s(first.fired_ns), first.state_when_fired) == (
                "fired", 180.0, "parked")
            parked = store.view("parked_intervals")
            assert [(_s(p.start_ns), _s(p.end_ns)) for p in parked.itertuples()] == [(150, 210)]
            done = store.view("completions").sort_values("attempt")
            assert _s(done.iloc[0].completed_ns) == 240.0 and done.iloc[0].ack_ns is None or \
                str(done.iloc[0].ack_ns) == "<NA>"
            attempts = store.view("rollout_attempts").sort_values("attempt")
            assert list(attempts.failure_reason.fillna("")) == ["RolloutTimeout", ""]
            assert _s(attempts.iloc[1].start_ns) == 210.0  # try 1 waits for the fence
            ops = store.view("checkpoint_ops")
            stopped = ops[(ops.op == "prepare") & (ops.participant_kind == "controller")
                          & (ops.prepared == False)]  # noqa: E712
            assert set(stopped.stopped_at) == {"agent"}
        assert result.stats["snapshots"] == ["published", "failed", "failed", "failed"]

    def test_with_paused_deadlines_the_try_finishes_in_budget_is_acked_and_snapshots_commit(
            self, tmp_path):
        store, result = _replay(tmp_path, "snapshot-outlasts-deadline",
                                "pause-deadlines-during-snapshot")
        with store:
            d = store.view("deadlines")
            assert list(d.outcome) == ["completed"] and list(d.suspended_s) == [60.0]
            done = store.view("completions")
            assert [(_s(r.completed_ns), _s(r.ack_ns)) for r in done.itertuples()] == [
                (240.0, 240.0)]
            assert set(store.view("checkpoint_windows").outcome) == {"committed"}
            runs = store.query_df("SELECT variants, seed, config FROM runs")
            assert json.loads(runs.variants[0]) == ["pause-deadlines-during-snapshot"]
            assert json.loads(runs.config[0])["rollout"]["rollout_timeout_s"] == 180.0
        assert result.stats["snapshots"] == ["published"] * 4

    def test_retire_then_adopt_removes_the_stall_without_pausing_the_deadline(self, tmp_path):
        _, result = _replay(tmp_path, "snapshot-outlasts-deadline", "retire-then-adopt")
        assert result.stats["snapshots"] == ["published"] * 4


class TestVariants:
    def test_lost_reply_strands_a_result_unless_retired_then_adopted(self, tmp_path):
        store, plain = _replay(tmp_path, "lost-reply")
        with store:
            assert store.view("completions").ack_ns.isna().sum() == 1
        _, fixed = _replay(tmp_path, "lost-reply", "retire-then-adopt")
        assert set(plain.stats["snapshots"]) == {"failed"}
        assert set(fixed.stats["snapshots"]) == {"published"}

    def test_a_call_at_closed_admission_fails_the_try_on_the_older_gate_only(self, tmp_path):
        store, _ = _replay(tmp_path, "prepare-blocked-by-streaming")
        with store:
            attempts = store.view("rollout_attempts").sort_values("attempt")
            assert attempts.iloc[0].failure_class == "data"
            assert attempts.iloc[0].failure_http_status == 409
        store, _ = _replay(tmp_path, "prepare-blocked-by-streaming",
                           "calls-wait-at-closed-admission")
        with store:
            assert list(store.view("rollout_attempts").outcome) == ["committed"]
            ops = store.view("checkpoint_ops")
            assert set(ops[ops.prepared == False].stopped_at) == {"model"}  # noqa: E712

    def test_a_worker_lost_in_commit_fails_with_export_failed_and_the_next_commits(
            self, tmp_path):
        store, result = _replay(tmp_path, "worker-lost-in-commit")
        with store:
            ops = store.view("checkpoint_ops")
            model_commits = ops[(ops.op == "commit") & (ops.participant_kind == "model")]
            assert list(model_commits.sort_values("start_ns").code.fillna("")) == [
                "export_failed", "export_failed", ""]
        assert result.stats["snapshots"] == ["failed", "published"]

    def test_participants_resume_on_their_own_when_the_lease_expires(self, tmp_path):
        store, result = _replay(tmp_path, "lease-expiry")
        with store:
            ev = store.query("SELECT min(ts_ns) FROM span_events "
                             "WHERE name = 'gym.checkpoint.lease.expired'")[0][0]
            assert _s(ev) == 1000.0
            stalls = store.query("SELECT count(*) FROM span_events WHERE name = 'rl.stall'")[0][0]
            assert stalls > 0
        assert result.stats["snapshots"] == ["failed"]

    def test_an_unknown_variant_is_refused_by_name(self, tmp_path):
        with pytest.raises(UnknownVariantError, match="pause-everything"):
            _replay(tmp_path, "healthy-baseline", "pause-everything")


class TestDeterminism:
    def test_the_same_scenario_and_seed_give_identical_spans(self, tmp_path):
        a, _ = _replay(tmp_path / "a", "healthy-baseline", seed=7)
        b, _ = _replay(tmp_path / "b", "healthy-baseline", seed=7)
        with a, b:
            assert _digest(a) == _digest(b)

    def test_a_different_seed_gives_different_spans(self, tmp_path):
        a, _ = _replay(tmp_path / "a", "healthy-baseline", seed=7)
        b, _ = _replay(tmp_path / "b", "healthy-baseline", seed=8)
        with a, b:
            assert _digest(a) != _digest(b)


@pytest.mark.parametrize("name", SMALL)
def test_every_builtin_scenario_reads_back_consistently_through_the_views(tmp_path, name):
    store, result = _replay(tmp_path, name)
    with store:
        # every exported span is a finished span or the start marker of one still open
        assert store.query("SELECT (SELECT count(*) FROM spans) + "
                           "(SELECT count(*) FROM open_spans)")[0][0] == result.spans
        bad = store.query("""
            SELECT p.rollout_id, p.start_ns FROM parked_intervals p WHERE NOT EXISTS (
              SELECT 1 FROM checkpoint_windows w WHERE w.checkpoint_id = p.checkpoint_id
                AND w.start_ns <= p.start_ns
                AND coalesce(p.end_ns, 9e18) <= coalesce(w.end_ns, 9e18))""")
        assert bad == []
        # every RL attempt has exactly one deadline when the scenario sets a budget
        if scenarios.get(name).config.rollout.rollout_timeout_s is not None:
            n = store.query("SELECT count(*) FROM rollout_attempts a LEFT JOIN deadlines d "
                            "USING (run_id, prompt_idx, attempt) WHERE d.deadline_id IS NULL")
            assert n[0][0] == 0
        # a fired deadline's attempt failed with RolloutTimeout
        fired = store.query("SELECT a.failure_reason FROM deadlines d JOIN rollout_attempts a "
                            "USING (run_id, prompt_idx, attempt) WHERE d.outcome = 'fired'")
        assert all(r[0] == "RolloutTimeout" for r in fired)
        assert store.query("SELECT scenario, seed FROM runs")[0] == (name, 0)


def test_the_healthy_baseline_has_nothing_incident_like(tmp_path):
    store, result = _replay(tmp_path, "healthy-baseline")
    with store:
        assert set(store.view("deadlines").outcome) == {"completed"}
        assert store.view("completions").ack_ns.isna().sum() == 0
        assert set(store.view("checkpoint_windows").outcome) == {"committed"}
        suspends = store.query("SELECT count(*) FROM span_events "
                               "WHERE name = 'rl.deadline.suspend'")[0][0]
        assert suspends > 0  # the colocated refit paused live deadlines
    assert result.stats["stalls"] == 0 and result.raised is None


class TestScenarioModel:
    def test_round_trips_through_json(self):
        for name in SMALL:
            s = scenarios.get(name)
            assert Scenario.from_json(s.to_json()) == s

    def test_an_unknown_key_is_refused_with_its_path(self):
        data = scenarios.get("healthy-baseline").to_dict()
        data["config"]["watchdog"]["stall_timeout"] = 1
        with pytest.raises(ScenarioError, match=r"config\.watchdog\.stall_timeout: unknown key"):
            Scenario.from_dict(data)

    def test_a_newer_version_is_refused(self):
        data = scenarios.get("healthy-baseline").to_dict()
        data["version"] = 99
        with pytest.raises(ScenarioError, match="version"):
            Scenario.from_dict(data)

    def test_a_stall_timeout_shorter_than_a_deadline_is_refused(self):
        data = scenarios.get("snapshot-outlasts-deadline").to_dict()
        data["config"]["watchdog"]["stall_timeout_s"] = 100.0
        with pytest.raises(ScenarioError, match="must exceed config.rollout.rollout_timeout_s"):
            Scenario.from_dict(data)


class TestDrivers:
    def test_the_paced_driver_sleeps_until_each_event_at_the_given_factor(self):
        now = [0.0]
        sleeps: list[float] = []

        def sleep(dt: float) -> None:
            sleeps.append(dt)
            now[0] += dt

        sched = Scheduler()
        seen: list[float] = []
        for t in (10.0, 30.0, 30.0, 100.0):
            sched.at(t, lambda: seen.append(sched.now))
        PacedDriver(factor=10.0, monotonic=lambda: now[0], sleep=sleep).run(sched, 50.0)
        assert seen == [10.0, 30.0, 30.0]
        assert sleeps == pytest.approx([1.0, 2.0])


class TestCli:
    def test_scenario_run_writes_a_run_and_refuses_the_same_run_twice(self, tmp_path, capsys):
        db = str(tmp_path / "cli.duckdb")
        args = ["scenario", "run", "lost-reply", "--db", db, "--variant", "retire-then-adopt",
                "--seed", "3"]
        assert cli_main(args) == 0
        assert "lost-reply.s3+retire-then-adopt" in capsys.readouterr().out
        assert cli_main(args) == 2
        assert "already in" in capsys.readouterr().err
        with RunStore(db, read_only=True) as store:
            assert store.query("SELECT source, seed FROM runs") == [("replay", 3)]

    def test_scenario_list_names_every_builtin(self, capsys):
        assert cli_main(["scenario", "list"]) == 0
        out = capsys.readouterr().out
        assert all(name in out for name in scenarios.names())

    def test_an_unknown_scenario_is_a_usage_error(self, tmp_path, capsys):
        assert cli_main(["scenario", "run", "nope", "--db", str(tmp_path / "x.duckdb")]) == 2
        assert "unknown scenario 'nope'" in capsys.readouterr().err
