"""The hostile corpus (``tests/collectors/hostile.py``) against a real ``rolloutscope serve``:
every case gets its status and a message naming the problem, the valid items of a partly valid
request are stored, and after each case the collector is up, the data accepted before the
corpus is intact and its memory is bounded. Also: a poisoned request among concurrent good
ones costs only itself, and the stock exporters lose no good span to a bad one."""

from __future__ import annotations

import json
import threading

import grpc
import pyarrow as pa
import pytest

from tests.collectors import hostile
from tests.collectors.conftest import Collector, start_collector
from tests.collectors.hostile import assert_sound, partial_success, post, status_message
from tests.collectors.otlp_fixtures import span_request

CORPUS = hostile.Corpus()
GRPC_SERVICES = {"/v1/traces": "trace.v1.TraceService", "/v1/metrics": "metrics.v1.MetricsService",
                 "/v1/logs": "logs.v1.LogsService"}


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    c = start_collector(tmp_path_factory.mktemp("hostile") / "run.duckdb", *hostile.HOSTILE_ARGS)
    hostile.accept_the_before_data(c)
    yield c
    c.stop()


def test_the_corpus_has_at_least_60_distinct_cases():
    names = [c.name for c in CORPUS.otlp] + [q.name for q in CORPUS.queries]
    assert len(set(names)) == len(names) >= 60


def _stored(c: Collector, case: hostile.OtlpCase) -> int:
    return c.client.query_records(
        f"SELECT count(*) AS n FROM {case.table} WHERE run_id = '{case.run_id}'")[0]["n"]


@pytest.mark.parametrize("case", CORPUS.otlp, ids=[c.name for c in CORPUS.otlp])
def test_an_item_that_cannot_be_stored_is_named_and_the_rest_is_kept(target, case):
    status, body, _ = post(target.http, case.path, case.body, case.content_type)
    assert status == case.status, body[:500]
    if status == 200:
        rejected, message = partial_success(case.path, body, case.content_type)
        assert rejected == case.rejected
        assert case.message in message if case.message else message == ""
    else:
        assert case.message in status_message(body, case.content_type)
    assert _stored(target, case) == case.stored
    assert_sound(target)


GRPC_CASES = [c for c in CORPUS.otlp if c.content_type == hostile.PB][::3]


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c.name for c in GRPC_CASES])
def test_over_grpc_the_same_item_is_named_and_the_rest_is_kept(target, case):
    # a second copy of the case, under its own run id, so the stored count is this call's
    body = case.body.replace(case.run_id.encode(), (case.run_id[:-1] + "~").encode())
    method = f"/opentelemetry.proto.collector.{GRPC_SERVICES[case.path]}/Export"
    with grpc.insecure_channel(target.grpc) as channel:
        export = channel.unary_unary(method)
        if case.status == 200:
            rejected, message = partial_success(case.path, export(body, timeout=60), hostile.PB)
            assert rejected == case.rejected
            assert case.message in message if case.message else message == ""
        else:
            with pytest.raises(grpc.RpcError) as info:
                export(body, timeout=60)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert case.message in info.value.details()
    copy = hostile.OtlpCase(case.name, body, case.status, "", run_id=case.run_id[:-1] + "~",
                            table=case.table)
    assert _stored(target, copy) == case.stored
    assert_sound(target)


@pytest.mark.parametrize("case", CORPUS.queries, ids=[q.name for q in CORPUS.queries])
def test_a_query_is_refused_or_bounded_on_what_duckdb_would_run(target, case):
    status, body, headers = post(target.http, "/v1/query",
                                 json.dumps({"sql": case.sql, "format": case.fmt}).encode(),
                                 hostile.JS)
    assert status == case.status, body[:500]
    if status == 200:
        rows = (json.loads(body)["rows"] if case.fmt == "json"
                else pa.ipc.open_stream(body).read_all().to_pylist())
        assert len(rows) == case.rows
    else:
        assert case.message in json.loads(body)["error"]["message"]
    assert_sound(target)


def test_a_poisoned_request_among_concurrent_good_ones_costs_only_itself(target):
    good = [span_request(200, run_id=f"hostile-concurrent-{i}").SerializeToString()
            for i in range(9)]
    poison = span_request(200, run_id="hostile-concurrent-poison",
                          attributes={hostile.CK: ["a"]})
    poison.resource_spans[0].scope_spans[0].spans[0].attributes.clear()  # one good span
    answers: dict[str, int] = {}
    bodies = {f"hostile-concurrent-{i}": b for i, b in enumerate(good)}
    bodies["hostile-concurrent-poison"] = poison.SerializeToString()
    barrier = threading.Barrier(len(bodies))

    def send(run_id: str, body: bytes) -> None:
        barrier.wait()
        answers[run_id] = post(target.http, "/v1/traces", body)[0]

    threads = [threading.Thread(target=send, args=item) for item in bodies.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert set(answers.values()) == {200}
    stored = {r["run_id"]: r["n"] for r in target.client.query_records(
        "SELECT run_id, count(*) AS n FROM spans WHERE run_id LIKE 'hostile-concurrent-%' "
        "GROUP BY run_id")}
    assert stored == {**{f"hostile-concurrent-{i}": 200 for i in range(9)},
                      "hostile-concurrent-poison": 1}
    assert_sound(target)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(("value", "stored"), [(["a", "b"], 495), (7, 500)],
                         ids=["list-checkpoint-id", "int-checkpoint-id"])
def test_the_stock_exporter_loses_no_good_span_to_a_bad_one_in_its_batch(target, protocol,
                                                                         value, stored):
    """Five batches of 100 through the stock exporter, one span in each with a checkpoint id
    of the wrong type: every batch is answered (partial success, or a coercion), none is
    retried or dropped, and every good span is stored."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.collectors.sender import span_exporter

    run_id = f"hostile-stock-{protocol}-{type(value).__name__}"
    provider = TracerProvider(resource=Resource.create({"service.name": "hostile",
                                                        "nemo.run.id": run_id}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("hostile")
    exporter = span_exporter(protocol, target.http if protocol == "http"
                             else f"http://{target.grpc}")
    try:
        for batch in range(5):
            for i in range(100):
                attrs = {hostile.CK: value} if i == 50 else {hostile.CK: f"ck-{batch}"}
                tracer.start_span("hostile.item", attributes=attrs).end()
            assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
            memory.clear()
    finally:
        exporter.shutdown()
    assert target.client.query_records(
        f"SELECT count(*) AS n FROM spans WHERE run_id = '{run_id}'") == [{"n": stored}]
    requests = target.client.metrics()["rolloutscope.collector.requests"]
    assert not any(k.endswith(("/503", "/500", "UNAVAILABLE")) for k in requests)
    assert_sound(target)
