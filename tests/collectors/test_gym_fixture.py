"""What a real NeMo-Gym 0.7.0 deployment sent, posted over OTLP/HTTP to a running collector:
every view, ``info`` and ``incidents --json`` on it, against what the official protobuf
messages of the capture say."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from rolloutscope.cli import main
from rolloutscope.store import RunStore
from tests.gym_capture import (
    ROLLOUT_IDS,
    RUN_ID,
    STUB_BACKEND,
    collect_capture,
    expected_metric_points,
    expected_spans,
)


@pytest.fixture(scope="module")
def gym_run(tmp_path_factory) -> Iterator[Path]:
    yield collect_capture(tmp_path_factory.mktemp("gym") / "gym.duckdb")


@pytest.fixture
def store(gym_run) -> Iterator[RunStore]:
    with RunStore(gym_run, read_only=True) as s:
        yield s


SPANS = expected_spans()


def rollout_spans() -> dict[str, dict]:
    return {s["attrs"]["nemo.gym.rollout.id"]: s for s in SPANS if s["name"] == "gym.rollout"}


class TestTheCaptureIsStoredWhole:
    def test_every_span_and_metric_point_lands_in_the_run_gym_named(self, store):
        assert store.run_ids() == [RUN_ID]
        assert store.query("SELECT count(*) FROM spans WHERE run_id = ?", [RUN_ID])[0][0] == \
            len(SPANS) == 378
        points = expected_metric_points()
        stored = dict(store.query("SELECT name, count(*) FROM metrics WHERE run_id = ? AND "
                                  "service LIKE 'nemo-gym/%' GROUP BY name", [RUN_ID]))
        assert stored == points and sum(points.values()) == 353
        assert store.query("SELECT source FROM runs")[0][0] == "live"


class TestGymRollouts:
    def test_six_rollout_attempts_one_per_gym_rollout_with_its_id_split(self, store):
        rows = store.query_df("SELECT * FROM rollout_attempts WHERE run_id = ? "
                              "ORDER BY start_ns", [RUN_ID])
        assert list(rows.capture_key) == list(ROLLOUT_IDS)
        assert list(rows.rollout_id) == ["0-0", "1-0", "2-0", "3-0", "4-0", "0-0"]
        assert list(rows.attempt) == [0, 0, 0, 0, 0, 1]
        assert set(rows.dialect) == {"gym"} and set(rows.outcome) == {"finished"}
        expected = rollout_spans()
        for r in rows.itertuples():
            span = expected[r.capture_key]
            assert (r.start_ns, r.end_ns, r.span_id) == (span["start"], span["end"],
                                                         span["span_id"])
            assert r.duration_s == pytest.approx((span["end"] - span["start"]) / 1e9)
        assert rows.prompt_idx.isna().all() and rows.failure_class.isna().all()

    def test_gym_rollouts_carry_server_status_model_time_and_verify(self, store):
        g = store.query_df("SELECT * FROM gym_rollouts ORDER BY start_ns")
        assert list(g.capture_key) == list(ROLLOUT_IDS)
        assert list(g.task_index) == [0, 1, 2, 3, 4, 0]
        assert list(g.repeat_index) == [0] * 6
        assert set(g.server_name) == {"example_single_tool_call_simple_agent"}
        assert set(g.service) == {"nemo-gym/example_single_tool_call_simple_agent"}
        assert list(g.http_status) == [200] * 6  # the /run SERVER span each belongs to
        assert list(g.model_calls) == [2] * 6 and list(g.model_errors) == [0] * 6
        model = [s for s in SPANS if s["name"] == "gym.model.responses"]
        for r in g.itertuples():
            mine = [s for s in model if s["attrs"]["nemo.gym.rollout.id"] == r.capture_key]
            assert r.model_s == pytest.approx(sum(s["end"] - s["start"] for s in mine) / 1e9)
            (verify,) = [s for s in SPANS if s["name"] == "gym.verify"
                         and s["attrs"].get("nemo.gym.rollout.id") == r.capture_key]
            assert r.verify_s == pytest.approx((verify["end"] - verify["start"]) / 1e9)
            assert 0 < r.agent_s < r.duration_s  # gym.agent.responses, joined by its path
        # released Gym records no reward and no token counts
        assert g.reward.isna().all() and g.input_tokens.isna().all()

    def test_twelve_model_calls_each_with_the_backend_it_reached(self, store):
        c = store.query_df("SELECT * FROM model_calls ORDER BY start_ns")
        assert len(c) == 12
        assert set(c.source) == {"gym"} and set(c.name) == {"gym.model.responses"}
        assert set(c.server_name) == {"policy_model"}
        assert Counter(c.capture_key) == {k: 2 for k in ROLLOUT_IDS}
        assert set(c.backend) == {STUB_BACKEND}
        assert set(c.backend_url) == {f"{STUB_BACKEND}/v1/responses"}
        assert list(c.http_status) == [200] * 12 and list(c.tries) == [1] * 12
        assert set(c.outcome) == {"ok"} and list(c.rate_limited) == [0] * 12
        stub_calls = {s["parent"]: s for s in SPANS if s["kind"] == 3
                      and s["attrs"]["url.full"].startswith(STUB_BACKEND)}
        for r in c.itertuples():
            tried = stub_calls[r.span_id]  # the try under this gym.model.responses span
            assert r.backend_s == pytest.approx((tried["end"] - tried["start"]) / 1e9)

    def test_http_requests_tell_hops_inside_the_deployment_from_calls_that_leave_it(self, store):
        h = store.query_df("SELECT * FROM http_requests")
        assert len(h) == len([s for s in SPANS if s["kind"] == 3]) == 48
        assert Counter(h.internal) == {True: 36, False: 12}
        assert set(h[~h.internal].target) == {STUB_BACKEND}
        assert Counter(h.model_endpoint) == {True: 30, False: 18}
        # the agent's model-call CLIENT spans carry no rollout id; their URL does
        agent_to_model = h[h.url.str.contains(":52871/ng-rollout/")]
        assert len(agent_to_model) == 12
        assert agent_to_model.capture_key.notna().all()
        assert set(h.http_status) == {200} and set(h.outcome) == {"ok"}

    def test_gyms_metrics_count_what_spans_do_not(self, store):
        m = store.query_df("SELECT * FROM gym_metrics")
        by = {n: g for n, g in m.groupby("name")}
        (rollout,) = by["gym.rollout.duration_ms"].itertuples()
        assert rollout.count == 6 and rollout.min == pytest.approx(39.733275, rel=1e-6)
        (verify,) = by["gym.verify.duration_ms"].itertuples()
        assert verify.count == 8  # six inside rollouts and two direct /verify calls
        (active,) = by["gym.servers.active"].itertuples()
        assert (active.low, active.high, active.value) == (0.0, 4.0, 0.0)
        connect = by["gym.http.connection_pool.connect_total"]
        assert sorted(connect.value) == [6.0, 12.0, 12.0, 18.0]


class TestWhatTheRunHolds:
    def test_processes_are_told_apart_by_pid_not_by_service_instance_id(self, store):
        s = store.query_df("SELECT * FROM services ORDER BY service")
        assert len(s) == 5 and s.pid.nunique() == 5
        assert s.instance_id.nunique() == 1  # "<run id>-rank0" in every Gym process
        assert set(s.gym_server_type) == {"orchestrator", "resources_servers",
                                          "responses_api_agents", "responses_api_models",
                                          "environment_servers"}
        assert set(s.gym_version) == {"0.7.0"} and s.names_run.all()
        assert s.spans.sum() == 378

    def test_trace_roots_list_every_trace_rollouts_named(self, store):
        roots = store.query_df("SELECT * FROM trace_roots ORDER BY start_ns")
        assert len(roots) == len({s["trace_id"] for s in SPANS}) == 14
        assert not roots.orphan.any()
        named = roots[roots.rollout_id.notna()]
        assert list(named.rollout_id) == list(ROLLOUT_IDS)
        assert set(named.name) == {"POST /run"}

    def test_the_span_catalog_sorts_the_spans_by_dialect(self, store):
        cat = store.query_df("SELECT dialect, sum(spans) AS n FROM span_catalog GROUP BY 1")
        by = dict(zip(cat.dialect, cat.n, strict=True))
        assert by == {"gym": 32, "otel": 346}

    def test_no_checkpoint_fleet_or_rl_rows_and_no_incident(self, store):
        for view in ("checkpoint_ops", "checkpoint_steps", "checkpoint_windows",
                     "shard_states", "deadlines", "parked_intervals", "completions",
                     "incidents"):
            assert store.query(f"SELECT count(*) FROM {view}")[0][0] == 0, view


class TestTheCommands:
    def test_info_says_how_the_run_was_named_and_what_it_holds(self, gym_run, capsys):
        assert main(["info", str(gym_run)]) == 0
        out = capsys.readouterr().out
        assert f"run {RUN_ID}  source=live" in out
        assert "run id: nemo.run.id on the resource of 378 span(s)" in out
        assert "processes 5:" in out
        assert "nemo-gym/policy_model pid 27027 (Gym 0.7.0 responses_api_models): 102" in out
        assert ("model views: rollout_attempts 6 (gym 6), gym_rollouts 6, model_calls 12, "
                "checkpoint_ops 0") in out

    def test_incidents_json_is_an_empty_list(self, gym_run, capsys):
        assert main(["incidents", str(gym_run), "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == []
