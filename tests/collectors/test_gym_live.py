"""A live NeMo-Gym 0.7.0 deployment (released packages, Gym's own orchestrator, Ray, four
server processes) exporting into ``rolloutscope serve`` once ``doctor gym --install-shim``
fixed its environment: the same views, commands and dashboard as the captured fixture."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from rolloutscope.cli import main
from rolloutscope.store import RunStore

from .conftest import start_collector
from .gym_env import gym_python, shim_held  # noqa: F401 - the fixture
from .gym_live import GymDeployment

pytestmark = pytest.mark.slow
ROLLOUT_IDS = ["0-0", "1-0", "2-0", "3-0", "4-0", "0-0-a1"]
# the Gym spans the traffic makes (README of tests/fixtures/gym-0.7.0-otlp-http)
GYM_SPANS = {"gym.rollout": 6, "gym.agent.responses": 6, "gym.model.responses": 12,
             "gym.verify": 8}


def wait_for_spans(collector, deadline_s: float = 45.0) -> dict[str, int]:
    """Span counts by name once every Gym span of the traffic arrived (servers export in
    batches, every few seconds)."""
    deadline = time.monotonic() + deadline_s
    while True:
        rows = collector.client.query_records(
            "SELECT name, count(*) AS n FROM spans WHERE name LIKE 'gym.%' GROUP BY name")
        got = {r["name"]: r["n"] for r in rows}
        if all(got.get(k, 0) >= v for k, v in GYM_SPANS.items()) or \
                time.monotonic() > deadline:
            return got
        time.sleep(0.5)


@pytest.fixture(scope="module")
def live_run(gym_python, tmp_path_factory):
    with shim_held():  # from installing the shim to removing it
        return _live_run(gym_python, tmp_path_factory)


def _live_run(gym_python, tmp_path_factory) -> dict:
    rc = main(["doctor", "gym", "--python", gym_python, "--install-shim"])
    assert rc == 0, "the shim did not make Gym's telemetry export"
    db = tmp_path_factory.mktemp("gymlive") / "live.duckdb"
    collector = start_collector(db)
    run_id = f"gym-live-{uuid.uuid4().hex[:8]}"
    gym = GymDeployment(venv=Path(gym_python).parent.parent, endpoint=collector.http,
                        run_id=run_id)
    left: list[str] = []
    t0 = time.monotonic()
    try:
        gym.start()
        rss = gym.rss_mb()
        replies = gym.drive()
        stub = gym.stub_calls()
        arrived = wait_for_spans(collector)
    finally:
        left = gym.stop()
        collector.stop()
        main(["doctor", "gym", "--python", gym_python, "--remove-shim"])
    return {"db": db, "run_id": run_id, "replies": replies, "stub": stub, "arrived": arrived,
            "left": left, "rss_mb": rss,
            "timings": {**gym.timings, "total_s": time.monotonic() - t0}}


def test_the_deployment_ran_on_loopback_and_left_nothing_behind(live_run):
    assert [r["status"] for r in live_run["replies"]] == [200] * 9
    assert [r["reward"] for r in live_run["replies"] if r["call"] == "/run"] == [1.0] * 6
    assert live_run["stub"] == {"responses": 12, "chat": 0}
    assert live_run["left"] == []
    # how long it took is reported, not asserted: it depends on the machine's load
    print(f"\nlive Gym deployment: {live_run['timings']}, RSS MB {live_run['rss_mb']}")


def test_every_gym_span_reached_the_collector(live_run):
    assert {k: live_run["arrived"].get(k) for k in GYM_SPANS} == GYM_SPANS


def test_the_views_show_the_deployment_as_they_show_the_capture(live_run):
    with RunStore(live_run["db"], read_only=True) as store:
        assert store.run_ids() == [live_run["run_id"]]
        att = store.query_df("SELECT * FROM rollout_attempts ORDER BY start_ns")
        assert list(att.capture_key) == ROLLOUT_IDS
        assert list(att.rollout_id) == ["0-0", "1-0", "2-0", "3-0", "4-0", "0-0"]
        assert list(att.attempt) == [0, 0, 0, 0, 0, 1]
        assert set(att.dialect) == {"gym"} and set(att.outcome) == {"finished"}
        g = store.query_df("SELECT * FROM gym_rollouts ORDER BY start_ns")
        assert list(g.http_status) == [200] * 6 and list(g.model_calls) == [2] * 6
        assert g.verify_s.notna().all() and g.agent_s.notna().all()
        calls = store.query_df("SELECT * FROM model_calls")
        stub = f"http://127.0.0.1:{_stub_port(store)}"
        assert len(calls) == 12 and set(calls.backend) == {stub}
        assert Counter(calls.capture_key) == {k: 2 for k in ROLLOUT_IDS}
        assert set(calls.http_status) == {200} and set(calls.outcome) == {"ok"}
        services = store.query_df("SELECT * FROM services")
        assert len(services) == 5 and services.pid.nunique() == 5
        assert set(services.gym_version) == {"0.7.0"}
        m = store.query_df("SELECT name, max(count) AS n FROM gym_metrics GROUP BY name")
        counts = dict(zip(m.name, m.n, strict=True))
        assert counts["gym.rollout.duration_ms"] == 6 and counts["gym.verify.duration_ms"] == 8
        assert store.query("SELECT count(*) FROM incidents")[0][0] == 0


def _stub_port(store: RunStore) -> int:
    (url,) = {r[0] for r in store.query(
        "SELECT DISTINCT target FROM http_requests WHERE NOT internal")}
    return int(url.rsplit(":", 1)[1])


def test_info_and_incidents_on_the_live_run(live_run, capsys):
    assert main(["info", str(live_run["db"])]) == 0
    out = capsys.readouterr().out
    assert f"run {live_run['run_id']}  source=live" in out
    assert "run id: nemo.run.id on the resource of" in out
    assert "model views: rollout_attempts 6 (gym 6), gym_rollouts 6, model_calls 12" in out
    assert main(["incidents", str(live_run["db"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_the_dashboard_draws_every_tab_of_the_live_run(live_run, tmp_path):
    from tests.dashboard.gym_pages import check_every_tab

    check_every_tab(live_run["db"], tmp_path, rollout="0-0-a1")
