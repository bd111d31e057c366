"""Runs an agent made of LLM client calls (the ``openai`` SDK traced by the released
opentelemetry-instrumentation-openai-v2 or openinference-instrumentation-openai, calling a
local OpenAI-compatible server that records the engine's side as vLLM's ``llm_request``,
exporting to a real ``rolloutscope serve``), then extracts a scenario from it: one rollout per
trace, turns from the call spans, tokens from the call or else the engine, and a report that
says so. Expected values are computed from the stored spans, read here without the views. And a
real Gym 0.7.0 capture (which records no token counts) with the engine's ``llm_request`` posted
under some of its calls: those turns take the engine's counts, the rest of the workload is the
capture's own."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from rolloutscope.cli import main
from rolloutscope.replay import capture_from_store, replay_run
from rolloutscope.replay.extract import extract_scenario
from rolloutscope.replay.scenario import Turn
from rolloutscope.store import RunStore
from rolloutscope.vocabulary import (
    GenAIAttr,
    OpenInferenceAttr,
    ResourceAttr,
    SpanName,
    VllmAttr,
)
from tests.collectors.conftest import _env, start_collector
from tests.collectors.llm_server import ModelServer
from tests.collectors.test_llm_dialects import run_agent
from tests.gym_capture import RUN_ID, bodies, collect_capture, expected_spans, post_capture

pytest.importorskip("openai", reason="the test extra's openai SDK is not installed")
AGENT = Path(__file__).parents[1] / "collectors" / "llm_agent.py"


def run_tasks(tmp_path: Path, dialect: str) -> Path:
    """tests/collectors/llm_agent.py's tasks against one server, collected into a store."""
    db = tmp_path / f"{dialect}-agent.duckdb"
    collector = start_collector(db)
    server = None
    try:
        server = ModelServer(collector.http, dialect)
        done = subprocess.run([sys.executable, str(AGENT), dialect, collector.http, dialect,
                               server.url], capture_output=True, text=True, timeout=300,
                              env=_env())
        assert done.returncode == 0, done.stderr[-4000:]
    finally:
        if server is not None:
            server.stop()
        assert collector.stop() == 0, "".join(collector.output)
    return db


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def expected_rows(store: RunStore) -> list[dict]:
    """Per trace holding calls, in order of its root's start: the row extraction should build,
    from the spans as stored (a call span is a GenAI chat span or an OpenInference LLM span not
    inside another call span)."""
    spans = {sid: dict(zip(("trace", "parent", "name", "start", "end", "attrs"),
                           (t, p, n, s, e, json.loads(a) if a else {}), strict=True))
             for sid, t, p, n, s, e, a in store.query(
                 "SELECT span_id, trace_id, parent_span_id, name, start_ns, end_ns, attributes "
                 "FROM all_spans")}

    def is_call(s: dict) -> bool:
        return (s["attrs"].get(GenAIAttr.OPERATION) == "chat"
                or s["attrs"].get(OpenInferenceAttr.SPAN_KIND) == OpenInferenceAttr.SPAN_KIND_LLM)

    calls = {sid: s for sid, s in spans.items()
             if is_call(s) and not (s["parent"] in spans and is_call(spans[s["parent"]]))}
    engine: dict[str, dict] = {}  # call span -> the llm_request under it or under its HTTP try
    for s in spans.values():
        if s["name"] == SpanName.VLLM_REQUEST:
            up = s["parent"]
            while up is not None and up not in calls:
                up = spans[up]["parent"] if up in spans else None
            if up is not None:
                engine[up] = s["attrs"]
    rows = []
    for root in sorted((s for s in spans.values() if s["parent"] is None
                        and any(c["trace"] == s["trace"] for c in calls.values())),
                       key=lambda s: s["start"]):
        mine = sorted(((sid, c) for sid, c in calls.items() if c["trace"] == root["trace"]),
                      key=lambda x: x[1]["start"])
        turns = []
        for i, (sid, c) in enumerate(mine):
            nxt = mine[i + 1][1]["start"] if i + 1 < len(mine) else root["end"]
            a, e = c["attrs"], engine.get(sid, {})
            tin = _int(a.get(GenAIAttr.INPUT_TOKENS, a.get(OpenInferenceAttr.PROMPT_TOKENS)))
            tout = _int(a.get(GenAIAttr.OUTPUT_TOKENS, a.get(OpenInferenceAttr.COMPLETION_TOKENS)))
            turns.append({
                "model_s": (c["end"] - c["start"]) / 1e9, "tool_s": (nxt - c["end"]) / 1e9,
                "in": tin, "out": tout, "engine_in": e.get(VllmAttr.PROMPT_TOKENS),
                "engine_out": e.get(VllmAttr.COMPLETION_TOKENS)})
        rows.append({"start": root["start"], "end": root["end"],
                     "setup_s": (mine[0][1]["start"] - root["start"]) / 1e9, "turns": turns,
                     "bare": root is mine[0][1]})
    return rows


def check_workload(db: Path) -> tuple[list[dict], list[str]]:
    """The extracted prompts against the stored spans; returns the expected rows and the
    report's lines."""
    with RunStore(db, read_only=True) as store:
        ex = extract_scenario(store)
        expected = expected_rows(store)
        origin = store.query("SELECT min(start_ns) FROM all_spans")[0][0]
    assert ex.report.dialect == "llm"
    assert ex.scenario.config.rollout.num_generations_per_prompt == 1
    prompts = ex.scenario.prompts()
    assert [p.idx for p in prompts] == list(range(len(expected)))
    assert [len(p.rows) for p in prompts] == [1] * len(expected)
    assert [len(p.rows[0].turns) for p in prompts] == [len(r["turns"]) for r in expected]
    for p, want in zip(prompts, expected, strict=True):
        (row,) = p.rows
        assert p.arrival_s == pytest.approx((want["start"] - origin) / 1e9, abs=1e-6)
        assert row.setup_s == pytest.approx(want["setup_s"], abs=1e-6)
        assert [t.model_s for t in row.turns] == pytest.approx(
            [t["model_s"] for t in want["turns"]], abs=1e-6)
        assert [t.tool_s for t in row.turns] == pytest.approx(
            [t["tool_s"] for t in want["turns"]], abs=1e-6)
        # the whole trace is accounted for
        total = row.setup_s + sum(t.model_s + t.tool_s for t in row.turns)
        assert total == pytest.approx((want["end"] - want["start"]) / 1e9, abs=1e-5)
        assert [(t.input_tokens, t.output_tokens) for t in row.turns] == [
            (t["in"] if t["in"] is not None else t["engine_in"] or 0,
             t["out"] if t["out"] is not None else t["engine_out"] or 0) for t in want["turns"]]
    return expected, ex.report.lines()


def token_line(which: str, turns: list[dict]) -> str:
    key = {"input": "in", "output": "out"}[which]
    got = Counter("call" if t[key] is not None else
                  "engine" if t[f"engine_{key}"] is not None else "none" for t in turns)
    kind = "inferred" if got["call"] + got["engine"] else "defaulted"
    return (f"{kind}: workload.turns.{which}_tokens: {got['call']} call(s) from the call's span "
            f"(gen_ai.usage.*, llm.token_count.* or the HTTP answer's usage), {got['engine']} "
            f"from the engine's llm_request (the call recorded none), {got['none']} with none "
            f"recorded: 0")


@pytest.mark.parametrize("dialect", ["genai", "openinference"])
def test_an_agents_tasks_become_one_prompt_per_trace_with_tokens_from_call_or_engine(
        tmp_path, dialect):
    db = run_tasks(tmp_path, dialect)
    expected, lines = check_workload(db)
    # the agent's shape (tests/collectors/llm_agent.py): three tasks and a call of its own
    assert [len(r["turns"]) for r in expected] == [2, 3, 2, 1]
    assert [r["bare"] for r in expected] == [False, False, False, True]
    turns = [t for r in expected for t in r["turns"]]
    # the third task's answers carried no usage: only the engine counted its tokens
    assert [(t["in"], t["engine_in"]) for t in expected[2]["turns"]] == [(None, 11)] * 2
    text = "\n".join(lines)
    assert "LLM client side only" in text
    assert (f"inferred: workload.prompts: 4 prompt(s) of 1 row from {len(turns)} model call(s) "
            f"of {dialect} spans") in text
    assert ("inferred: workload.prompts.grouping: by trace: one rollout per trace holding model "
            "calls (1 of them a call made outside any span)") in text
    assert token_line("input", turns) in lines and token_line("output", turns) in lines
    assert "2 from the engine's llm_request" in token_line("input", turns)
    assert "inferred: workload.turns.model_s: 2 call(s) carry the engine's own record" in text
    assert "failed" not in text and "overlapping" not in text

    out, report = tmp_path / "replayed.duckdb", tmp_path / "report.md"
    rc = main(["replay", str(db), "--out", str(out), "--report", str(report),
               "--fail-on-divergence"])
    assert rc == 0
    assert "LLM client side only" in report.read_text()
    with RunStore(out, read_only=True) as store:
        att = store.query_df("SELECT outcome, duration_s FROM rollout_attempts ORDER BY start_ns")
    assert list(att.outcome) == ["committed"] * len(expected)
    # each replayed try takes its trace's time
    assert list(att.duration_s) == pytest.approx(
        [(r["end"] - r["start"]) / 1e9 for r in expected], abs=1e-5)


def test_the_dialect_fixtures_calls_failed_ones_included_are_turns_and_the_report_counts_them(
        tmp_path):
    db, _, _, _ = run_agent(tmp_path, "genai")
    expected, lines = check_workload(db)
    with RunStore(db, read_only=True) as store:
        failed = Counter(str(s) for (s,) in store.query(
            "SELECT http_status FROM model_calls WHERE outcome = 'error'"))
        engine = store.query("SELECT sum(engine_queue_s), sum(engine_e2e_s), count(*) "
                             "FROM model_calls WHERE engine_e2e_s IS NOT NULL")[0]
    turns = [t for r in expected for t in r["turns"]]
    # tests/collectors/llm_client.py: a turn of two calls, five retries under one step, four
    # rollouts of one call, one call the SDK retried, one span made by hand
    assert [len(r["turns"]) for r in expected] == [2, 5, 1, 1, 1, 1, 1, 1]
    assert token_line("input", turns) in lines and token_line("output", turns) in lines
    said = ", ".join(f"{s} x{n}" for s, n in sorted(failed.items()))
    assert (f"missing: workload.turns: {sum(failed.values())} call(s) failed (HTTP {said}): "
            f"turns of their observed length") in "\n".join(lines)
    queue_s, e2e_s, n = engine
    assert (f"inferred: workload.turns.model_s: {n} call(s) carry the engine's own record (vLLM "
            f"llm_request): model time stays the client's span, which holds the engine's "
            f"{queue_s:g} s queued and {e2e_s:g} s end to end") in "\n".join(lines)
    # the replay runs; the client's failed calls are served, so its incidents vanish
    result = replay_run(capture_from_store(db), out=tmp_path / "replayed.duckdb",
                        fail_on_divergence=False)
    assert result.error is None
    assert result.outcomes_replayed.committed == len(expected)
    assert {k for k, _ in result.vanished} == {"retry_storm", "wedged_backend"}


# -- a Gym run whose calls the engine recorded ---------------------------------------------------
def post_engine_requests(http_base: str, tries: list[dict]) -> None:
    """One vLLM ``llm_request`` under each of ``tries`` (HTTP spans of the Gym capture), as the
    engine would send it: its own resource in the capture's run, the try as remote parent; the
    k-th with 100 + k prompt and 10 + k completion tokens."""
    provider = TracerProvider(resource=Resource.create({
        ResourceAttr.SERVICE_NAME: "vllm-engine", ResourceAttr.RUN_ID: RUN_ID}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"{http_base}/v1/traces")))
    tracer = provider.get_tracer("vllm.tracing")
    for k, t in enumerate(tries):
        parent = trace.set_span_in_context(trace.NonRecordingSpan(SpanContext(
            int(t["trace_id"], 16), int(t["span_id"], 16), is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        span = tracer.start_span(SpanName.VLLM_REQUEST, context=parent, kind=SpanKind.SERVER,
                                 start_time=t["start"] + 1000)
        span.set_attributes({VllmAttr.PROMPT_TOKENS: 100 + k, VllmAttr.COMPLETION_TOKENS: 10 + k,
                             VllmAttr.E2E: (t["end"] - t["start"] - 2000) / 1e9})
        span.end(end_time=t["end"] - 1000)
    provider.shutdown()


def test_a_gym_runs_turns_take_their_tokens_from_the_engine_where_gym_records_none(tmp_path):
    spans = expected_spans()
    calls = {s["span_id"]: s for s in spans if s["name"] == "gym.model.responses"
             and s["attrs"]["nemo.gym.rollout.id"] in ("0-0", "2-0")}
    tries = sorted((s for s in spans if s["parent"] in calls), key=lambda s: s["start"])
    db = tmp_path / "gym-engine.duckdb"
    collector = start_collector(db)
    try:
        assert post_capture(collector.http) == len(bodies())
        post_engine_requests(collector.http, tries)
    finally:
        assert collector.stop() == 0, "".join(collector.output)
    plain = collect_capture(tmp_path / "gym.duckdb")
    with RunStore(db, read_only=True) as store:
        ex = extract_scenario(store)
    with RunStore(plain, read_only=True) as store:
        before = extract_scenario(store)
    assert ex.report.dialect == "gym"
    # the engine's counts, in the order of the calls it served
    by_call = {t["parent"]: (100 + k, 10 + k) for k, t in enumerate(tries)}
    want = {idx: [by_call[sid] for sid, _ in sorted(
                ((sid, c) for sid, c in calls.items()
                 if c["attrs"]["nemo.gym.rollout.id"] == f"{idx}-0"),
                key=lambda x: x[1]["start"])] for idx in (0, 2)}
    for p, q in zip(ex.scenario.prompts(), before.scenario.prompts(), strict=True):
        got = [(t.input_tokens, t.output_tokens) for t in p.rows[0].turns]
        assert got == want.get(p.idx, [(0, 0)] * len(got))
        # everything else is the workload the capture alone gives
        assert [without_tokens(t) for t in p.rows[0].turns] == \
            [without_tokens(t) for t in q.rows[0].turns]
        assert (p.arrival_s, p.rows[0].setup_s) == (q.arrival_s, q.rows[0].setup_s)
    lines = ex.report.lines()
    assert (f"inferred: workload.turns.tokens: {len(tries)} turn(s) from the engine's "
            f"llm_request under the call (where the call recorded none): its prompt and "
            f"completion tokens") in lines
    assert not any("no span carries token counts" in line for line in lines)
    assert any("no span carries token counts" in line for line in before.report.lines())


def without_tokens(turn: Turn) -> Turn:
    return dataclasses.replace(turn, input_tokens=0, output_tokens=0)
