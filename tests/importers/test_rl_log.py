"""rl-log: the controller's stdout becomes shard stays, train steps, syncs, events and logs."""

from __future__ import annotations

import json

import pandas as pd

from rolloutscope.cli import main
from rolloutscope.collectors.importers.log_lines import parse_iso8601
from rolloutscope.store import RunStore

from .conftest import CONTROLLER_LOG, UNTIMED_LOG, run_import

T0 = parse_iso8601("2026-08-20T10:00:00Z")
S = 10**9


def test_every_line_kind_of_the_controller_log_is_recognised_and_bad_lines_are_located(
        capsys, db):
    report = run_import(capsys, "rl-log", CONTROLLER_LOG, db=db, run_id="r1")
    assert report["lines_read"] == 30 and report["logs"] == 30
    assert report["unknown_lines"] == 3
    assert report["bad_count"] == 4
    assert [b.split(": ", 1)[0] for b in report["bad"]] == [
        f"{CONTROLLER_LOG}:{n}" for n in (20, 21, 23, 24)]
    assert "unknown shard state 'zombie'" in report["bad"][1]
    assert set(report["recognised"]) == {
        "aborted_stale", "env_health", "fleet_exhausted", "group_cleanup_failed",
        "gym_ack_retry", "probe_router_update_failed", "prompt_dropped", "prompt_skipped",
        "prompt_substituted", "rollout_pump_starting", "router_ignoring", "router_listening",
        "router_metrics_unavailable", "row_redispatch", "shard_transition", "stall",
        "train_step", "weight_sync_done"}


def test_shard_transitions_become_consecutive_stays_with_the_last_one_open(capsys, db):
    run_import(capsys, "rl-log", CONTROLLER_LOG, db=db, run_id="r1")
    with RunStore(db, read_only=True) as store:
        stays = store.query_df("SELECT * FROM shard_states ORDER BY start_ns")
        transitions = store.query_df(
            "SELECT * FROM span_events WHERE name = 'rl.gen_fleet.transition' ORDER BY ts_ns")
    assert list(stays.state) == ["healthy", "suspect", "dead"]
    assert list(stays.shard_idx) == [1, 1, 1]
    assert list(stays.start_ns) == [T0, T0 + 90 * S, T0 + 100 * S]
    assert list(stays.end_ns[:2]) == [T0 + 90 * S, T0 + 100 * S] and pd.isna(stays.end_ns[2])
    assert list(stays.is_open) == [False, False, True]
    assert stays.trigger[0] == "initial" and stays.previous_state[2] == "suspect"
    assert stays.last_error[2].startswith("ActorDiedError: The actor died")
    assert len(transitions) == 2
    attrs = json.loads(transitions.attributes[1])
    assert attrs["log.record.original"].endswith("suspect -> dead (ActorDiedError: The actor "
                                                 "died unexpectedly before finishing this task.)")
    assert attrs["rolloutscope.import.line"] == 15


def test_train_steps_and_syncs_are_intervals_and_a_step_without_its_sync_leaves_it_open(
        capsys, db):
    run_import(capsys, "rl-log", CONTROLLER_LOG, db=db, run_id="r1")
    with RunStore(db, read_only=True) as store:
        steps = store.query_df("SELECT start_ns, end_ns, attributes FROM all_spans "
                               "WHERE name = 'rl.train_step' ORDER BY start_ns")
        syncs = store.query_df("SELECT start_ns, end_ns, is_open, attributes FROM all_spans "
                               "WHERE name = 'rl.weight_sync' ORDER BY start_ns")
    assert list(steps.start_ns) == [T0, T0 + 42_104_000_000, T0 + 82_250_000_000]
    assert list(steps.end_ns) == [T0 + 40 * S, T0 + 80 * S, T0 + 120 * S]
    assert [json.loads(a)["nemo.rl.train.step"] for a in steps.attributes] == [1, 2, 3]
    assert list(syncs.start_ns) == [T0 + 40 * S, T0 + 80 * S, T0 + 120 * S]
    assert list(syncs.is_open) == [False, False, True]  # the hung sync after step 3
    second = json.loads(syncs.attributes[1])
    assert second["nemo.rl.trainer_version"] == 2
    assert second["nemo.rl.aborted_stale_inflight_groups"] == 1
    assert json.loads(syncs.attributes[2])["nemo.rl.trainer_version"] == 3


def test_a_stall_line_becomes_a_stall_event_with_its_numbers_and_thresholds(capsys, db):
    run_import(capsys, "rl-log", CONTROLLER_LOG, db=db, run_id="r1")
    with RunStore(db, read_only=True) as store:
        stall = store.query_df("SELECT * FROM span_events WHERE name = 'rl.stall' "
                               "ORDER BY ts_ns").iloc[0]
        config = store.run_config("r1")
        meta = json.loads(store.query("SELECT metadata FROM runs")[0][0])
    attrs = json.loads(stall.attributes)
    assert stall.span_name == "rl.stall_watchdog.tick"
    assert (attrs["nemo.rl.stall.idle_s"], attrs["nemo.rl.stall.inflight"],
            attrs["nemo.rl.stall.committed"], attrs["nemo.rl.stall.train_steps"],
            attrs["nemo.rl.stall.max_steps"], attrs["nemo.rl.stall.action"]) == (
        2018.0, 0, 12, 3, 150, "warn")
    assert config == {"max_num_steps": 150, "stall_timeout_s": 600.0}
    assert meta["imports"][0]["timestamps"] == "log_prefix"


def test_every_line_is_kept_in_logs_linked_to_the_span_it_produced(capsys, db):
    run_import(capsys, "rl-log", CONTROLLER_LOG, db=db, run_id="r1")
    with RunStore(db, read_only=True) as store:
        logs = store.query_df("SELECT * FROM logs ORDER BY ts_ns, attributes->>'$.\"rolloutscope"
                              ".import.line\"'")
        linked = store.query("SELECT count(*) FROM logs l JOIN all_spans s "
                             "ON s.span_id = l.span_id AND s.trace_id = l.trace_id")[0][0]
    assert len(logs) == 30
    assert logs.body.str.contains("train step 4/150  trainer_v=?", regex=False).any()
    kinds = logs.attributes.map(lambda a: json.loads(a)["rolloutscope.import.line_kind"])
    assert (kinds == "unknown").sum() == 3
    assert linked == 23  # the recognised lines, minus the four malformed ones
    assert set(logs.severity) >= {"INFO", "WARN", "ERROR"}


def test_a_log_without_timestamps_needs_a_start_and_then_follows_line_order(capsys, db):
    assert main(["import", "rl-log", str(UNTIMED_LOG), "--db", str(db)]) == 2
    assert "--start" in capsys.readouterr().err
    run_import(capsys, "rl-log", UNTIMED_LOG, db=db, start="2026-08-20T10:00:00Z")
    with RunStore(db, read_only=True) as store:
        syncs = store.query("SELECT start_ns, end_ns FROM spans WHERE name = 'rl.weight_sync' "
                            "ORDER BY start_ns")
        stays = store.query_df("SELECT * FROM shard_states ORDER BY start_ns")
        meta = json.loads(store.query("SELECT metadata FROM runs")[0][0])
    ms = 10**6
    # line 4 says the sync took 1.5 s: line order, then the stated duration
    assert syncs[0] == (T0 + 3 * ms, T0 + 3 * ms + 1_500 * ms)
    assert list(stays.state) == ["healthy", "suspect", "healthy"]
    assert list(stays.trigger) == ["initial", "reported_failure", "probe_success"]
    assert stays.backend_url[1] == "http://10.0.0.8:7000/v1"
    assert meta["imports"][0]["timestamps"] == "line_order"
    assert meta["imports"][0]["start"] == "2026-08-20T10:00:00Z"
