"""``rolloutscope serve --scrape``: a real collector reading engines' Prometheus ``/metrics`` from
real HTTP servers on 127.0.0.1 (pages rendered by ``prometheus_client`` under vLLM's names,
tests/engine_metrics.py), beside OTLP spans from the stock exporter.

The engines: one that keeps up, one that wedges, one saturated whose queue grows while fleet
health calls its shard healthy, one that answers garbage, a port that refuses connections and a
server that accepts and never answers. Each engine moves one step per read, so what is detected
depends on the reads made, not on the machine's speed; the thresholds are the run's own (its
config, registered before serve starts) and the test waits for what it asserts, with a
deadline."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr, SpanName
from tests.engine_metrics import Engine, EngineModel, healthy, saturated, wedged

from .conftest import Collector, start_collector

DEADLINE_S = 180.0
THRESHOLDS = {"engine_wedged_s": 1.0, "engine_backlog_s": 1.0,
              "engine_saturation_window_s": 1.0, "engine_saturated_queue_share": 0.5}


class Silent:
    """Accepts connections and never answers (a hung engine); counts what it accepted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def _refusing_url() -> str:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"  # nothing listens there once closed


def _exporter(http: str):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "rl-controller"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"{http}/v1/traces", timeout=30)))
    return provider


def _wait_for(what: str, check, deadline: float):
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)  # polling another process's store; there is no event to await


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Iterator[dict]:
    db: Path = tmp_path_factory.mktemp("scrape") / "run.duckdb"
    with RunStore(db) as store:  # the run's thresholds, as an import --config would set them
        run_id = store.default_run_id
        store.register_run(run_id, config=THRESHOLDS)
    engines = {"healthy": Engine(EngineModel(healthy).step),
               "wedged": Engine(EngineModel(wedged).step),
               "saturated": Engine(EngineModel(saturated).step),
               "garbage": Engine(lambda: b"<html><body>502 Bad Gateway</body></html>\n")}
    silent = Silent()
    urls = {**{name: e.url for name, e in engines.items()}, "refused": _refusing_url(),
            "hung": silent.url}
    args = [a for url in urls.values() for a in ("--scrape", url)]
    collector = start_collector(db, *args, "--scrape-interval-s", "0.2")
    try:
        yield {"db": db, "run_id": run_id, "collector": collector, "engines": engines,
               "silent": silent, "urls": urls}
    finally:
        collector.stop()
        silent.close()
        for e in engines.values():
            e.close()


@pytest.fixture(scope="module")
def collected(run) -> dict:
    """Spans sent while the engines are read; then serve stopped and its file reopened."""
    c: Collector = run["collector"]
    engines = run["engines"]
    provider = _exporter(c.http)
    tracer = provider.get_tracer("tests")
    now = time.time_ns()
    # fleet health: shard 0 is the saturated engine, shard 1 the one that keeps up; both
    # healthy from before the first read on
    for idx, name in ((0, "saturated"), (1, "healthy")):
        span = tracer.start_span(SpanName.SHARD_STATE, start_time=now - 60 * 10**9, attributes={
            Attr.SHARD_IDX: idx, Attr.FLEET_STATE: "healthy",
            Attr.BACKEND_URL: f"http://127.0.0.1:{engines[name].port}/v1"})
        span.end(end_time=now + 3600 * 10**9)
    deadline = time.monotonic() + DEADLINE_S
    sent = 2

    def spans_and_incidents():
        nonlocal sent
        # ingest goes on while the engines are read, the hung one included
        with tracer.start_as_current_span("rl.train_step"):
            pass
        sent += 1
        kinds = {r["kind"] for r in c.client.query_records(
            "SELECT DISTINCT kind FROM incidents WHERE kind LIKE 'engine%'")}
        held = run["silent"].held
        return kinds >= {"engine_wedged", "engine_saturated",
                         "engine_backlog_while_healthy"} and held and kinds

    _wait_for("the three engine incidents", spans_and_incidents, deadline)
    # every span sent while the hung engine was being read is committed
    _wait_for("the spans", lambda: c.count("spans") >= sent, deadline)
    stats = _wait_for("a refused engine backing off", lambda: (
        s := c.client.metrics().get("scrape", {}))[run["urls"]["refused"]]["failures"] >= 3
        and s[run["urls"]["garbage"]]["garbage"] >= 1 and s, deadline)
    assert c.alive()
    provider.shutdown()
    rc = c.stop()
    with RunStore(run["db"], read_only=True) as store:
        out = {"rc": rc, "stats": stats, "sent": sent, "output": "".join(c.output),
               "spans": store.query("SELECT count(*) FROM spans")[0][0],
               "metrics": store.query_df(
                   "SELECT run_id, service, name, kind, value, count, sum, attributes, resource "
                   "FROM metrics WHERE name LIKE 'vllm:%'"),
               "state": store.query_df("SELECT * FROM engine_state"),
               "incidents": store.query_df("SELECT * FROM incidents WHERE kind LIKE 'engine%'")}
    return out


def _address(run, name: str) -> str:
    return f"127.0.0.1:{run['engines'][name].port}"


class TestServeScrapesEngines:
    def test_serve_stops_cleanly_with_every_span_sent_committed(self, collected):
        assert collected["rc"] == 0
        assert collected["spans"] >= collected["sent"]

    def test_each_engines_points_are_stored_under_its_address_and_the_serve_run(self, run,
                                                                               collected):
        m = collected["metrics"]
        assert set(m.run_id) == {run["run_id"]}
        assert set(m.service) == {_address(run, n) for n in ("healthy", "wedged", "saturated")}
        healthy_rows = m[m.service == _address(run, "healthy")]
        assert '"url.full":"%s"' % run["urls"]["healthy"] in healthy_rows.resource.iloc[0]
        assert '"model_name":"Qwen/Qwen3-0.6B"' in healthy_rows.attributes.iloc[0]
        kinds = dict(zip(healthy_rows.name, healthy_rows.kind, strict=False))
        assert kinds["vllm:num_requests_running"] == "gauge"
        assert kinds["vllm:num_preemptions"] == "sum"  # the _total sample, by its family name
        assert kinds["vllm:e2e_request_latency_seconds"] == "histogram"
        hist = healthy_rows[healthy_rows.name == "vllm:e2e_request_latency_seconds"]
        # two requests of 2 s each finished per read
        assert (hist["sum"] == 2.0 * hist["count"]).all() and hist["count"].max() >= 4

    def test_engine_state_reads_running_waiting_kv_cache_and_preemptions(self, run, collected):
        st = collected["state"]
        sat = st[st.address == _address(run, "saturated")].sort_values("ts_ns")
        assert (sat.running == 8).all() and (sat.kv_cache_usage == 0.98).all()
        assert list(sat.waiting) == sorted(sat.waiting) and sat.waiting.iloc[-1] > 3
        assert (sat.preemptions_delta.dropna() == 1).all()  # one per read
        assert (sat.preemption_rate.dropna() > 0).all()
        assert (sat.queue_share.dropna().round(6) == 0.8).all()
        ok = st[st.address == _address(run, "healthy")]
        assert (ok.finished_delta.dropna() == 2).all()
        assert (ok.queue_share.dropna().round(6) == 0.025).all()
        assert ok.engine.iloc[0] == f"engine {_address(run, 'healthy')} #0"

    def test_the_wedged_engine_is_an_engine_wedged_incident(self, run, collected):
        inc = collected["incidents"]
        wedged_rows = inc[inc.kind == "engine_wedged"]
        assert list(wedged_rows.subject) == [f"engine {_address(run, 'wedged')} #0"]
        assert "finished none" in wedged_rows.summary.iloc[0]

    def test_the_saturated_engine_is_saturated_and_its_backlog_unseen_by_fleet_health(
            self, run, collected):
        inc = collected["incidents"]
        sat = inc[inc.kind == "engine_saturated"]
        assert list(sat.subject) == [f"engine {_address(run, 'saturated')} #0"]
        assert "80-80%" in sat.summary.iloc[0]
        backlog = inc[inc.kind == "engine_backlog_while_healthy"]
        assert list(backlog.subject) == ["shard 0"]
        assert _address(run, "saturated") in backlog.summary.iloc[0]
        assert len(backlog.evidence.iloc[0]) == 1  # the shard's healthy stay

    def test_the_engine_that_keeps_up_has_no_incident(self, run, collected):
        inc = collected["incidents"]
        assert not inc.summary.str.contains(_address(run, "healthy")).any()
        assert "shard 1" not in set(inc.subject)

    def test_refused_hung_and_garbage_engines_are_counted_and_logged_never_stored(
            self, run, collected):
        stats, urls = collected["stats"], run["urls"]
        refused = stats[urls["refused"]]
        assert refused["scrapes"] == 0 and refused["backoff_s"] > 0.2  # backing off
        assert "ConnectionRefusedError" in refused["last_error"] or \
            "Connection refused" in refused["last_error"]
        hung = stats[urls["hung"]]
        assert hung["scrapes"] == 0 and hung["failures"] >= 1 and run["silent"].held
        assert "timed out" in hung["last_error"]
        garbage = stats[urls["garbage"]]
        assert garbage["scrapes"] == 0 and garbage["garbage"] >= 1
        assert stats[urls["healthy"]]["scrapes"] >= 5 and stats[urls["healthy"]]["failures"] == 0
        out = collected["output"]
        assert f"scrape {urls['refused']} failed" in out
        assert f"scrape {urls['garbage']}: the answer was not Prometheus text" in out


def test_a_store_of_engines_alone_has_its_run_and_thresholds(tmp_path):
    """No span ever arrives: the run the points belong to still has its row, time range and
    thresholds, so the engine incidents can fire."""
    model = EngineModel(wedged)
    engine = Engine(model.step)
    db = tmp_path / "engines.duckdb"
    c = start_collector(db, "--scrape", engine.url, "--scrape-interval-s", "0.2")
    try:
        _wait_for("three reads", lambda: c.count("metrics WHERE name LIKE 'vllm:%'") >= 24,
                  time.monotonic() + DEADLINE_S)
        assert c.stop() == 0
    finally:
        c.stop()
        engine.close()
    with RunStore(db, read_only=True) as store:
        t = store.query_df("SELECT * FROM run_thresholds")
        first = store.query("SELECT min(ts_ns) FROM metrics WHERE name LIKE 'vllm:%'")[0][0]
        assert list(t.run_id) == [store.default_run_id]
    assert t.start_ns.iloc[0] <= first and t.engine_wedged_s.iloc[0] == 120.0
