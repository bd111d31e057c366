"""Rows that join spans written by different collectors: on a lake the views are computed when
read, over every writer's committed spans, so a Gym rollout received by one collector and the
RL try it belongs to, received by another, are one row, as they are in a file."""

from __future__ import annotations

import signal

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr
from tests.collectors.conftest import start_collector

RUN = "joined"


def spans_of_one_try(prompt_idx: int, attempt: int):
    """The RL try (RL's process) and the Gym rollout it dispatched (Gym's process, a child in
    the same trace, as propagated context makes it), as each process's SDK finishes them."""
    finished = {}
    for service in ("nemo-rl", "gym-agent"):
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create(
            {"service.name": service, Attr.RUN_ID: RUN}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        finished[service] = (provider, memory)
    rl = finished["nemo-rl"][0].get_tracer("rl")
    gym = finished["gym-agent"][0].get_tracer("gym")
    with rl.start_as_current_span("rl.rollout.attempt", attributes={
            Attr.PROMPT_IDX: prompt_idx, Attr.RL_ATTEMPT: attempt,
            Attr.ROLLOUT_ID: f"p{prompt_idx}-r0", Attr.GROUP_ID: "g1"}):
        with gym.start_as_current_span("gym.rollout", attributes={
                Attr.PROMPT_IDX: prompt_idx, Attr.RL_ATTEMPT: attempt,
                Attr.ROLLOUT_ID: f"p{prompt_idx}-r0"}):
            pass
    out = {}
    for service, (provider, memory) in finished.items():
        provider.shutdown()
        out[service] = memory.get_finished_spans()
    return out


def export(http: str, spans) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{http}/v1/traces", timeout=60)
    try:
        # the collector answers once the spans are committed to the lake
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def test_a_gym_span_and_its_rl_try_written_by_two_collectors_are_one_row(tmp_path):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    gym_node = start_collector(lake)
    rl_node = start_collector(lake)
    try:
        spans = spans_of_one_try(prompt_idx=7, attempt=0)
        export(gym_node.http, spans["gym-agent"])
        with RunStore(lake, read_only=True) as store:  # the Gym rollout alone: no try yet
            before = (store.query("SELECT count(*) FROM rollout_attempts")[0][0],
                      store.query("SELECT prompt_idx FROM gym_rollouts"))
        export(rl_node.http, spans["nemo-rl"])
        # read while both collectors run: nothing is derived when a collector commits
        with RunStore(lake, read_only=True) as store:
            assert not store.maintained
            authors = dict(store.query(
                "SELECT t.name, s.author FROM spans t "
                "JOIN ducklake_snapshots('lake') s USING (snapshot_id)"))
            attempts = store.query(
                "SELECT dialect, prompt_idx, attempt, rollout_id, outcome FROM rollout_attempts "
                "WHERE run_id = ?", [RUN])
            gym = store.query(
                "SELECT prompt_idx, rl_attempt, capture_key FROM gym_rollouts WHERE run_id = ?",
                [RUN])
            joined = store.query(
                "SELECT a.dialect, a.group_id, a.outcome, g.capture_key, g.trace_id = a.trace_id "
                "FROM rollout_attempts a JOIN gym_rollouts g ON g.run_id = a.run_id "
                "AND g.prompt_idx = a.prompt_idx AND g.rl_attempt = a.attempt "
                "WHERE a.run_id = ?", [RUN])
    finally:
        for c in (gym_node, rl_node):
            assert c.stop(signal.SIGTERM) == 0, "".join(c.output)
    # each collector wrote its own span
    assert int(authors["gym.rollout"].split(":")[1]) == gym_node.process.pid
    assert int(authors["rl.rollout.attempt"].split(":")[1]) == rl_node.process.pid
    assert before == (0, [(7,)])
    # one try, listed once, as RL's; the Gym rollout carrying RL's prompt is its Gym detail
    assert attempts == [("rl", 7, 0, "p7-r0", "committed")]
    assert gym == [(7, 0, "p7-r0")]
    assert joined == [("rl", "g1", "committed", "p7-r0", True)]
