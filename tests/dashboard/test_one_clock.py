"""One run, one clock: RL's driver, Gym and a vLLM engine, each its own process with its own
resource, export with the stock SDK and OTLP/HTTP exporter to a real ``rolloutscope serve`` over
loopback. Where the ``traceparent`` crosses each hop (RL's try → Gym's rollout → Gym's HTTP try
→ the engine's ``llm_request``), the trace waterfall follows the rollout through all of them;
where it does not (an engine request that came with no ``traceparent``), the request is still in
the run by the ``nemo.run.id`` on the engine's resource, and on the engine's lane, by time
(docs/engines.md, "One run, one clock")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import context as otel_context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rolloutscope.dashboard import trace_plot as tp
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.time_views import Fleet
from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr, ResourceAttr, SpanName, VllmAttr
from tests.collectors.conftest import start_collector

RUN = "one-clock"
T0 = 1_800_000_000 * 10**9
S = 10**9
ENGINE, ENGINE_PID = "vllm-engine", "4242"
URL = "http://127.0.0.1:8000/v1/chat/completions"


class Process:
    """One process's tracer: its own resource, exporting to the collector."""

    def __init__(self, endpoint: str, service: str, **resource: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({
            ResourceAttr.SERVICE_NAME: service, ResourceAttr.RUN_ID: RUN, **resource}))
        self.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
            endpoint=f"{endpoint}/v1/traces")))
        self.tracer = self.provider.get_tracer(service)

    def span(self, name: str, start_s: float, end_s: float, *, parent=None, headers=None,
             kind=SpanKind.INTERNAL, attributes=None):
        """A span under ``parent`` (a span of this process) or under the ``traceparent`` of
        ``headers`` (what another process sent), ended at ``end_s``."""
        if headers is not None:
            ctx = TraceContextTextMapPropagator().extract(headers)
        else:
            ctx = set_span_in_context(parent) if parent is not None else otel_context.Context()
        span = self.tracer.start_span(name, context=ctx, kind=kind, attributes=attributes,
                                      start_time=T0 + int(start_s * S))
        span.end(end_time=T0 + int(end_s * S))
        return span

    def close(self) -> None:
        self.provider.force_flush(30_000)
        self.provider.shutdown()


def traceparent(span) -> dict[str, str]:
    """The headers a process sends from inside ``span``."""
    headers: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(headers, context=set_span_in_context(span))
    return headers


def engine_attrs(request_id: str, queue_s: float) -> dict:
    return {VllmAttr.REQUEST_ID: request_id, VllmAttr.TIME_IN_QUEUE: queue_s,
            VllmAttr.TIME_TO_FIRST_TOKEN: 0.5, VllmAttr.E2E: 1.5,
            VllmAttr.PROMPT_TOKENS: 20, VllmAttr.COMPLETION_TOKENS: 5}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Iterator[tuple[RunStore, str]]:
    """The run as the collector stored it, and the trace id of RL's try."""
    db = tmp_path_factory.mktemp("one-clock") / "run.duckdb"
    collector = start_collector(db)
    try:
        rl = Process(collector.http, "nemo-rl-driver")
        gym = Process(collector.http, "nemo-gym")
        engine = Process(collector.http, ENGINE, **{VllmAttr.PROCESS_ID: ENGINE_PID})
        # each span is ended before its parent is, as the processes would: children first
        attempt = rl.tracer.start_span(SpanName.RL_ATTEMPT, start_time=T0, attributes={
            Attr.ROLLOUT_ID: "p7", Attr.PROMPT_IDX: 7, Attr.RL_ATTEMPT: 0})
        rollout = gym.tracer.start_span(
            SpanName.GYM_ROLLOUT, start_time=T0 + int(0.5 * S), kind=SpanKind.SERVER,
            context=TraceContextTextMapPropagator().extract(traceparent(attempt)),
            attributes={Attr.ROLLOUT_ID: "p7-0"})
        http_try = gym.tracer.start_span(
            "HTTP POST", context=set_span_in_context(rollout), kind=SpanKind.CLIENT,
            start_time=T0 + 1 * S, attributes={Attr.URL_FULL: URL, Attr.HTTP_METHOD: "POST"})
        engine.span(SpanName.VLLM_REQUEST, 1.125, 2.625, headers=traceparent(http_try),
                    kind=SpanKind.SERVER, attributes=engine_attrs("chatcmpl-1", 0.25))
        # a request whose sender passed no traceparent: a trace of its own
        engine.span(SpanName.VLLM_REQUEST, 3.0, 4.5, kind=SpanKind.SERVER,
                    attributes=engine_attrs("chatcmpl-2", 1.0))
        http_try.set_attribute(Attr.HTTP_STATUS, 200)
        http_try.end(end_time=T0 + int(2.75 * S))
        rollout.end(end_time=T0 + 3 * S)
        attempt.end(end_time=T0 + 5 * S)
        trace_id = format(attempt.get_span_context().trace_id, "032x")
        for process in (engine, gym, rl):
            process.close()
    finally:
        assert collector.stop() == 0, "".join(collector.output)
    with RunStore(db, read_only=True) as store:
        yield store, trace_id


def test_the_waterfall_follows_the_rollout_from_rl_through_gym_into_the_engine(run):
    store, trace_id = run
    data = DataStore(store, run_id=RUN)
    spans, total = data.trace_spans(trace_id)
    rows = tp.waterfall_rows(spans)
    assert total == 4
    assert list(zip(rows.depth, rows.name, rows.service, rows.kind)) == [
        (0, SpanName.RL_ATTEMPT, "nemo-rl-driver", "INTERNAL"),
        (1, SpanName.GYM_ROLLOUT, "nemo-gym", "SERVER"),
        (2, "HTTP POST", "nemo-gym", "CLIENT"),
        (3, SpanName.VLLM_REQUEST, ENGINE, "SERVER")]
    # each row's parent is the row above it, and each bar is where its span was on one clock
    assert list(rows.parent_span_id[1:]) == list(rows.span_id[:-1])
    assert list(zip(rows.start_ms, rows.end_ms)) == [
        (0.0, 5000.0), (500.0, 3000.0), (1000.0, 2750.0), (1125.0, 2625.0)]
    assert "gen_ai.latency.time_in_queue=0.25" in rows["attrs"].iloc[3]


def test_an_engine_request_without_traceparent_joins_the_run_by_its_resource(run):
    store, trace_id = run
    data = DataStore(store, run_id=RUN)
    requests = data.frames["engine_requests"].sort_values("start_ns")
    assert list(zip(requests.request_id, requests.engine_service, requests.engine_instance,
                    requests.trace_id == trace_id, requests.parent_span_id.isna())) == [
        ("chatcmpl-1", ENGINE, ENGINE_PID, True, False),
        ("chatcmpl-2", ENGINE, ENGINE_PID, False, True)]
    # both on the engine's lane of the Fleet tab, where they were in time
    plot = Fleet(data).lane_figure()
    lane = f"engine {ENGINE} {ENGINE_PID}"
    bars = plot.layer("bars")
    bars = bars[bars.lane == lane].sort_values("x0")
    assert list(bars.what) == ["request chatcmpl-1", "request chatcmpl-2"]
    t0 = data.origin_ns()
    assert list(bars.x0) == pytest.approx([(T0 + int(1.125 * S) - t0) / S,
                                           (T0 + 3 * S - t0) / S], abs=1e-6)
    assert lane in dict(plot.lanes).values()
