"""The engine's side of a model call: vLLM's ``llm_request`` SERVER span, built from the names
vLLM sets (``VllmAttr``; vLLM itself cannot run here) with the stock SDK, parented by the
caller's context as vLLM parents it from the ``traceparent`` header. Whichever span sent the
request (a GenAI call span itself, an HTTP try under a Gym model call, a plain HTTP request),
the call's row carries the engine's side."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from rolloutscope.vocabulary import Attr, GenAIAttr, SpanName, VllmAttr

from .conftest import S, T0

URL = "http://127.0.0.1:8000/v1/chat/completions"


def _span(kit, name, start_s, end_s, kind, attrs, parent=None):
    ctx = trace.set_span_in_context(parent) if parent is not None else None
    span = kit.tracer.start_span(name, context=ctx, kind=kind, attributes=attrs,
                                 start_time=T0 + int(start_s * S))
    span.end(end_time=T0 + int(end_s * S))
    return span


def _engine(kit, parent, start_s, request_id, queue_s, **extra):
    span = kit.tracer.start_span(
        SpanName.VLLM_REQUEST, context=trace.set_span_in_context(parent), kind=SpanKind.SERVER,
        start_time=T0 + int(start_s * S),
        attributes={VllmAttr.REQUEST_ID: request_id, VllmAttr.TIME_IN_QUEUE: queue_s,
                    VllmAttr.TIME_TO_FIRST_TOKEN: 0.5, VllmAttr.TIME_IN_MODEL_PREFILL: 0.25,
                    VllmAttr.TIME_IN_MODEL_DECODE: 1.0, VllmAttr.E2E: 1.5,
                    VllmAttr.PROMPT_TOKENS: 20, VllmAttr.COMPLETION_TOKENS: 5, **extra})
    span.end(end_time=T0 + int((start_s + 1.5) * S))
    return span


def test_each_kind_of_call_carries_the_engine_request_sent_from_it(kit):
    # a GenAI call span whose client injected its own context: the engine span is its child
    genai = kit.tracer.start_span("chat m", kind=SpanKind.CLIENT, start_time=T0, attributes={
        GenAIAttr.OPERATION: "chat", GenAIAttr.REQUEST_MODEL: "m",
        Attr.SERVER_ADDRESS: "127.0.0.1", Attr.SERVER_PORT: 8000})
    _engine(kit, genai, 0.1, "req-genai", 0.25,
            **{VllmAttr.FINISH_REASONS: ["length"]})
    genai.end(end_time=T0 + 2 * S)
    # a Gym model call: the engine span is a child of its HTTP try
    gym = kit.tracer.start_span(SpanName.GYM_MODEL_CHAT, start_time=T0 + 10 * S,
                                attributes={Attr.ROLLOUT_ID: "1-0"})
    http_try = _span(kit, "HTTP POST", 10.1, 12.0, SpanKind.CLIENT,
                     {Attr.URL_FULL: URL, Attr.HTTP_METHOD: "POST", Attr.HTTP_STATUS: 200},
                     parent=gym)
    _engine(kit, http_try, 10.2, "req-gym", 0.125)
    gym.end(end_time=T0 + 12 * S)
    # a plain HTTP request to a generation route: the engine span is its child; its queue time
    # sent as text that is no number
    plain = _span(kit, "POST", 20.0, 22.0, SpanKind.CLIENT,
                  {Attr.URL_FULL: URL, Attr.HTTP_METHOD: "POST", Attr.HTTP_STATUS: 200})
    _engine(kit, plain, 20.1, "req-http", "slow")
    store = kit.flush()

    assert store.query(
        "SELECT source, engine_service, engine_request_id, engine_queue_s, engine_ttft_s, "
        "engine_prefill_s, engine_decode_s, engine_e2e_s, engine_prompt_tokens, "
        "engine_completion_tokens, engine_finish_reason FROM model_calls ORDER BY start_ns") == [
        ("genai", "tests", "req-genai", 0.25, 0.5, 0.25, 1.0, 1.5, 20, 5, "length"),
        ("gym", "tests", "req-gym", 0.125, 0.5, 0.25, 1.0, 1.5, 20, 5, None),
        ("http", "tests", "req-http", None, 0.5, 0.25, 1.0, 1.5, 20, 5, None)]
    assert store.query(
        "SELECT e.request_id, e.queue_s, e.duration_s, p.name FROM engine_requests e "
        "JOIN spans p ON p.span_id = e.parent_span_id ORDER BY e.start_ns") == [
        ("req-genai", 0.25, 1.5, "chat m"), ("req-gym", 0.125, 1.5, "HTTP POST"),
        ("req-http", None, 1.5, "POST")]
    # the wrong-typed value is kept as sent
    assert store.query(
        f"SELECT attributes->>'{VllmAttr.TIME_IN_QUEUE}' FROM spans "
        f"WHERE name = '{SpanName.VLLM_REQUEST}' ORDER BY start_ns") == [
        ("0.25",), ("0.125",), ("slow",)]
