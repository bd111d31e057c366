"""P5 (wedged backend) and P6 (retry storm) detected from plain HTTP client spans shaped as
released Gym sends them, exported with the stock SDK and OTLP/HTTP exporter into a collector.

Gym 0.7.0's model server (openai_model) sends each try of a call to its backend as its own
``HTTP POST`` CLIENT span under the call's ``gym.model.*`` span, with ``url.full`` and
``http.response.status_code``; rate-limit answers raise the retry ceiling of an internal client
on every try. Nothing here is rolloutscope's own vocabulary."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from rolloutscope.store import RunStore

from .conftest import start_collector

T0 = 1_800_000_000 * 10**9
S = 10**9
STORM = "http://127.0.0.1:9101"
WEDGED = "http://127.0.0.1:9102"
DEAD = "http://127.0.0.1:9103"


def model_server(endpoint: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({
        "service.name": "nemo-gym/policy_model", "nemo.gym.server.name": "policy_model",
        "nemo.gym.server.type": "responses_api_models", "nemo.gym.version": "0.7.0",
        "nemo.run.id": "http-run"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"{endpoint}/v1/traces")))
    return provider


def call(tracer, rollout: str, backend: str, tries: list[tuple[float, float, int]]) -> None:
    """One model call: its gym.model span, and one CLIENT span per try (start s, end s,
    status)."""
    first, last = tries[0][0], tries[-1][1]
    served = tracer.start_span("gym.model.chat_completions", start_time=T0 + int(first * S),
                               attributes={"nemo.gym.server.name": "policy_model",
                                           "nemo.gym.rollout.id": rollout})
    ctx = trace.set_span_in_context(served)
    for start, end, status in tries:
        span = tracer.start_span("HTTP POST", context=ctx, kind=SpanKind.CLIENT,
                                 start_time=T0 + int(start * S), attributes={
                                     "http.request.method": "POST",
                                     "url.full": f"{backend}/v1/chat/completions",
                                     "nemo.gym.rollout.id": rollout,
                                     "http.response.status_code": status})
        span.end(end_time=T0 + int(end * S))
    served.end(end_time=T0 + int(last * S))


def probe(tracer, backend: str, at: float, status: int) -> None:
    span = tracer.start_span("HTTP GET", kind=SpanKind.CLIENT, start_time=T0 + int(at * S),
                             attributes={"http.request.method": "GET",
                                         "url.full": f"{backend}/health",
                                         "http.response.status_code": status})
    span.end(end_time=T0 + int((at + 0.01) * S))


def test_a_504_storm_and_a_wedged_backend_from_real_http_spans(tmp_path):
    collector = start_collector(tmp_path / "http.duckdb")
    try:
        provider = model_server(collector.http)
        tracer = provider.get_tracer("nemo.gym")
        # the storm: six tries of one call, each answered 504 after about a minute
        call(tracer, "5-0", STORM, [(60.0 * i, 60.0 * i + 59.0, 504) for i in range(6)])
        # bounded: three 504s, then the client gave up (max_http_attempts)
        call(tracer, "6-0", STORM, [(10.0 * i, 10.0 * i + 9.0, 504) for i in range(3)])
        # wedged: every generation fails while every probe of it answers OK
        for i in range(4):
            call(tracer, f"{i}-1", WEDGED, [(10.0 + 10 * i, 11.0 + 10 * i, 500)])
        for at in (15.0, 30.0):
            probe(tracer, WEDGED, at, 200)
        # dead, not wedged: its probe fails too
        for i in range(4):
            call(tracer, f"{i}-2", DEAD, [(10.0 + 10 * i, 11.0 + 10 * i, 500)])
        probe(tracer, DEAD, 20.0, 503)
        # a healthy call, for contrast
        call(tracer, "7-0", STORM, [(400.0, 401.0, 200)])
        assert provider.force_flush(30_000)
        provider.shutdown()
    finally:
        collector.stop()
    with RunStore(tmp_path / "http.duckdb", read_only=True) as store:
        calls = store.query_df("SELECT * FROM model_calls ORDER BY start_ns")
        assert len(calls) == 11
        storm = calls[calls.capture_key == "5-0"].iloc[0]
        assert (storm.tries, storm.rate_limited, storm.http_status, storm.outcome) == (
            6, 6, 504, "error")
        inc = store.query_df("SELECT * FROM incidents ORDER BY kind, subject")
        assert [(r.kind, r.subject) for r in inc.itertuples()] == [
            ("retry_storm", "5-0"), ("wedged_backend", f"backend {WEDGED}")]
        storm_inc, wedged_inc = inc.itertuples()
        assert storm_inc.summary == (
            f"A model call of 5-0 to {STORM} was answered HTTP 504 on 6 tries over 359 s; "
            "Gym's client raises its retry ceiling on each rate-limit answer, so the call can "
            "only end at the rollout's deadline.")
        assert len(storm_inc.evidence) == 5
        assert wedged_inc.summary == (f"Backend {WEDGED} answered all 2 liveness probes while "
                                      "failing 4 generations from 10.0 s to 41.0 s.")
