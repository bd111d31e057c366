"""An agent calling OpenAI-compatible backends through the ``openai`` SDK, traced by a released
LLM instrumentation, exporting with the stock OTLP/HTTP exporter (a process of its own: both
instrumentations patch the same SDK).

    llm_client.py DIALECT ENDPOINT RUN_ID BACKEND_A BACKEND_B

DIALECT: ``genai`` (opentelemetry-instrumentation-openai-v2) or ``openinference``
(openinference-instrumentation-openai). The calls (tests/collectors/llm_server.py answers each
``answer S1 S2 ...`` text with those statuses in turn), each client with the SDK's retries off
unless said:
- under ``agent.turn``: one call answered 200, one answered 400 (A);
- under ``agent.step``: one call the agent retries itself 5 times, each answered 429 (A);
- four calls answered 504 (B), each under a rollout span of its own, a liveness probe of B
  (``GET /health`` through a traced httpx client, answered 200) after each;
- under ``agent.flaky``: one call through a traced httpx client, the SDK retrying twice: its
  HTTP tries are answered 503, 503, 200 (A); the server records the engine's side of the 200;
- genai only: a GenAI span made by hand with its input tokens sent as the text "abc" (A).
Prints one JSON line: the number of spans the process ended.
"""

from __future__ import annotations

import json
import sys

import httpx
import openai
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

MODEL = "my-model"


class Count(SpanProcessor):
    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span) -> None:
        self.ended += 1


def call(client: openai.OpenAI, text: str) -> None:
    try:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}])
    except openai.APIStatusError:
        pass


def instrumented(dialect: str, endpoint: str, run_id: str):
    """An agent's tracer provider exporting to ``endpoint``, the openai SDK instrumented in
    ``dialect`` (genai | openinference), with its span count, tracer and a traced httpx
    client: (provider, count, tracer, traced_http)."""
    provider = TracerProvider(resource=Resource.create({"service.name": f"agent-{dialect}",
                                                        "nemo.run.id": run_id}))
    count = Count()
    provider.add_span_processor(count)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"{endpoint}/v1/traces")))
    if dialect == "genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("agent")
    traced_http = httpx.Client()
    HTTPXClientInstrumentor.instrument_client(traced_http, tracer_provider=provider)
    return provider, count, tracer, traced_http


def main(dialect: str, endpoint: str, run_id: str, backend_a: str, backend_b: str) -> None:
    provider, count, tracer, traced_http = instrumented(dialect, endpoint, run_id)

    a = openai.OpenAI(base_url=f"{backend_a}/v1", api_key="test", max_retries=0)
    b = openai.OpenAI(base_url=f"{backend_b}/v1", api_key="test", max_retries=0)
    a_traced = openai.OpenAI(base_url=f"{backend_a}/v1", api_key="test", max_retries=2,
                             http_client=traced_http)
    with tracer.start_as_current_span("agent.turn"):
        call(a, "answer 200")
        call(a, "answer 400")
    with tracer.start_as_current_span("agent.step"):
        for _ in range(5):
            call(a, "answer 429")
    for i in range(4):
        with tracer.start_as_current_span(f"agent.rollout.{i}"):
            call(b, "answer 504")
        traced_http.get(f"{backend_b}/health")
    with tracer.start_as_current_span("agent.flaky"):
        call(a_traced, "answer 503 503 200")
    if dialect == "genai":
        port = int(backend_a.rsplit(":", 1)[1])
        with tracer.start_as_current_span("chat bad-model", kind=SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "bad-model",
                "gen_ai.usage.input_tokens": "abc", "gen_ai.usage.output_tokens": 2,
                "server.address": "127.0.0.1", "server.port": port}):
            pass
    assert provider.force_flush(30_000)
    provider.shutdown()
    print(json.dumps({"ended": count.ended}))


if __name__ == "__main__":
    main(*sys.argv[1:])
