"""otlp-json: OTLP/JSON requests and SDK console spans, one per line, through the decoder."""

from __future__ import annotations

import json

from rolloutscope.store import RunStore

from .conftest import OTLP_JSONL, run_import


def test_traces_metrics_logs_and_console_spans_are_stored_as_a_collector_would(capsys, db):
    report = run_import(capsys, "otlp-json", OTLP_JSONL, db=db)
    assert report["recognised"] == {"otlp_traces": 2, "otlp_metrics": 1, "otlp_logs": 1,
                                    "sdk_console_span_traces": 1}
    assert (report["spans"], report["metrics"], report["logs"]) == (4, 2, 1)
    with RunStore(db, read_only=True) as store:
        spans = store.query_df("SELECT * FROM spans ORDER BY start_ns, name")
        metrics = store.query("SELECT name, kind FROM metrics ORDER BY name")
        source = store.query("SELECT run_id, source FROM runs")
    assert set(spans.name) == {"gym.rollout", "gym.model.responses", "gym.agent.responses",
                               "gym.verify"}
    console = spans[spans.name == "gym.agent.responses"].iloc[0]
    assert console.parent_span_id == "eee19b7ec3c1b174" and console.kind == "SERVER"
    assert console.status_code == "ERROR" and console.rollout_id == "17-0"
    assert json.loads(console.attributes)["http.response.status_code"] == 500
    assert metrics == [("gym.rollout.duration_ms", "histogram"),
                       ("gym.servers.active", "gauge")]
    assert source == [("gym-run", "import")]


def test_each_refused_line_or_item_is_reported_with_its_line_number(capsys, db):
    report = run_import(capsys, "otlp-json", OTLP_JSONL, db=db)
    where = [b.split(": ", 1)[0] for b in report["bad"]]
    assert where == [f"{OTLP_JSONL}:{n}" for n in (4, 6, 7, 8, 9)]
    assert "span_id must be 8 bytes" in report["bad"][0]
    assert "not hex" in report["bad"][3]


def test_a_resource_without_a_run_id_gets_the_imports_run_id(capsys, db, tmp_path):
    line = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
        "name": "gym.rollout", "startTimeUnixNano": "1787220000000000000",
        "endTimeUnixNano": "1787220001000000000"}]}]}]}
    path = tmp_path / "anonymous.jsonl"
    path.write_text(json.dumps(line) + "\n")
    run_import(capsys, "otlp-json", path, db=db, run_id="given")
    with RunStore(db, read_only=True) as store:
        assert store.query("SELECT DISTINCT run_id FROM spans") == [("given",)]
        assert store.query("SELECT first_seen_ns, last_seen_ns FROM runs") == [
            (1787220000000000000, 1787220001000000000)]
