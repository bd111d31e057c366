"""The single controller's step (NVIDIA-NeMo/RL #4052, open: no released capture yet) in the shape
its span-group docs give, built with the official opentelemetry-proto messages and posted over
OTLP/HTTP to a running collector: ``rl.sc.step`` takes its algorithm from the resource's
``rl.algorithm`` and its weight version from its own ``rl.weight_version``, and its phases in
#4052's spelling (``policy_and_reference_logprobs``, ``advantage_calculation``,
``policy_training``, ``checkpointing``) land in the same columns as #3655's."""

from __future__ import annotations

import os
import urllib.request

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rolloutscope.collectors.otlp.encode import fill_attributes
from rolloutscope.store import RunStore

from .conftest import start_collector

T0 = 1_800_000_000 * 10**9
S = 10**9
RUN_ID = "sc-run"
# (name, start s, end s, attributes) of each child of the step
CHILDREN = [
    ("rl.idle.buffer_starvation", 0.0, 2.0,
     {"rl.efficiency.category": "idle/buffer_starvation", "rl.bucket": "idle"}),
    ("rl.sc.logprob_inference_prep", 2.0, 2.5, {"rl.bucket": "overhead"}),
    ("rl.sc.policy_and_reference_logprobs", 2.5, 4.0, {"rl.bucket": "overhead"}),
    ("rl.sc.advantage_calculation", 4.0, 4.25, {"rl.bucket": "overhead"}),
    ("rl.sc.training_prep", 4.25, 4.5, {"rl.bucket": "overhead"}),
    ("rl.sc.policy_training", 4.5, 8.0, {"rl.bucket": "productive"}),
    ("rl.idle.refit_bubble", 8.0, 9.0,
     {"rl.efficiency.category": "idle/refit_bubble", "rl.bucket": "idle"}),
    ("rl.sc.checkpointing", 9.0, 9.5, {"rl.bucket": "overhead"}),
]


def sc_request() -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    fill_attributes(rs.resource.attributes, {"service.name": "nemo-rl", "nemo.run.id": RUN_ID,
                                             "rl.algorithm": "grpo"})
    ss = rs.scope_spans.add()
    trace_id, step_id = os.urandom(16), os.urandom(8)

    def span(name, start_s, end_s, attrs, parent=b""):
        s = ss.spans.add(trace_id=trace_id, span_id=os.urandom(8), parent_span_id=parent,
                         name=name, kind=1, start_time_unix_nano=T0 + int(start_s * S),
                         end_time_unix_nano=T0 + int(end_s * S))
        fill_attributes(s.attributes, attrs)
        return s

    step = span("rl.sc.step", 0.0, 10.0, {"rl.iteration": 7, "rl.weight_version": 6})
    step.span_id = step_id
    for name, a, b, attrs in CHILDREN:
        span(name, a, b, attrs, step_id)
    # the rollout pump's dispatches run beside the step, no child of it: the second a retry
    span("rl.sc.generate_and_push", -5.0, 1.0, {"rl.rollout.attempt": 0})
    span("rl.sc.generate_and_push", 1.0, 1.5, {"rl.rollout.attempt": 1})
    failed = span("rl.sc.generate_and_push", 1.1, 1.3, {"rl.rollout.attempt": 1})
    failed.status.code = 2  # STATUS_CODE_ERROR
    failed.status.message = "group skipped"
    # another run, whose controller also runs rolloutscope's RL adapter: its tries say more
    rs2 = request.resource_spans.add()
    fill_attributes(rs2.resource.attributes, {"service.name": "nemo-rl",
                                              "nemo.run.id": RUN_ID + "-adapted"})
    ss2 = rs2.scope_spans.add()
    for name, attrs in (("rl.sc.generate_and_push", {"rl.rollout.attempt": 0}),
                        ("rl.rollout.attempt", {"nemo.gym.rollout.id": "p00000",
                                                "nemo.rl.prompt.idx": 0,
                                                "nemo.rl.rollout.attempt": 0})):
        s = ss2.spans.add(trace_id=trace_id, span_id=os.urandom(8), name=name, kind=1,
                          start_time_unix_nano=T0, end_time_unix_nano=T0 + S)
        fill_attributes(s.attributes, attrs)
    return request


@pytest.fixture(scope="module")
def sc_store(tmp_path_factory):
    db = tmp_path_factory.mktemp("sc") / "sc.duckdb"
    collector = start_collector(db)
    try:
        req = urllib.request.Request(f"{collector.http}/v1/traces",
                                     data=sc_request().SerializeToString(),
                                     headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
    finally:
        assert collector.stop() == 0, "".join(collector.output)
    return db


def seconds(*names: str) -> float:
    return sum(b - a for name, a, b, _ in CHILDREN if name in names)


def test_the_single_controllers_step_reads_like_any_algorithms(sc_store):
    with RunStore(sc_store, read_only=True) as store:
        (row,) = store.query_df("SELECT * FROM train_steps WHERE run_id = ?",
                                [RUN_ID]).itertuples()
        (ledger,) = store.query_df("SELECT * FROM step_ledger WHERE run_id = ?",
                                   [RUN_ID]).itertuples()
    assert (row.dialect, row.algorithm, row.step, row.weight_version) == \
        ("rl_telemetry", "grpo", 7, 6)
    assert row.duration_s == pytest.approx(10.0)
    assert row.logprobs_s == pytest.approx(seconds("rl.sc.logprob_inference_prep",
                                                   "rl.sc.policy_and_reference_logprobs"))
    assert row.advantages_s == pytest.approx(seconds("rl.sc.advantage_calculation"))
    assert row.data_processing_s == pytest.approx(seconds("rl.sc.training_prep"))
    assert row.policy_update_s == pytest.approx(seconds("rl.sc.policy_training"))
    assert row.checkpoint_s == pytest.approx(seconds("rl.sc.checkpointing"))
    assert row.refit_s == pytest.approx(seconds("rl.idle.refit_bubble"))
    assert row.idle_s == pytest.approx(seconds("rl.idle.buffer_starvation",
                                               "rl.idle.refit_bubble"))
    assert row.ready_ns == T0 + 2 * S  # the end of its starvation wait
    # the dispatches kept generation busy for the step's first 1.5 s: the rest was a bubble
    assert ledger.generation_bubble_s == pytest.approx(10.0 - 1.5)
    # the children end at 9.5 s, the step at 10 s: the half second no span accounts for
    assert ledger.other_s == pytest.approx(10.0 - CHILDREN[-1][2])
    assert ledger.generating_s == pytest.approx(seconds("rl.idle.buffer_starvation"))


def test_the_single_controllers_dispatches_are_tries(sc_store):
    """rl.sc.generate_and_push is a try of dialect rl_telemetry, where the run has no try of
    rolloutscope's own RL adapter."""
    with RunStore(sc_store, read_only=True) as store:
        rows = store.query_df(
            "SELECT run_id, dialect, attempt, outcome, failure_reason, duration_s, rollout_id "
            "FROM rollout_attempts ORDER BY run_id, start_ns").itertuples(index=False)
        rows = [tuple(r) for r in rows]
    sc = [r for r in rows if r[0] == RUN_ID]
    assert [(r[1], r[2], r[3], r[4]) for r in sc] == [
        ("rl_telemetry", 0, "committed", None), ("rl_telemetry", 1, "committed", None),
        ("rl_telemetry", 1, "failed", "group skipped")]
    assert [round(r[5], 6) for r in sc] == [6.0, 0.5, 0.2]
    assert all(r[6] is None for r in sc)
    adapted = [r for r in rows if r[0] == RUN_ID + "-adapted"]
    assert [(r[1], r[6]) for r in adapted] == [("rl", "p00000")]
