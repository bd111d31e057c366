"""Model calls from the dialects instrumented LLM clients speak, on real bytes: the ``openai`` SDK
traced by the released ``opentelemetry-instrumentation-openai-v2`` (OpenTelemetry's GenAI
conventions) and, separately, by ``openinference-instrumentation-openai``, calling a small
OpenAI-compatible server on 127.0.0.1 (tests/collectors/llm_server.py, which also records the
engine's side of a call as vLLM's ``llm_request``), exporting with the stock OTLP/HTTP exporter to
a real ``rolloutscope serve``. The agent's calls are tests/collectors/llm_client.py's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rolloutscope.store import RunStore

from .conftest import _env, start_collector
from .llm_server import ENGINE_PID, ENGINE_SERVICE, ModelServer

pytest.importorskip("openai", reason="the test extra's openai SDK is not installed")
CLIENT = Path(__file__).parent / "llm_client.py"
COLUMNS = ("source", "name", "outcome", "http_status", "error_type", "backend", "tries",
           "rate_limited", "input_tokens", "output_tokens", "model")


def run_agent(tmp_path: Path, dialect: str) -> tuple[Path, int, int, int]:
    """Serve, run the agent against two backends, stop: (store, spans the agent ended,
    port of A, port of B)."""
    db = tmp_path / f"{dialect}.duckdb"
    collector = start_collector(db)
    a = b = None
    try:
        a, b = ModelServer(collector.http, dialect), ModelServer(collector.http, dialect)
        done = subprocess.run([sys.executable, str(CLIENT), dialect, collector.http, dialect,
                               a.url, b.url], capture_output=True, text=True, timeout=300,
                              env=_env())
        assert done.returncode == 0, done.stderr[-4000:]
        ended = json.loads(done.stdout.strip().splitlines()[-1])["ended"]
    finally:
        for server in (a, b):
            if server is not None:
                server.stop()
        assert collector.stop() == 0, "".join(collector.output)
    return db, ended, a.port, b.port


def rows(store: RunStore, sql: str) -> list[tuple]:
    with store.cursor() as cur:
        return cur.execute(sql).fetchall()


def calls(store: RunStore) -> list[tuple]:
    return rows(store, f"SELECT {', '.join(COLUMNS)} FROM model_calls ORDER BY start_ns")



def engine_side(store: RunStore) -> list[tuple]:
    """The engine's side of each call that has one, and the engine request under the call's
    last HTTP try."""
    return rows(store, """
        SELECT c.engine_service, c.engine_instance, c.engine_request_id, c.engine_queue_s,
               c.engine_ttft_s, c.engine_prefill_s, c.engine_decode_s, c.engine_e2e_s,
               c.engine_prompt_tokens, c.engine_completion_tokens, c.engine_finish_reason,
               h.http_status, h.parent_span_id = c.span_id
        FROM model_calls c
        JOIN engine_requests e ON e.trace_id = c.trace_id
        JOIN http_requests h ON h.span_id = e.parent_span_id
        WHERE c.engine_service IS NOT NULL""")


ENGINE = [(ENGINE_SERVICE, ENGINE_PID, "chatcmpl-10", 0.25, 0.5, 0.125, 0.375, 0.75, 11, 3, None,
           200, True)]


def test_openai_v2_genai_spans_are_model_calls_and_incidents(tmp_path):
    db, ended, pa, pb = run_agent(tmp_path, "genai")
    a, b = f"127.0.0.1:{pa}", f"127.0.0.1:{pb}"
    chat = ("genai", "chat my-model")
    with RunStore(db, read_only=True) as store:
        assert calls(store) == [
            (*chat, "ok", None, None, a, 0, 0, 11, 3, "my-model"),
            (*chat, "error", 400, "BadRequestError", a, 0, 0, None, None, "my-model"),
            *[(*chat, "error", 429, "RateLimitError", a, 0, 1, None, None, "my-model")] * 5,
            *[(*chat, "error", 504, "InternalServerError", b, 0, 1, None, None, "my-model")] * 4,
            # one call whose three HTTP tries were traced too: one row, from the tries
            (*chat, "ok", 200, None, f"http://{a}", 3, 2, 11, 3, "my-model"),
            # tokens sent as text: the span is stored, the value named
            ("genai", "chat bad-model", "ok", None, None, a, 0, 0, None, 2, "bad-model")]
        assert rows(store, "SELECT provider, request_id FROM model_calls "
                           "WHERE outcome = 'ok' ORDER BY start_ns") == [
            ("openai", "chatcmpl-1"), ("openai", "chatcmpl-10"), (None, None)]
        assert rows(store, "SELECT unread_attributes FROM model_calls "
                           "WHERE unread_attributes IS NOT NULL") == [
            ('gen_ai.usage.input_tokens="abc"',)]
        assert engine_side(store) == ENGINE
        # every span the agent ended was stored, the bad one too, and the engine's
        assert rows(store, "SELECT service, count(*) FROM spans GROUP BY ALL ORDER BY 1") == [
            ("agent-genai", ended), (ENGINE_SERVICE, 1)]
        incidents = rows(store, "SELECT kind, subject, summary, len(evidence) FROM incidents "
                                "ORDER BY kind")
    # the seconds a summary quotes are the machine's: masked
    assert [(k, s, re.sub(r"[0-9.]+ s\b", "N s", t), n) for k, s, t, n in incidents] == [
        ("retry_storm", a,
         f"A model call of an unknown rollout to {a} (my-model) was made 5 times over N s under "
         "one parent span (genai spans), each answered HTTP 429; a client that keeps retrying a "
         "rate-limited backend can only end at its deadline.", 5),
        ("wedged_backend", f"backend {b}", f"Backend {b} answered all 3 liveness probes while "
         "failing 4 generations from N s to N s.", 4)]


def test_openinference_llm_spans_are_model_calls_and_a_retry_storm(tmp_path):
    db, ended, pa, _ = run_agent(tmp_path, "openinference")
    chat = ("openinference", "ChatCompletion")
    with RunStore(db, read_only=True) as store:
        assert calls(store) == [
            (*chat, "ok", None, None, None, 0, 0, 11, 3, "my-model"),
            (*chat, "error", 400, "openai.BadRequestError", None, 0, 0, None, None, "my-model"),
            *[(*chat, "error", 429, "openai.RateLimitError", None, 0, 1, None, None,
               "my-model")] * 5,
            *[(*chat, "error", 504, "openai.InternalServerError", None, 0, 1, None, None,
               "my-model")] * 4,
            (*chat, "ok", 200, None, f"http://127.0.0.1:{pa}", 3, 2, 11, 3, "my-model")]
        assert engine_side(store) == ENGINE
        assert rows(store, "SELECT service, count(*) FROM spans GROUP BY ALL ORDER BY 1") == [
            ("agent-openinference", ended), (ENGINE_SERVICE, 1)]
        # OpenInference records no server address: a call without a traced HTTP try has no
        # backend, so the failing backend cannot be matched to its probes (no wedged_backend)
        incidents = rows(store, "SELECT kind, subject FROM incidents ORDER BY kind")
    assert incidents == [("retry_storm", "my-model")]
