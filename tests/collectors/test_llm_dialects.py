"""Model calls from the dialects instrumented LLM clients speak, on real bytes: the ``openai`` SDK
traced by the released ``opentelemetry-instrumentation-openai-v2`` (OpenTelemetry's GenAI
conventions) and, separately, by ``openinference-instrumentation-openai``, calling a small
OpenAI-compatible server on 127.0.0.1 (tests/collectors/llm_server.py, which also records the
engine's side of a call as vLLM's ``llm_request``), exporting with the stock OTLP/HTTP exporter to
a real ``rolloutscope serve``. The agent's calls are tests/collectors/llm_client.py's."""

from __future__ import annotations

import json
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
    return [tuple(r) for r in store.query_df(sql).itertuples(index=False)]


def calls(store: RunStore) -> list[tuple]:
    return rows(store, f"SELECT {', '.join(COLUMNS)} FROM model_calls ORDER BY start_ns")


def test_explore(tmp_path):
    db, ended, pa, pb = run_agent(tmp_path, "genai")
    with RunStore(db, read_only=True) as store:
        print(ended, store.query_df("SELECT count(*) FROM spans"))
        print(store.query_df("SELECT name, kind, service, status_code, status_message, attributes FROM spans ORDER BY start_ns").to_string())
        for r in store.query_df("SELECT * FROM model_calls ORDER BY start_ns").to_dict("records"):
            print(r)
        print(store.query_df("SELECT kind, subject, summary FROM incidents").to_string())
    assert 0
