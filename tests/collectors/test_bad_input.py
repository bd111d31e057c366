"""A corpus of malformed requests: each gets its 4xx / INVALID_ARGUMENT naming the problem,
the collector stays up with bounded memory, and what it accepted before is untouched."""

from __future__ import annotations

import gzip
import http.client
import json
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

import grpc
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from rolloutscope.collectors.otlp.encode import to_json
from tests.collectors.conftest import start_collector
from tests.collectors.otlp_fixtures import T0, log_request, metric_request, span_request

MiB = 1024 * 1024
LIMIT_ARGS = ("--max-body-mib", "1", "--max-decoded-mib", "4", "--max-attributes", "64",
              "--max-attribute-value-bytes", "4096")
PB = "application/x-protobuf"
JS = "application/json"


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    status: int
    message: str
    content_type: str | None = PB
    path: str = "/v1/traces"
    encoding: str | None = None
    method: str = "POST"
    chunked: bool = False


def _gzip_bomb(expanded: int) -> bytes:
    deflater = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MiB)
    return b"".join([*(deflater.compress(zeros) for _ in range(expanded // MiB)),
                     deflater.flush()])


def _pb(request) -> bytes:
    return request.SerializeToString()


def _corpus() -> list[Case]:
    valid = _pb(span_request(3))
    utf8 = _pb(span_request(1, name="bad-\u00e9")).replace("\u00e9".encode(), b"\xff\xfe")
    many_attrs = {f"k{i}": i for i in range(65)}
    json_wrong_id = json.loads(to_json(span_request(1)))
    json_wrong_id["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "abcd"
    json_bad_hex = json.loads(to_json(span_request(1)))
    json_bad_hex["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "zz" * 8
    return [
        Case("garbage protobuf", b"\xff\xff\xff\xff\x0f", 400, "not a valid protobuf"),
        Case("truncated protobuf", valid[:-5], 400, "not a valid protobuf"),
        Case("invalid UTF-8 in a protobuf string", utf8, 400, "UTF-8"),
        Case("invalid JSON", b'{"resourceSpans": [', 400, "not valid JSON", JS),
        Case("JSON that is not an object", b"[1, 2]", 400, "must be an object", JS),
        Case("invalid UTF-8 in JSON", b'{"resourceSpans": "\xff"}', 400, "not valid JSON", JS),
        Case("JSON of the wrong shape", b'{"resourceSpans": "x"}', 400,
             "does not match the OTLP traces schema", JS),
        Case("JSON id that is not hex", json.dumps(json_bad_hex).encode(), 400, "is not hex", JS),
        Case("JSON trace id of the wrong length", json.dumps(json_wrong_id).encode(), 400,
             "trace_id must be 16 bytes, got 2", JS),
        Case("wrong content type", valid, 415, "unsupported content type 'text/plain'",
             "text/plain"),
        Case("no content type", valid, 415, "unsupported content type", None),
        Case("unsupported content encoding", valid, 415,
             "unsupported content encoding 'br'", encoding="br"),
        Case("body over the size limit", bytes(2 * MiB), 413, "exceeds the limit of 1048576"),
        Case("chunked body over the size limit", bytes(2 * MiB), 413, "exceeds the limit",
             chunked=True),
        Case("gzip bomb", _gzip_bomb(256 * MiB), 413, "expands beyond the limit of 4194304",
             encoding="gzip"),
        Case("body that is not gzip", valid, 400, "not valid gzip", encoding="gzip"),
        Case("truncated gzip", gzip.compress(valid)[:-12], 400, "gzip body is truncated",
             encoding="gzip"),
        Case("trace id of the wrong length", _pb(span_request(1, trace_id=b"\x01" * 5)), 400,
             "trace_id must be 16 bytes, got 5"),
        Case("span id of the wrong length", _pb(span_request(1, span_id=b"\x01" * 9)), 400,
             "span_id must be 8 bytes, got 9"),
        Case("parent id of the wrong length", _pb(span_request(1, parent_span_id=b"\x01")),
             400, "parent_span_id must be empty or 8 bytes, got 1"),
        Case("all-zero trace id", _pb(span_request(1, trace_id=bytes(16))), 400,
             "must not be all zeros"),
        Case("end before start", _pb(span_request(1, end_time_unix_nano=T0 - 1)), 400,
             f"end_time_unix_nano {T0 - 1} is before start_time_unix_nano {T0}"),
        Case("no start time", _pb(span_request(1, start_time_unix_nano=0)), 400,
             "start_time_unix_nano is missing"),
        Case("too many attributes", _pb(span_request(1, attributes=many_attrs)), 400,
             "65 attributes, limit 64"),
        Case("attribute value too long", _pb(span_request(1, attributes={"big": "x" * 5000})),
             400, "attribute 'big' is 5000 characters, limit 4096"),
        Case("attribute array too long", _pb(span_request(1, attributes={"arr": list(range(100))})),
             400, "attribute 'arr' has 100 elements, limit 64"),
        Case("resource with too many attributes", _pb(span_request(1, resource=many_attrs)), 400,
             "resource: 65 attributes, limit 64"),
        Case("link with ids of the wrong length",
             _pb(span_request(1, links=[(b"\x01" * 3, b"\x02" * 8)])), 400,
             "link ids must be 16 and 8 bytes, got 3 and 8"),
        Case("metric point without a time", _pb(metric_request(time_unix_nano=0)), 400,
             "time_unix_nano is missing", path="/v1/metrics"),
        Case("log record with a trace id of the wrong length",
             _pb(log_request(trace_id=b"\x01" * 4)), 400, "must be 16/8 bytes or empty, got 4/0",
             path="/v1/logs"),
        Case("GET on an export route", b"", 405, "Method Not Allowed", method="GET"),
        Case("unknown route", valid, 404, "Not Found", path="/v1/spans"),
    ]


CORPUS = _corpus()


def _post(base: str, case: Case) -> tuple[int, bytes, str]:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {}
    if case.content_type:
        headers["Content-Type"] = case.content_type
    if case.encoding:
        headers["Content-Encoding"] = case.encoding
    try:
        if case.chunked:
            chunks = (case.body[i:i + 65536] for i in range(0, len(case.body), 65536))
            conn.request(case.method, case.path, body=chunks, headers=headers,
                         encode_chunked=True)
        else:
            conn.request(case.method, case.path, body=case.body or None, headers=headers)
        response = conn.getresponse()
        return response.status, response.read(), response.getheader("Content-Type", "")
    finally:
        conn.close()


def _message(body: bytes, content_type: str) -> str:
    if content_type.startswith(PB):
        return status_pb2.Status.FromString(body).message
    if content_type.startswith(JS):
        return json.loads(body).get("message", "")
    return body.decode(errors="replace")


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    c = start_collector(tmp_path_factory.mktemp("bad") / "run.duckdb", *LIMIT_ARGS)
    accepted = _post(c.http, Case("valid", _pb(span_request(50, run_id="before")), 200, ""))
    assert accepted[0] == 200
    yield c
    c.stop()


def test_the_corpus_has_at_least_25_distinct_bad_inputs():
    assert len({c.name for c in CORPUS}) == len(CORPUS) >= 25


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_a_bad_request_is_refused_with_a_message_naming_the_problem(limited, case):
    status, body, content_type = _post(limited.http, case)
    assert status == case.status
    assert case.message in _message(body, content_type)
    assert limited.alive()


def test_accepted_data_is_intact_and_memory_bounded_after_the_corpus(limited):
    rss_before = limited.rss_bytes()
    bomb = next(c for c in CORPUS if c.name == "gzip bomb")
    oversize = next(c for c in CORPUS if c.name == "chunked body over the size limit")
    for _ in range(5):
        assert _post(limited.http, bomb)[0] == 413
        assert _post(limited.http, oversize)[0] == 413
    # five 256 MiB expansions refused without ever holding more than the 4 MiB limit
    assert limited.rss_bytes() - rss_before < 48 * MiB
    rows = limited.client.query_records(
        "SELECT count(*) AS n, count(DISTINCT span_id) AS ids FROM spans WHERE run_id='before'")
    assert rows == [{"n": 50, "ids": 50}]
    assert limited.count() == 50
    metrics = limited.client.metrics()
    assert metrics["rolloutscope.collector.items.accepted"]["traces"] == 50
    assert metrics["problems"]["decoded_too_large"] >= 6


def test_a_partly_valid_request_commits_the_valid_spans_and_reports_partial_success(limited):
    request = span_request(4, run_id="partial")
    request.resource_spans[0].scope_spans[0].spans[1].end_time_unix_nano = 1
    status, body, _ = _post(limited.http, Case("partial", _pb(request), 200, ""))
    assert status == 200
    response = ExportTraceServiceResponse.FromString(body)
    assert response.partial_success.rejected_spans == 1
    assert "rejected 1 of 4 spans" in response.partial_success.error_message
    assert "is before start_time_unix_nano" in response.partial_success.error_message
    assert limited.client.query_records(
        "SELECT count(*) AS n FROM spans WHERE run_id = 'partial'") == [{"n": 3}]


@pytest.mark.parametrize(("body", "message"), [
    (b"\xff\xff\xff\xff\x0f", "not a valid protobuf"),
    (_pb(span_request(1, span_id=b"\x01")), "span_id must be 8 bytes, got 1"),
])
def test_a_bad_grpc_export_is_invalid_argument_naming_the_problem(limited, body, message):
    with grpc.insecure_channel(limited.grpc) as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as info:
            export(body, timeout=30)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details()
    assert limited.alive()
