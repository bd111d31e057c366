"""Each incident view on hand-built span sets, at the boundaries that decide it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rolloutscope.cli import main
from rolloutscope.cli.info_incidents import INCIDENT_KINDS
from rolloutscope.store import RowBatch
from rolloutscope.store import views as store_views
from rolloutscope.vocabulary import Attr, EventName, SpanName

from .conftest import S, T0

SNAPSHOT_OUTLASTS_DEADLINE = {"rollout": {"rollout_timeout_s": 180.0},
           "checkpoint": {"prepare_timeout_s": 300.0, "lease_grace_s": 600.0},
           "watchdog": {"interval_s": 30.0, "stall_timeout_s": 600.0},
           "training": {"max_num_steps": 10}}


def ns(seconds: float) -> int:
    return T0 + int(seconds * S)


def _incidents(store, kind=None):
    sql = "SELECT * FROM incidents" + (" WHERE kind = ?" if kind else "") + " ORDER BY start_ns"
    return store.query_df(sql, [kind] if kind else [])


def _snapshot_outlasts_deadline(kit, *, fire_s=180.0, ack_try0=False):
    """P1 as RL #4266 tells it: budget 180 s, snapshot 1 parks try 0 from 150 s to 210 s, the
    deadline fires at fire_s, try 0 finishes at 240 s un-ACKed, snapshot 2 at 450 s fails after
    300 s."""
    kit.inst.store.register_run("run-1", source="replay", config=SNAPSHOT_OUTLASTS_DEADLINE)
    kit.span(SpanName.RL_TRAIN_STEP, 0, 0.001, {})  # run start marker
    kit.span(SpanName.RL_ADMISSION_FENCE, 150, 210, {Attr.CHECKPOINT_ID: "ck1",
                                                     Attr.FENCE_OWNER: "gym_checkpoint"})
    kit.span(SpanName.RL_SNAPSHOT, 150, 210, {Attr.CHECKPOINT_ID: "ck1",
                                              Attr.SNAPSHOT_OUTCOME: "published"})
    key = {Attr.PROMPT_IDX: 0, Attr.ROLLOUT_ID: "p0", Attr.RL_ATTEMPT: 0}
    kit.span(SpanName.AGENT_PARKED, 151, 210, {**key, Attr.ROLLOUT_ID: "p0-0",
                                               Attr.CHECKPOINT_ID: "ck1"})
    kit.span(SpanName.RL_DEADLINE, 0, fire_s, {
        **key, Attr.DEADLINE_KIND: "rollout", Attr.DEADLINE_BUDGET_S: 180.0,
        Attr.DEADLINE_OUTCOME: "fired"},
        events=[(EventName.DEADLINE_FIRE, fire_s, {Attr.DEADLINE_STATE_WHEN_FIRED: "parked"})])
    kit.span(SpanName.RL_ATTEMPT, 0, fire_s, {**key, Attr.ROLLOUT_OUTCOME: "failed",
                                              Attr.FAILURE_CLASS: "infra",
                                              Attr.FAILURE_REASON: "RolloutTimeout"})
    kit.span(SpanName.AGENT_EXECUTION, 0, 240, {**key, Attr.ROLLOUT_ID: "p0-0"},
             events=[(EventName.AGENT_COMPLETED, 240, {})])
    if ack_try0:
        kit.span(SpanName.RL_GYM_ACK, 241, 242, {}, events=[(
            EventName.AGENT_ACKNOWLEDGED, 242, {Attr.ROLLOUT_ID: "p0-0", Attr.RL_ATTEMPT: 0})])
    kit.span(SpanName.RL_ATTEMPT, fire_s, 400, {**key, Attr.RL_ATTEMPT: 1,
                                                Attr.ROLLOUT_OUTCOME: "committed"})
    kit.span(SpanName.CK_PREPARE, 450, 750, {
        Attr.CHECKPOINT_ID: "ck2", Attr.CK_PARTICIPANT_KIND: "agent",
        Attr.CK_OUTCOME: "error", Attr.CK_CODE: "agent_prepare_incomplete",
        Attr.CK_COUNT_COMPLETED_UNACKED: 1})


class TestDeadlineFiredWhileParked:
    def test_the_snapshot_outlasts_deadline_is_p1_with_its_numbers(self, kit):
        _snapshot_outlasts_deadline(kit)
        p1 = _incidents(kit.flush(), "deadline_fired_while_parked")
        assert len(p1) == 1
        row = p1.iloc[0]
        assert row.start_ns == ns(180)
        assert "fired at 180.0 s" in row.summary
        assert "29.0 s parked" in row.summary  # parked at 151 s in this fixture
        assert "30.0 s of budget left" in row.summary  # window opened at 150 s
        assert row.severity == "critical" and len(row.evidence) == 2

    def test_a_deadline_firing_1ms_before_the_park_is_not_p1(self, kit):
        _snapshot_outlasts_deadline(kit, fire_s=150.999)
        assert _incidents(kit.flush(), "deadline_fired_while_parked").empty


class TestStrandedCompletion:
    def test_the_unacked_try_blocks_later_prepares_and_points_at_its_cause(self, kit):
        _snapshot_outlasts_deadline(kit)
        store = kit.flush()
        stranded = _incidents(store, "stranded_completion")
        assert len(stranded) == 1
        row = stranded.iloc[0]
        p1 = _incidents(store, "deadline_fired_while_parked").iloc[0]
        assert row.caused_by == p1.incident_id
        assert "finished at 240.0 s" in row.summary
        assert "1 later snapshot prepare(s) failed" in row.summary
        # blocked by the unacknowledged completion: not also a prepare_blocked incident
        assert _incidents(store, "prepare_blocked").empty

    def test_an_acknowledged_completion_is_not_stranded(self, kit):
        _snapshot_outlasts_deadline(kit, ack_try0=True)
        store = kit.flush()
        # the failed prepare still counted it (the fixture says so), but nothing is stranded
        assert _incidents(store, "stranded_completion").empty


class TestStall:
    def _run(self, kit, *, max_steps):
        kit.inst.store.register_run("run-1", config={
            "watchdog": {"stall_timeout_s": 600.0}, "training": {"max_num_steps": max_steps}})
        kit.span(SpanName.RL_ATTEMPT, 0, 10, {Attr.PROMPT_IDX: 0, Attr.RL_ATTEMPT: 0,
                                              Attr.ROLLOUT_OUTCOME: "committed"})
        kit.span(SpanName.RL_TRAIN_STEP, 10, 20, {Attr.TRAIN_STEP: 1})
        # a hung weight sync: nothing in flight for 2018 s
        kit.span(SpanName.RL_WEIGHT_SYNC, 20, 2038, {Attr.TRAINER_VERSION: 2})

    def test_no_progress_with_nothing_in_flight_is_still_a_stall(self, kit):
        self._run(kit, max_steps=150)
        stalls = _incidents(kit.flush(), "stall")
        assert len(stalls) == 1
        row = stalls.iloc[0]
        assert row.start_ns == ns(20) and pd.isna(row.end_ns)
        assert "for 2018 s until the end of the run (0 rollouts in flight" in row.summary
        assert "step 1/150" in row.summary

    def test_an_idle_controller_with_no_work_left_is_not_a_stall(self, kit):
        self._run(kit, max_steps=1)
        assert _incidents(kit.flush(), "stall").empty

    def test_a_gap_just_under_the_timeout_is_not_a_stall(self, kit):
        kit.inst.store.register_run("run-1", config={"watchdog": {"stall_timeout_s": 600.0}})
        kit.span(SpanName.RL_ATTEMPT, 0, 10, {Attr.PROMPT_IDX: 0,
                                              Attr.ROLLOUT_OUTCOME: "committed"})
        kit.span(SpanName.RL_ATTEMPT, 11, 609.5, {Attr.PROMPT_IDX: 1,
                                                  Attr.ROLLOUT_OUTCOME: "committed"})
        assert _incidents(kit.flush(), "stall").empty


class TestFleetIncidents:
    def _shard(self, kit, idx, stays):
        for state, prev, trigger, start, end in stays:
            attrs = {Attr.SHARD_IDX: idx, Attr.FLEET_STATE: state, Attr.FLEET_TRIGGER: trigger,
                     Attr.FLEET_WEIGHT_VERSION: 1}
            if prev:
                attrs[Attr.FLEET_PREVIOUS_STATE] = prev
            if end is None:
                kit.open(SpanName.SHARD_STATE, start, attrs)
            else:
                kit.span(SpanName.SHARD_STATE, start, end, attrs)

    def test_a_quarantine_reports_detection_time_and_the_serving_drop(self, kit):
        kit.inst.store.register_run("run-1", config={})
        kit.span(SpanName.FAULT, 100, 100, {Attr.SHARD_IDX: 1, Attr.FAULT_KIND: "kill_serving"})
        self._shard(kit, 1, [("healthy", None, "initial", 0, 105),
                             ("suspect", "healthy", "reported_failure", 105, 112),
                             ("dead", "suspect", "reported_failure", 112, None)])
        kit.span(SpanName.FLEET_PROBE_TICK, 115, 115.1, {}, events=[
            (EventName.ROUTER_MEMBERSHIP_PUSH, 95, {Attr.ROUTER_SERVING_COUNT: 2}),
            (EventName.ROUTER_MEMBERSHIP_PUSH, 115, {Attr.ROUTER_SERVING_COUNT: 1})])
        q = _incidents(kit.flush(), "quarantine")
        assert len(q) == 1
        assert q.iloc[0].summary.startswith("Shard 1 quarantined at 112.0 s (suspect -> dead")
        assert "12.0 s after the fault" in q.iloc[0].summary
        assert "serving backends 2 -> 1 at 115.0 s" in q.iloc[0].summary

    def test_a_shard_failing_generations_while_probes_pass_is_wedged(self, kit):
        kit.inst.store.register_run("run-1", config={"fleet": {"unhealthy_threshold": 3}})
        self._shard(kit, 0, [("healthy", None, "initial", 0, None)])
        events = [(EventName.FLEET_PROBE, t, {Attr.SHARD_IDX: 0, Attr.PROBE_OK: True})
                  for t in (10, 15, 20, 25)]
        events += [(EventName.FLEET_REPORTED_FAILURE, t, {Attr.SHARD_IDX: 0})
                   for t in (11, 16, 21)]
        kit.span(SpanName.FLEET_PROBE_TICK, 0, 30, {}, events=events)
        w = _incidents(kit.flush(), "wedged_backend")
        assert len(w) == 1
        assert "answered all 2 liveness probes while failing 3 generations" in w.iloc[0].summary

    def test_a_failed_probe_in_the_stretch_means_it_is_not_wedged(self, kit):
        kit.inst.store.register_run("run-1", config={})
        events = [(EventName.FLEET_PROBE, 15, {Attr.SHARD_IDX: 0, Attr.PROBE_OK: False})]
        events += [(EventName.FLEET_REPORTED_FAILURE, t, {Attr.SHARD_IDX: 0})
                   for t in (11, 16, 21)]
        kit.span(SpanName.FLEET_PROBE_TICK, 0, 30, {}, events=events)
        assert _incidents(kit.flush(), "wedged_backend").empty

    def test_a_serving_shard_behind_the_trainer_is_stale(self, kit):
        kit.inst.store.register_run("run-1", config={})
        self._shard(kit, 2, [("healthy", None, "initial", 0, None)])
        kit.span(SpanName.RL_WEIGHT_SYNC, 50, 60, {Attr.TRAINER_VERSION: 2})
        rows = _incidents(kit.flush(), "stale_weights_serving")
        assert list(rows.subject) == ["shard 2"]
        assert "weight version 1 after the weight sync to version 2" in rows.iloc[0].summary

    def test_router_serving_more_than_the_fleet_is_a_divergence(self, kit):
        kit.inst.store.register_run("run-1", config={})
        kit.span(SpanName.RL_TRAIN_STEP, 0, 1, {})
        batch = RowBatch()
        for ts, router, fleet in ((30, 2, 2), (60, 2, 1), (90, 2, 1), (120, 1, 1)):
            for name, value in (("router/serving_backends", router),
                                ("gen_fleet/serving_shards", fleet)):
                batch.add_row("metrics", run_id="run-1", name=name, kind="scalar",
                              ts_ns=ns(ts), value=value)
        kit.inst.store.writer().write(batch)
        rows = _incidents(kit.flush(), "router_fleet_divergence")
        assert len(rows) == 1 and rows.iloc[0].start_ns == ns(60)
        assert "2 backend(s) while the fleet counted 1" in rows.iloc[0].summary


class TestCheckpointIncidents:
    def test_a_model_prepare_blocked_by_streaming_responses(self, kit):
        kit.inst.store.register_run("run-1", config={})
        kit.span(SpanName.CK_PREPARE, 10, 310, {
            Attr.CHECKPOINT_ID: "ck1", Attr.CK_PARTICIPANT_KIND: "model",
            Attr.CK_OUTCOME: "error", Attr.CK_CODE: "deadline_exceeded", Attr.CK_BLOCKERS: 2,
            Attr.CK_BLOCKER_KEYS: ("p3-0", "p4-0")})
        kit.span(SpanName.CK_COORDINATE_PREPARE, 10, 311, {
            Attr.CHECKPOINT_ID: "ck1", Attr.CK_STOPPED_AT: "model"}, error="not ready")
        rows = _incidents(kit.flush(), "prepare_blocked")
        assert len(rows) == 1
        assert "2 response(s) already streaming (p3-0, p4-0)" in rows.iloc[0].summary
        assert "stopped at stage model" in rows.iloc[0].summary

    def test_export_failed_lease_expiry_cuts_and_refusals(self, kit):
        kit.inst.store.register_run("run-1", config={})
        kit.span(SpanName.RL_SNAPSHOT, 0, 1, {Attr.CHECKPOINT_ID: "ck0"})  # the run starts at 0
        for t in (20, 25):
            kit.span(SpanName.CK_COMMIT, t, t + 1, {
                Attr.CHECKPOINT_ID: "ck1", Attr.CK_PARTICIPANT_KIND: "model",
                Attr.CK_OUTCOME: "error", Attr.CK_CODE: "export_failed",
                Attr.CK_WORKERS_EXPECTED: 2, Attr.CK_WORKERS_ACKED: 1})
        kit.span(SpanName.CK_OPEN, 30, 700, {Attr.CHECKPOINT_ID: "ck2",
                                             Attr.CK_PARTICIPANT_KIND: "agent"},
                 events=[(EventName.CK_LEASE_EXPIRED, 700, {Attr.CK_PHASE: "prepared"})])
        kit.span(SpanName.CK_PREPARE, 800, 801, {
            Attr.CHECKPOINT_ID: "ck3", Attr.CK_PARTICIPANT_KIND: "model", Attr.CK_OUTCOME: "ok",
            Attr.CK_COUNT_CUT_FAILED: 1, Attr.CK_COUNT_CUT_SKIPPED: 2})
        kit.span("HTTP POST", 900, 901, {}, events=[
            (EventName.CK_REFUSED, 900.5, {Attr.CK_CODE: "stale_attempt",
                                           Attr.ROLLOUT_ID: "p9", Attr.RL_ATTEMPT: 0})])
        store = kit.flush()
        ef = _incidents(store, "export_failed").iloc[0]
        assert "1 of 2 policy workers acknowledged (2 failed attempt(s))" in ef.summary
        le = _incidents(store, "lease_expired").iloc[0]
        assert "agent participant's lease expired at 700.0 s in phase prepared" in le.summary
        cd = _incidents(store, "cut_degraded").iloc[0]
        assert "1 generation cut(s) failed and 2 were skipped" in cd.summary
        la = _incidents(store, "late_retired_attempt").iloc[0]
        assert la.severity == "info" and la.subject == "p9 try 0"


class TestRolloutIncidents:
    def test_infra_failures_up_to_the_budget_exhaust_redispatch(self, kit):
        kit.inst.store.register_run("run-1", config={
            "rollout": {"max_infra_attempts_per_prompt": 3}})
        for k in range(3):
            kit.span(SpanName.RL_ATTEMPT, 10 * k, 10 * k + 5, {
                Attr.PROMPT_IDX: 7, Attr.RL_ATTEMPT: k, Attr.ROLLOUT_OUTCOME: "failed",
                Attr.FAILURE_CLASS: "infra", Attr.FAILURE_REASON: "GenerationUnavailable"})
        for k in range(2):  # under the budget
            kit.span(SpanName.RL_ATTEMPT, 10 * k, 10 * k + 5, {
                Attr.PROMPT_IDX: 8, Attr.RL_ATTEMPT: k, Attr.ROLLOUT_OUTCOME: "failed",
                Attr.FAILURE_CLASS: "infra", Attr.FAILURE_REASON: "GenerationUnavailable"})
        rows = _incidents(kit.flush(), "redispatch_exhausted")
        assert list(rows.subject) == ["prompt 7"]
        assert "failed 3 times on infrastructure errors (GenerationUnavailable)" in \
            rows.iloc[0].summary

    def test_context_length_400s_are_a_config_mismatch(self, kit):
        kit.inst.store.register_run("run-1", config={})
        kit.span(SpanName.RL_ATTEMPT, 0, 1, {
            Attr.PROMPT_IDX: 1, Attr.ROLLOUT_OUTCOME: "failed", Attr.FAILURE_CLASS: "data",
            Attr.FAILURE_HTTP_STATUS: 400,
            Attr.FAILURE_DETAIL: "This model's maximum context length is 4096 tokens"})
        rows = _incidents(kit.flush(), "data_failure_config")
        assert len(rows) == 1 and "max_model_len" in rows.iloc[0].summary

    def test_a_model_call_retried_with_a_rising_ceiling_is_a_storm(self, kit):
        kit.inst.store.register_run("run-1", config={})
        events = [(EventName.ROUTER_RETRY, 600 * k, {
            Attr.HTTP_STATUS: 504, Attr.RETRY_TRY: k, Attr.RETRY_MAX_TRIES: k + 3})
            for k in range(1, 5)]
        kit.span(SpanName.GYM_MODEL_RESPONSES, 0, 2500, {Attr.ROLLOUT_ID: "p2-0"},
                 events=events)
        kit.span(SpanName.GYM_MODEL_RESPONSES, 0, 10, {Attr.ROLLOUT_ID: "p3-0"}, events=[
            (EventName.ROUTER_RETRY, 1, {Attr.HTTP_STATUS: 500, Attr.RETRY_TRY: 1,
                                         Attr.RETRY_MAX_TRIES: 3})])
        rows = _incidents(kit.flush(), "retry_storm")
        assert list(rows.subject) == ["p2-0"]
        assert "retried 4 times on HTTP 504" in rows.iloc[0].summary
        assert "rising from 4 to 7" in rows.iloc[0].summary

    def test_environment_health_problems_are_reported(self, kit):
        kit.inst.store.register_run("run-1", config={})
        kit.span(SpanName.RL_STALL_WATCHDOG_TICK, 30, 31, {}, events=[
            (EventName.ENV_HEALTH_PROBLEM, 30, {Attr.ENV_NAME: "math",
                                                Attr.ENV_PROBLEM: "did not answer"})])
        rows = _incidents(kit.flush(), "env_unhealthy")
        assert "Environment math failed its health check 1 time(s)" in rows.iloc[0].summary


def test_every_incident_view_is_in_the_union_and_the_cli_list():
    assert set(INCIDENT_KINDS) <= store_views.names()
    union = dict(store_views.definitions())["incidents"]
    for kind in INCIDENT_KINDS:
        assert f"FROM {kind}\n" in union + "\n"


def test_the_cli_prints_incidents_as_json_and_filters_by_kind(kit, store_path, capsys):
    _snapshot_outlasts_deadline(kit)
    kit.inst.shutdown()
    assert main(["incidents", str(store_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["kind"] for r in rows} == {"deadline_fired_while_parked", "stranded_completion"}
    assert all(isinstance(r["evidence"], list) and r["evidence"] for r in rows)
    assert main(["incidents", str(store_path), "--kind", "stall"]) == 0
    assert capsys.readouterr().out.strip() == "no incidents"
    assert main(["incidents", str(store_path), "--kind", "bogus"]) == 2
    assert "unknown incident kind(s) bogus" in capsys.readouterr().err


@pytest.mark.parametrize("kind", INCIDENT_KINDS)
def test_each_incident_view_has_the_common_columns(kind, store_path):
    from rolloutscope.store import RunStore

    with RunStore(store_path) as store:
        cols = list(store.query_df(f"SELECT * FROM {kind} LIMIT 0").columns)
    assert cols[:10] == ["run_id", "incident_id", "kind", "severity", "start_ns", "end_ns",
                         "subject", "summary", "evidence", "caused_by"]
