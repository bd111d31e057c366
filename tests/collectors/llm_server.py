"""A tiny OpenAI-compatible model server on 127.0.0.1 for the dialect tests, with the engine's
side of each answered call recorded as vLLM records it.

``POST /v1/chat/completions``: the last message's text is ``answer S1 S2 ...``: the k-th request
with that text is answered with status S_k (the last one repeats); a 200 carries usage (11
prompt, 3 completion tokens; none where the text has the word ``no-usage``, as a server that
reports none) and the id ``chatcmpl-N``, any other status an OpenAI-style error
body (with ``retry-after-ms: 5``, so the SDK's own retries wait 5 ms). ``GET /health`` answers
200. A 200 whose request carried a ``traceparent`` header is also recorded as vLLM's engine
would: one ``llm_request`` SERVER span under that parent, with the names vLLM sets
(``VllmAttr``), exported with the stock SDK and OTLP/HTTP exporter from a resource of its own
(the engine's service). vLLM itself cannot run here; its span is built from the recorded names.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rolloutscope.vocabulary import ResourceAttr, SpanName, VllmAttr

PROMPT_TOKENS, COMPLETION_TOKENS = 11, 3
ENGINE_SERVICE, ENGINE_PID = "vllm-engine", "4242"
# the engine's latencies, in seconds (exact in binary, so the rows compare exactly)
ENGINE_LATENCIES = {VllmAttr.TIME_IN_QUEUE: 0.25, VllmAttr.TIME_TO_FIRST_TOKEN: 0.5,
                    VllmAttr.TIME_IN_MODEL_PREFILL: 0.125, VllmAttr.TIME_IN_MODEL_DECODE: 0.375,
                    VllmAttr.TIME_IN_MODEL_INFERENCE: 0.5, VllmAttr.E2E: 0.75}


class ModelServer:
    """Started on a free port of 127.0.0.1; ``url`` is its base URL, ``stop()`` ends it and
    flushes the engine's spans."""

    def __init__(self, collector_http: str, run_id: str) -> None:
        self.seen: Counter[str] = Counter()
        self.calls = 0
        self._lock = threading.Lock()
        self.engine = TracerProvider(resource=Resource.create({
            ResourceAttr.SERVICE_NAME: ENGINE_SERVICE, VllmAttr.PROCESS_ID: ENGINE_PID,
            ResourceAttr.RUN_ID: run_id}))
        self.engine.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=f"{collector_http}/v1/traces")))
        self._tracer = self.engine.get_tracer("vllm.tracing")
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._reply(200 if self.path == "/health" else 404, {"status": "ok"})

            def do_POST(self) -> None:
                arrival_ns = time.time_ns()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["messages"][-1]["content"]
                status, n = server._status(text)
                if status != 200:
                    self._reply(status, {"error": {"message": f"answered {status}",
                                                   "type": "test", "code": None}})
                    return
                self._reply(200, {
                    "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1,
                    "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "ok"}}],
                    **({} if "no-usage" in text.split() else {"usage": {
                        "prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}})})
                if "traceparent" in self.headers:
                    server._engine_span(dict(self.headers), arrival_ns, n)

            def _reply(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("retry-after-ms", "5")
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_port}"
        self.port = self._http.server_port
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def _status(self, text: str) -> tuple[int, int]:
        statuses = [int(s) for s in text.split()[1:] if s.isdigit()]
        with self._lock:
            k = self.seen[text]
            self.seen[text] += 1
            self.calls += 1
            return statuses[min(k, len(statuses) - 1)], self.calls

    def _engine_span(self, headers: dict[str, str], arrival_ns: int, n: int) -> None:
        parent = TraceContextTextMapPropagator().extract(
            {k.lower(): v for k, v in headers.items()})
        span = self._tracer.start_span(SpanName.VLLM_REQUEST, context=parent,
                                       kind=SpanKind.SERVER, start_time=arrival_ns)
        span.set_attributes({VllmAttr.REQUEST_ID: f"chatcmpl-{n}",
                             VllmAttr.PROMPT_TOKENS: PROMPT_TOKENS,
                             VllmAttr.COMPLETION_TOKENS: COMPLETION_TOKENS,
                             **ENGINE_LATENCIES})
        span.end()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        assert self.engine.force_flush(30_000)
        self.engine.shutdown()
