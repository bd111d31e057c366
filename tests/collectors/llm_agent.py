"""An agent working tasks against an OpenAI-compatible backend through the ``openai`` SDK, traced
by a released LLM instrumentation and exporting with the stock OTLP/HTTP exporter: the shape of
run replay extraction reads as an LLM client's workload (a process of its own, as
tests/collectors/llm_client.py).

    llm_agent.py DIALECT ENDPOINT RUN_ID BACKEND

DIALECT: ``genai`` (opentelemetry-instrumentation-openai-v2) or ``openinference``. Each task is
one trace under an ``agent.rollout`` root span; every call is answered 200
(tests/collectors/llm_server.py):
- task 0: a call, a ``tool.get_weather`` span, a call;
- task 1: three ``agent.turn`` spans, each a call (and a tool span after the first two);
- task 2: two calls through a traced httpx client whose answers carry no usage (``no-usage``),
  a tool span between them: the engine's ``llm_request`` is the only record of their tokens;
- then one call outside any span.
Prints one JSON line: the number of spans the process ended.
"""

from __future__ import annotations

import json
import sys

import openai

from llm_client import MODEL, instrumented


def main(dialect: str, endpoint: str, run_id: str, backend: str) -> None:
    provider, count, tracer, traced_http = instrumented(dialect, endpoint, run_id)
    plain = openai.OpenAI(base_url=f"{backend}/v1", api_key="test", max_retries=0)
    traced = openai.OpenAI(base_url=f"{backend}/v1", api_key="test", max_retries=0,
                           http_client=traced_http)

    def call(client: openai.OpenAI, text: str = "answer 200") -> None:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}])

    def tool() -> None:
        with tracer.start_as_current_span("tool.get_weather"):
            json.dumps({"city": "Paris", "temperature_c": 21})

    with tracer.start_as_current_span("agent.rollout"):
        call(plain)
        tool()
        call(plain)
    with tracer.start_as_current_span("agent.rollout"):
        for i in range(3):
            with tracer.start_as_current_span("agent.turn"):
                call(plain)
                if i < 2:
                    tool()
    with tracer.start_as_current_span("agent.rollout"):
        call(traced, "answer 200 no-usage")
        tool()
        call(traced, "answer 200 no-usage")
    call(plain)
    assert provider.force_flush(30_000)
    provider.shutdown()
    print(json.dumps({"ended": count.ended}))


if __name__ == "__main__":
    main(*sys.argv[1:])
