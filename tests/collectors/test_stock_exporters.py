"""The stock OTel Python exporters, each in its own process, into a real collector."""

from __future__ import annotations

import pytest

from tests.collectors.conftest import run_sender

SPANS, LOGS = 200, 20


@pytest.mark.parametrize("protocol", ["http-protobuf", "http-json", "grpc"])
def test_spans_metrics_and_logs_from_a_stock_exporter_land_intact(collector, protocol):
    run_id = f"stock-{protocol}"
    endpoint = collector.grpc if protocol == "grpc" else collector.http
    if protocol == "grpc":
        endpoint = f"http://{endpoint}"
    sent = run_sender("stock", protocol, endpoint, run_id, str(SPANS), str(LOGS))
    assert sent["flushed"]
    q = collector.client.query_records

    spans = q(f"SELECT name, rollout_id, status_code, status_message, kind, service, scope, "
              f"attributes, trace_id, parent_span_id FROM spans WHERE run_id = '{run_id}' "
              f"ORDER BY start_ns")
    assert len(spans) == SPANS
    root = next(s for s in spans if s["name"] == "gym.rollout.batch")
    children = [s for s in spans if s["name"] == "gym.rollout"]
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    assert root["parent_span_id"] is None
    assert all(s["parent_span_id"] is not None for s in children)
    assert sorted(s["rollout_id"] for s in children) == sorted(
        f"{run_id}-r{i}-a1" for i in range(SPANS - 1))
    assert sum(s["status_code"] == "ERROR" for s in children) == len(range(0, SPANS - 1, 10))
    assert {s["service"] for s in spans} == {f"sender-{protocol}"}
    assert {s["kind"] for s in spans} == {"INTERNAL"}
    assert {s["scope"] for s in spans} == {"sender"}
    assert '"sender.flags":[true,false]' in children[0]["attributes"]
    assert '"sender.ratio":0.0' in children[0]["attributes"]

    events = q(f"SELECT count(*) AS n, count(rollout_id) AS with_rollout FROM span_events "
               f"WHERE run_id = '{run_id}' AND name = 'gym.rollout.ack'")[0]
    assert events == {"n": SPANS - 1, "with_rollout": SPANS - 1}

    metrics = {r["name"]: r for r in q(
        f"SELECT name, kind, max(value) AS value, max(count) AS count, max(sum) AS sum "
        f"FROM metrics WHERE run_id = '{run_id}' GROUP BY name, kind")}
    assert metrics["sender.requests"]["kind"] == "sum"
    assert metrics["sender.requests"]["value"] == sent["counter_total"]
    assert metrics["sender.latency_ms"]["kind"] == "histogram"
    assert metrics["sender.latency_ms"]["count"] == sent["histogram_count"]
    assert metrics["sender.latency_ms"]["sum"] == sum(range(10))

    logs = q(f"SELECT body, severity FROM logs WHERE run_id = '{run_id}' ORDER BY ts_ns")
    assert [r["body"] for r in logs] == [f"sender log line {i}" for i in range(LOGS)]
    assert {r["severity"] for r in logs} == {"WARN"}
