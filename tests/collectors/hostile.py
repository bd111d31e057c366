"""The hostile corpus, as data: requests that decode but cannot be stored as sent, statements the
query endpoint must refuse or bound, and the collector every case runs against.

Each case names what is sent and what must come back (status, a fragment of the message, the
rows of the case's own run that end up stored). ``tests/collectors/test_hostile_corpus.py``
runs them and checks after each one that the collector is up, that the data accepted before the
corpus is intact and that its memory stays bounded.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from google.rpc import status_pb2

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from rolloutscope.collectors.otlp.encode import fill_attributes, to_json
from rolloutscope.vocabulary import Attr, ResourceAttr
from tests.collectors.conftest import Collector
from tests.collectors.otlp_fixtures import T0, log_request, metric_request, span_request

MiB = 1024 * 1024
PB, JS = "application/x-protobuf", "application/json"
PAST_2262 = 2**63  # the first uint64 time a BIGINT cannot hold
UINT64_MAX = 2**64 - 1
# the collector every case runs against: small limits, so the cases are quick
HOSTILE_ARGS = ("--max-body-mib", "8", "--max-decoded-mib", "16", "--max-inflight-mib", "256",
                "--body-timeout-s", "2", "--header-timeout-s", "2", "--query-timeout-s", "3",
                "--query-max-result-mib", "8", "--store-memory-mib", "256")
RSS_CEILING_MIB = 1024  # what those limits allow (see docs/collecting.md's breakdown), with margin
BEFORE_RUN = "before-the-corpus"
BEFORE_SPANS = 50
RESPONSES = {"/v1/traces": ExportTraceServiceResponse, "/v1/metrics": ExportMetricsServiceResponse,
             "/v1/logs": ExportLogsServiceResponse}
ITEMS = {"/v1/traces": "rejected_spans", "/v1/metrics": "rejected_data_points",
         "/v1/logs": "rejected_log_records"}


@dataclass(frozen=True)
class OtlpCase:
    """One export request. ``stored`` is how many items of the case's run must be in the store
    afterwards (the valid ones of a partly valid request)."""

    name: str
    body: bytes
    status: int
    message: str
    rejected: int = 0
    stored: int = 0
    run_id: str = ""
    table: str = "spans"
    path: str = "/v1/traces"
    content_type: str = PB


def _run(name: str) -> str:
    """The case's own run id: readable, and distinct for every name."""
    slug = "".join(c if c.isalnum() else "-" for c in name.lower())[:48]
    return f"hostile-{slug}-{hashlib.blake2b(name.encode(), digest_size=3).hexdigest()}"


def _spans_with(run_id: str, bad: Callable[[Any], None], good: int = 3):
    """``good`` valid spans and one more that ``bad`` spoils."""
    request = span_request(good + 1, run_id=run_id)
    bad(request.resource_spans[0].scope_spans[0].spans[good])
    return request


def _attr(key: str, value: Any) -> Callable[[Any], None]:
    def spoil(span) -> None:
        fill_attributes(span.attributes, {key: value})
    return spoil


def _span_field(**fields: Any) -> Callable[[Any], None]:
    def spoil(span) -> None:
        for name, value in fields.items():
            setattr(span, name, value)
    return spoil


def _event(time_unix_nano: int, attributes: dict | None = None) -> Callable[[Any], None]:
    def spoil(span) -> None:
        event = span.events.add(name="hostile.event", time_unix_nano=time_unix_nano)
        fill_attributes(event.attributes, attributes or {})
    return spoil


def _refused(name: str, spoil: Callable[[Any], None], message: str) -> OtlpCase:
    """Three valid spans and one that cannot be stored: 200, that one rejected and named."""
    run_id = _run(name)
    body = _spans_with(run_id, spoil).SerializeToString()
    return OtlpCase(name, body, 200, message, rejected=1, stored=3, run_id=run_id)


def _coerced(name: str, spoil: Callable[[Any], None], message: str, *,
             stored: int = 4) -> OtlpCase:
    """Four spans, one with a value that fits without loss: all stored, the coercion named."""
    run_id = _run(name)
    body = _spans_with(run_id, spoil).SerializeToString()
    return OtlpCase(name, body, 200, message, rejected=0, stored=stored, run_id=run_id)


def _json_case(name: str, spoil: Callable[[dict], None], status: int, message: str,
               rejected: int, stored: int) -> OtlpCase:
    run_id = _run(name)
    doc = json.loads(to_json(span_request(4, run_id=run_id)))
    spoil(doc["resourceSpans"][0]["scopeSpans"][0]["spans"][3])
    return OtlpCase(name, json.dumps(doc).encode(), status, message, rejected=rejected,
                    stored=stored, run_id=run_id, content_type=JS)


def _json_attr(key: str, value: dict) -> Callable[[dict], None]:
    def spoil(span: dict) -> None:
        span.setdefault("attributes", []).append({"key": key, "value": value})
    return spoil


def _metrics(run_id: str, *, points: list[dict], histogram: bool = False) -> bytes:
    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    fill_attributes(rm.resource.attributes, {ResourceAttr.SERVICE_NAME: "hostile",
                                             ResourceAttr.RUN_ID: run_id})
    metric = rm.scope_metrics.add().metrics.add()
    metric.name = "hostile.metric"
    for p in points:
        if histogram:
            point = metric.histogram.data_points.add()
            point.count = p.get("count", 1)
            point.sum = 1.0
        else:
            point = metric.gauge.data_points.add()
            point.as_double = 1.5
        point.time_unix_nano = p.get("time", T0)
        fill_attributes(point.attributes, p.get("attributes", {}))
    return request.SerializeToString()


def _logs(run_id: str, records: list[dict]) -> bytes:
    request = ExportLogsServiceRequest()
    rl = request.resource_logs.add()
    fill_attributes(rl.resource.attributes, {ResourceAttr.SERVICE_NAME: "hostile",
                                             ResourceAttr.RUN_ID: run_id})
    scope = rl.scope_logs.add()
    for r in records:
        record = scope.log_records.add()
        record.time_unix_nano = r.get("time", T0)
        record.observed_time_unix_nano = r.get("observed", 0)
        record.body.string_value = "hostile log"
    return request.SerializeToString()


def _two_resources(run_id: str, bad_run_id: Any) -> bytes:
    """Two resources: one whose ``nemo.run.id`` cannot be a run id, one that is fine."""
    request = span_request(2, run_id=run_id)
    bad = request.resource_spans.add()
    bad.CopyFrom(request.resource_spans[0])
    del bad.resource.attributes[:]
    fill_attributes(bad.resource.attributes, {ResourceAttr.SERVICE_NAME: "hostile",
                                              ResourceAttr.RUN_ID: bad_run_id})
    for span in bad.scope_spans[0].spans:
        span.span_id = bytes(reversed(span.span_id))
    return request.SerializeToString()


def _duplicates(run_id: str) -> bytes:
    request = span_request(3, run_id=run_id)
    spans = request.resource_spans[0].scope_spans[0].spans
    copy = spans.add()
    copy.CopyFrom(spans[0])
    copy.name = "a second copy"
    return request.SerializeToString()


def _only_poison(run_id: str) -> bytes:
    request = span_request(2, run_id=run_id, attributes={Attr.RL_ATTEMPT: 2**40})
    return request.SerializeToString()


def _metric_case(name: str, points: list[dict], message: str, *, histogram: bool = False,
                 rejected: int = 1) -> OtlpCase:
    run_id = _run(name)
    return OtlpCase(name, _metrics(run_id, points=points, histogram=histogram), 200, message,
                    rejected=rejected, stored=len(points) - rejected, run_id=run_id,
                    table="metrics", path="/v1/metrics")


def _log_case(name: str, records: list[dict], message: str) -> OtlpCase:
    run_id = _run(name)
    return OtlpCase(name, _logs(run_id, records), 200, message, rejected=1,
                    stored=len(records) - 1, run_id=run_id, table="logs", path="/v1/logs")


def post(base: str, path: str, body: bytes, content_type: str = PB,
         headers: dict | None = None) -> tuple[int, bytes, dict]:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": content_type,
                                                       **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    finally:
        conn.close()


def partial_success(path: str, body: bytes, content_type: str) -> tuple[int, str]:
    """(rejected, error_message) of an export response."""
    if content_type == JS:
        doc = json.loads(body or b"{}").get("partialSuccess", {})
        key = "".join(w.capitalize() if i else w for i, w in enumerate(ITEMS[path].split("_")))
        return int(doc.get(key, 0)), doc.get("errorMessage", "")
    response = RESPONSES[path].FromString(body)
    return getattr(response.partial_success, ITEMS[path]), response.partial_success.error_message


def status_message(body: bytes, content_type: str) -> str:
    if content_type == JS:
        return json.loads(body).get("message", "")
    return status_pb2.Status.FromString(body).message


def rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def assert_sound(c: Collector) -> None:
    """Up, with the data accepted before the corpus intact, within its memory ceiling."""
    assert c.alive()
    before = c.client.query_records(
        f"SELECT (SELECT count(*) FROM spans WHERE run_id = '{BEFORE_RUN}') AS spans, "
        f"(SELECT count(DISTINCT span_id) FROM spans WHERE run_id = '{BEFORE_RUN}') "
        f"AS ids, (SELECT count(*) FROM metrics WHERE name = 'fixture.gauge') AS metrics, "
        f"(SELECT count(*) FROM logs WHERE body = 'fixture log') AS logs")
    assert before == [{"spans": BEFORE_SPANS, "ids": BEFORE_SPANS, "metrics": 1, "logs": 1}]
    assert rss_mib(c.process.pid) < RSS_CEILING_MIB


def accept_the_before_data(c: Collector) -> None:
    """The data every case must leave intact: spans, a metric point and a log record."""
    body = span_request(BEFORE_SPANS, run_id=BEFORE_RUN).SerializeToString()
    assert post(c.http, "/v1/traces", body)[0] == 200
    assert post(c.http, "/v1/metrics", metric_request().SerializeToString())[0] == 200
    assert post(c.http, "/v1/logs", log_request().SerializeToString())[0] == 200
    assert_sound(c)


PAST = "is past the latest time the store holds (9223372036854775807 ns, 2262-04-11)"
CK, RUN, ATTEMPT = Attr.CHECKPOINT_ID, Attr.RUN_ID, Attr.RL_ATTEMPT


def otlp_cases() -> list[OtlpCase]:
    dup_run, poison_run = _run("duplicate span ids"), _run("only poison")
    two_run = _run("a resource whose run id is a list")
    cases = [
        # -- times a BIGINT cannot hold ----------------------------------------------------
        _refused("span start and end past 2^63 ns",
                 _span_field(start_time_unix_nano=PAST_2262, end_time_unix_nano=PAST_2262 + 5),
                 f"end_time_unix_nano {PAST_2262 + 5} {PAST}"),
        _refused("span end at uint64 max", _span_field(end_time_unix_nano=UINT64_MAX),
                 f"end_time_unix_nano {UINT64_MAX} {PAST}"),
        _refused("event time past 2^63 ns", _event(PAST_2262),
                 f"event 'hostile.event' time {PAST_2262} {PAST}"),
        _refused("event time at uint64 max", _event(UINT64_MAX),
                 f"event 'hostile.event' time {UINT64_MAX}"),
        # -- promoted attributes of the wrong type -----------------------------------------
        _coerced("checkpoint id sent as an int", _attr(CK, 7),
                 "coerced 1 value to fit its column: span "),
        _refused("checkpoint id sent as a list", _attr(CK, ["a", "b"]),
                 "attribute 'nemo.gym.checkpoint.id' = ['a', 'b'] (list) does not fit column "
                 "checkpoint_id (VARCHAR): send a string"),
        _refused("checkpoint id sent as a double", _attr(CK, 1.5),
                 "'nemo.gym.checkpoint.id' = 1.5 (float) does not fit column checkpoint_id"),
        _refused("checkpoint id sent as a bool", _attr(CK, True),
                 "'nemo.gym.checkpoint.id' = True (bool) does not fit"),
        _refused("checkpoint id sent as bytes", _attr(CK, b"\x01\x02"),
                 "'nemo.gym.checkpoint.id' = b'\\x01\\x02' (bytes) does not fit"),
        _refused("checkpoint id sent as a kvlist", _attr(CK, {"k": "v"}),
                 "'nemo.gym.checkpoint.id' = {'k': 'v'} (dict) does not fit"),
        _refused("run id on a span sent as a list", _attr(RUN, ["r1", "r2"]),
                 "'nemo.run.id' = ['r1', 'r2'] (list) does not fit column run_id (VARCHAR)"),
        _coerced("run id on a span sent as an int", _attr(RUN, 42),
                 "'nemo.run.id' = 42 (int) stored as text '42'", stored=3),  # 1 in run '42'

        _refused("rollout id sent as a list", _attr(Attr.ROLLOUT_ID, ["r"]),
                 "'nemo.gym.rollout.id' = ['r'] (list) does not fit column rollout_id"),
        _refused("episode rollout id sent as a double", _attr(Attr.EPISODE_ROLLOUT_ID, 2.5),
                 "'nemo.gym.episode.rollout_id' = 2.5 (float) does not fit column rollout_id"),
        _coerced("participant kind sent as an int", _attr(Attr.CK_PARTICIPANT_KIND, 3),
                 "'nemo.gym.checkpoint.participant_kind' = 3 (int) stored as text '3'"),
        _refused("participant kind sent as a list", _attr(Attr.CK_PARTICIPANT_KIND, [1]),
                 "does not fit column participant_kind (VARCHAR)"),
        # -- promoted integers out of range or not integers --------------------------------
        _refused("attempt of 2^40", _attr(ATTEMPT, 2**40),
                 "'nemo.rl.rollout.attempt' = 1099511627776 (int) does not fit column attempt "
                 "(INTEGER): out of range -2147483648..2147483647"),
        _refused("attempt of +inf", _attr(ATTEMPT, math.inf),
                 "'nemo.rl.rollout.attempt' = inf (float) does not fit column attempt "
                 "(INTEGER): not a finite number"),
        _refused("attempt of -inf", _attr(ATTEMPT, -math.inf), "not a finite number"),
        _refused("attempt of NaN", _attr(ATTEMPT, math.nan), "nan (float) does not fit"),
        _refused("attempt of 2.5", _attr(ATTEMPT, 2.5), "2.5 (float) does not fit column "
                                                        "attempt (INTEGER): has a fraction"),
        _refused("attempt sent as a bool", _attr(ATTEMPT, True),
                 "a boolean is not an integer"),
        _refused("attempt sent as text that is not a number", _attr(ATTEMPT, "second"),
                 "'second' (str) does not fit column attempt (INTEGER): not a decimal integer"),
        _refused("attempt sent as a list", _attr(ATTEMPT, [1, 2]),
                 "[1, 2] (list) does not fit column attempt (INTEGER): not an integer"),
        _coerced("attempt sent as 3.0", _attr(ATTEMPT, 3.0),
                 "'nemo.rl.rollout.attempt' = 3.0 (float) stored as 3"),
        _coerced("attempt sent as the text 3", _attr(ATTEMPT, "3"),
                 "'nemo.rl.rollout.attempt' = '3' (str) stored as 3"),
        _refused("episode attempt of 2^31", _attr(Attr.EPISODE_ATTEMPT, 2**31),
                 "'nemo.gym.episode.attempt' = 2147483648 (int) does not fit column attempt"),
        _refused("shard index of 1e300", _attr(Attr.SHARD_IDX, 1e300),
                 "'nemo.rl.gen.shard.idx' = 1e+300 (float) does not fit column shard_idx "
                 "(INTEGER): out of range"),
        _refused("shard index below -2^31", _attr(Attr.SHARD_IDX, -(2**31) - 1),
                 "does not fit column shard_idx (INTEGER): out of range"),
        _refused("prompt index of 1e19", _attr(Attr.PROMPT_IDX, 1e19),
                 "'nemo.rl.prompt.idx' = 1e+19 (float) does not fit column prompt_idx (BIGINT)"),
        _refused("prompt index sent as text", _attr(Attr.PROMPT_IDX, "p-7"),
                 "'p-7' (str) does not fit column prompt_idx (BIGINT): not a decimal integer"),
        _refused("open marker naming a list", _attr(Attr.OPEN_MARKER_FOR, ["x"]),
                 "'rolloutscope.open_marker_for' = ['x'] (list) does not fit column span_id"),
        _refused("event attribute with an attempt of 2^40",
                 _event(T0, {ATTEMPT: 2**40}), "does not fit column attempt (INTEGER)"),
        # -- whole requests ----------------------------------------------------------------
        OtlpCase("duplicate span ids within a request", _duplicates(dup_run), 200,
                 "duplicate of an earlier span in this request (same trace_id and span_id); "
                 "the first is kept", rejected=1, stored=3, run_id=dup_run),
        OtlpCase("a request of nothing but unstorable spans", _only_poison(poison_run), 400,
                 "rejected 2 of 2 spans: span ", run_id=poison_run),
        OtlpCase("a resource whose run id is a list", _two_resources(two_run, ["a", "b"]), 200,
                 "resource attribute 'nemo.run.id' = ['a', 'b'] (list) does not fit column "
                 "run_id", rejected=2, stored=2, run_id=two_run),
        # -- OTLP/JSON ---------------------------------------------------------------------
        _json_case("JSON time past 2^63 ns as a uint64 string",
                   lambda s: s.update(startTimeUnixNano=str(PAST_2262),
                                      endTimeUnixNano=str(UINT64_MAX)),
                   200, f"end_time_unix_nano {UINT64_MAX} {PAST}", 1, 3),
        _json_case("JSON attempt of Infinity", _json_attr(ATTEMPT, {"doubleValue": "Infinity"}),
                   200, "inf (float) does not fit column attempt", 1, 3),
        _json_case("JSON shard index of 1e300", _json_attr(Attr.SHARD_IDX, {"doubleValue": 1e300}),
                   200, "does not fit column shard_idx", 1, 3),
        _json_case("JSON prompt index at int64 max fits",
                   _json_attr(Attr.PROMPT_IDX, {"intValue": str(2**63 - 1)}), 200, "", 0, 4),
        # -- metrics and logs --------------------------------------------------------------
        _metric_case("metric point time past 2^63 ns",
                     [{"time": T0}, {"time": PAST_2262}],
                     f"time_unix_nano {PAST_2262} {PAST}"),
        _metric_case("histogram count past 2^63",
                     [{"count": 3}, {"count": UINT64_MAX}],
                     "metrics.count (BIGINT) cannot hold 18446744073709551615", histogram=True),
        _metric_case("metric step sent as a list",
                     [{"attributes": {Attr.METRIC_STEP: 4}},
                      {"attributes": {Attr.METRIC_STEP: [4]}}],
                     "'rl.step' = [4] (list) does not fit column step (BIGINT)"),
        _metric_case("metric step of 1e300",
                     [{"attributes": {Attr.METRIC_STEP: 1e300}}, {}],
                     "'rl.step' = 1e+300 (float) does not fit column step (BIGINT)"),
        _log_case("log time past 2^63 ns", [{"time": T0}, {"time": PAST_2262}],
                  f"time_unix_nano {PAST_2262} {PAST}"),
        _log_case("log observed time past 2^63 ns",
                  [{"time": T0}, {"time": 0, "observed": UINT64_MAX}],
                  f"observed_time_unix_nano {UINT64_MAX} {PAST}"),
    ]
    return cases


@dataclass(frozen=True)
class QueryCase:
    name: str
    sql: str
    status: int
    message: str
    fmt: str = "arrow"
    rows: int | None = None  # for a 200: how many rows come back


def query_cases() -> list[QueryCase]:
    refused = "table function checkpoint() is refused"
    return [
        QueryCase("query() reaching checkpoint()",
                  "SELECT * FROM query('SELECT * FROM checkpoint()')", 403, refused),
        QueryCase("query() reaching force_checkpoint()",
                  "FROM query('FROM force_checkpoint()')", 403,
                  "table function force_checkpoint() is refused"),
        QueryCase("query() inside query() reaching checkpoint()",
                  "SELECT * FROM query('SELECT * FROM query(''SELECT * FROM checkpoint()'')')",
                  403, refused),
        QueryCase("query() of a CALL", "SELECT * FROM query('CALL checkpoint()')", 403,
                  "CALL statements are refused"),
        QueryCase("query() of text built at run time",
                  "SELECT * FROM query('SELECT * FROM ' || 'checkpoint()')", 403,
                  "query() must be given one constant SELECT"),
        QueryCase("query() in a subquery in the select list",
                  "SELECT (SELECT count(*) FROM query('FROM checkpoint()'))", 403, refused),
        QueryCase("query() in a CTE",
                  "WITH t AS (FROM query('FROM checkpoint()')) SELECT * FROM t", 403, refused),
        QueryCase("query_table() of a file", "SELECT * FROM query_table('/etc/passwd')", 403,
                  "query_table() may name only the store's tables and views"),
        QueryCase("query_table() of the store's tables is a read",
                  "SELECT count(*) AS n FROM query_table(['runs', 'runs'])", 200, "", rows=1),
        QueryCase("checkpoint() in a lateral join",
                  "SELECT * FROM spans, LATERAL (SELECT * FROM checkpoint()) LIMIT 1", 403,
                  refused),
        QueryCase("duckdb_secrets()", "SELECT * FROM duckdb_secrets()", 403,
                  "table function duckdb_secrets() is refused"),
        QueryCase("read_blob() of a file", "SELECT * FROM read_blob('/etc/hostname')", 403,
                  "table function read_blob() is refused"),
        QueryCase("nextval() in a select list", "SELECT nextval('s')", 403,
                  "function nextval() writes to the store or leaves it"),
        QueryCase("EXPLAIN ANALYZE", "EXPLAIN ANALYZE SELECT 1", 403,
                  "statements are refused: the query endpoint is read-only"),
        QueryCase("two statements, the second a checkpoint", "SELECT 1; CHECKPOINT", 403,
                  "send exactly one statement, got 2"),
        QueryCase("a result over the byte limit, Arrow",
                  "SELECT repeat('x', 1000) AS s FROM range(100000)", 413,
                  "result exceeds 8388608 bytes"),
        QueryCase("a result over the byte limit, JSON",
                  "SELECT repeat('x', 1000) AS s FROM range(100000)", 413,
                  "result exceeds 8388608 bytes", fmt="json"),
        QueryCase("a query past its time limit while executing",
                  "SELECT count(*) FROM range(100000000000)", 408,
                  "query exceeded its time limit of 3 s"),
        QueryCase("a query past its time limit while its result streams",
                  "SELECT range FROM range(100000000000) WHERE range % 999983 = 0", 408,
                  "query exceeded its time limit of 3 s"),
        QueryCase("a query past its time limit while its result streams, JSON",
                  "SELECT range FROM range(100000000000) WHERE range % 999983 = 0", 408,
                  "query exceeded its time limit of 3 s", fmt="json"),
        QueryCase("a query over DuckDB's memory limit",
                  "SELECT len(list(range)) AS n FROM range(100000000)", 413,
                  "query needs more memory than the store's limit"),
    ]


@dataclass(frozen=True)
class Corpus:
    otlp: list[OtlpCase] = field(default_factory=otlp_cases)
    queries: list[QueryCase] = field(default_factory=query_cases)
