"""The views over released Gym's vocabulary, on runs built through the real SDK and exporter:
the join rule between Gym's rollout ids and RL's tries, the draft checkpoint telemetry as
NVIDIA-NeMo/Gym's nemo_gym/_checkpoint/telemetry.py writes it, and the store's run rule."""

from __future__ import annotations

import pandas as pd
import pytest
from opentelemetry.trace import SpanKind

from rolloutscope.cli import main
from rolloutscope.collectors.exporter import instrument
from rolloutscope.store import RowBatch, RunStore
from rolloutscope.vocabulary import Attr, SpanName

from .conftest import S, T0, SpanKit

GYM = {Attr.GYM_SERVER_NAME: "simple_agent"}


def ns(seconds: float) -> int:
    return T0 + int(seconds * S)


class TestTheJoinRule:
    def test_gym_rollouts_stamped_with_rls_prompt_are_rows_of_its_tries(self, kit):
        kit.span(SpanName.RL_ATTEMPT, 0, 10, {Attr.ROLLOUT_ID: "p7", Attr.PROMPT_IDX: 7,
                                             Attr.RL_ATTEMPT: 0})
        for row in range(2):  # the try's two rows, as an RL-aware deployment stamps them
            kit.span(SpanName.GYM_ROLLOUT, 1, 9, {**GYM, Attr.ROLLOUT_ID: f"p7-{row}",
                                                  Attr.PROMPT_IDX: 7, Attr.RL_ATTEMPT: 0})
        # a released Gym's rollout in the same run carries neither key: it stands alone
        kit.span(SpanName.GYM_ROLLOUT, 2, 4, {**GYM, Attr.ROLLOUT_ID: "3-1-a2"})
        store = kit.flush()
        att = store.query_df("SELECT * FROM rollout_attempts ORDER BY dialect")
        assert att[["dialect", "rollout_id", "attempt", "capture_key", "prompt_idx"]].astype(
            object).where(att.notna(), None).values.tolist() == [
            ["gym", "3-1", 2, "3-1-a2", None], ["rl", "p7", 0, None, 7]]
        g = store.query_df("SELECT * FROM gym_rollouts ORDER BY capture_key")
        assert list(g.capture_key) == ["3-1-a2", "p7-0", "p7-1"]
        assert list(g.prompt_idx.fillna(-1)) == [-1, 7, 7]
        assert list(g.rl_attempt.fillna(-1)) == [-1, 0, 0]
        (lone,) = g[g.capture_key == "3-1-a2"].itertuples()
        assert (lone.rollout_id, lone.gym_attempt, lone.task_index, lone.repeat_index) == (
            "3-1", 2, 3, 1)

    def test_a_rollout_without_gyms_id_is_named_after_its_trace(self, kit):
        span = kit.span(SpanName.GYM_ROLLOUT, 0, 1, GYM)
        store = kit.flush()
        (row,) = store.query_df("SELECT * FROM rollout_attempts").itertuples()
        trace = format(span.get_span_context().trace_id, "032x")
        assert row.rollout_id == f"trace-{trace[:12]}" and row.capture_key is None
        assert (row.attempt, row.outcome) == (0, "finished")

    def test_a_failed_run_reply_fails_the_rollout_and_classifies_it(self, kit):
        run = kit.tracer.start_span("POST /run", kind=SpanKind.SERVER, start_time=ns(0),
                                    attributes={"http.status_code": 503})
        run.end(end_time=ns(3))
        kit.span(SpanName.GYM_ROLLOUT, 0.1, 2.9, {**GYM, Attr.ROLLOUT_ID: "0-0"}, parent=run)
        store = kit.flush()
        (row,) = store.query_df("SELECT * FROM rollout_attempts").itertuples()
        assert (row.outcome, row.failure_class, row.failure_http_status, row.failure_reason) \
            == ("failed", "infra", 503, "HTTP 503")


class TestTheDraftCheckpointTelemetry:
    """Spans shaped as the draft makes them: operations with id, kind and instance; steps with
    nothing of their own; no outcome attribute; a raise is an ERROR status; a prepare that was
    not ready returns phase 'preparing'."""

    def build(self, kit: SpanKit) -> None:
        def op(name, start, end, kind, instance, ck, error=None, parent=None, **extra):
            attrs = {Attr.CHECKPOINT_ID: ck, Attr.CK_PARTICIPANT_KIND: kind,
                     Attr.CK_INSTANCE: instance,
                     **{f"nemo.gym.checkpoint.{k}": v for k, v in extra.items()}}
            return kit.span(name, start, end, attrs, parent=parent, error=error)

        coord = op(SpanName.CK_COORDINATE_PREPARE, 10, 20, "controller", "coordination", "c1",
                   participants=2, prepared=True)
        for kind, inst in (("model", "policy_model"), ("resources", "tools")):
            stage = kit.span(f"gym.checkpoint.coordinate.prepare.{kind}", 10, 15,
                             {"nemo.gym.checkpoint.participants": 1}, parent=coord)
            prepare = op(SpanName.CK_PREPARE, 10.5, 14, kind, inst, "c1", parent=stage,
                         phase="prepared", blockers=0)
            kit.span(SpanName.CK_WAIT_READY, 11, 13.5, {}, parent=prepare)
        commit = op(SpanName.CK_COMMIT, 21, 25, "model", "policy_model", "c1", records=3)
        kit.span(SpanName.CK_EXPORT, 21, 22, {}, parent=commit)
        kit.span(SpanName.CK_WRITE, 22, 24.5, {"nemo.gym.checkpoint.bytes": 4096}, parent=commit)
        op(SpanName.CK_COORDINATE_COMMIT, 21, 26, "controller", "coordination", "c1")
        op(SpanName.CK_RESUME, 27, 28, "model", "policy_model", "c1")
        op(SpanName.CK_COORDINATE_RESUME, 27, 29, "controller", "coordination", "c1")
        # c2: the model is not ready by the deadline, the coordinator stops there; then a
        # restore that raises
        op(SpanName.CK_COORDINATE_PREPARE, 40, 70, "controller", "coordination", "c2",
           prepared=False, stopped_at="model")
        op(SpanName.CK_PREPARE, 40, 70, "model", "policy_model", "c2", phase="preparing",
           blockers=2)
        op(SpanName.CK_RESTORE, 80, 81, "model", "policy_model", "c3",
           error="not valid in phase preparing")

    def test_operations_take_their_outcome_from_status_and_phase(self, kit):
        self.build(kit)
        store = kit.flush()
        ops = store.query_df("SELECT * FROM checkpoint_ops ORDER BY start_ns, op")
        got = {(r.checkpoint_id, r.participant_kind, r.op): r for r in ops.itertuples()}
        assert got[("c1", "model", "prepare")].outcome == "ok"
        assert got[("c1", "model", "prepare")].phase == "prepared"
        assert got[("c1", "controller", "prepare")].outcome == "ok"
        assert got[("c1", "controller", "prepare")].participants == 2
        assert got[("c1", "model", "commit")].records == 3
        assert got[("c2", "model", "prepare")].outcome == "error"  # left in 'preparing'
        assert got[("c2", "model", "prepare")].blockers == 2
        assert got[("c2", "controller", "prepare")].outcome == "error"  # prepared = false
        assert got[("c2", "controller", "prepare")].stopped_at == "model"
        assert got[("c3", "model", "restore")].outcome == "error"  # raised
        assert len(ops) == 10  # stage spans are steps, not operations

    def test_steps_inherit_their_operations_identity(self, kit):
        self.build(kit)
        store = kit.flush()
        steps = store.query_df("SELECT * FROM checkpoint_steps ORDER BY start_ns, step")
        rows = [(r.checkpoint_id, r.participant_kind, r.instance, r.op, r.step)
                for r in steps.itertuples()]
        assert rows == [
            ("c1", "controller", "coordination", "prepare", "prepare.model"),
            ("c1", "controller", "coordination", "prepare", "prepare.resources"),
            ("c1", "model", "policy_model", "prepare", "wait_ready"),
            ("c1", "resources", "tools", "prepare", "wait_ready"),
            ("c1", "model", "policy_model", "commit", "export"),
            ("c1", "model", "policy_model", "commit", "write")]
        assert steps.bytes.dropna().tolist() == [4096]

    def test_windows_run_from_the_first_prepare_to_the_last_resume(self, kit):
        self.build(kit)
        store = kit.flush()
        w = store.query_df("SELECT * FROM checkpoint_windows ORDER BY start_ns")
        rows = [(r.checkpoint_id, (r.start_ns - T0) / S,
                 None if pd.isna(r.end_ns) else (r.end_ns - T0) / S, r.outcome)
                for r in w.itertuples()]
        # c1 committed and resumed; c2 never resumed (admission still closed); c3's restore
        # closed admission and failed
        assert rows == [("c1", 10.0, 29.0, "committed"), ("c2", 40.0, None, "open"),
                        ("c3", 80.0, None, "open")]

    def test_a_prepare_left_preparing_is_a_prepare_blocked_incident(self, kit):
        kit.inst.store.register_run("run-1", config={})
        self.build(kit)
        store = kit.flush()
        inc = store.query_df("SELECT * FROM incidents WHERE kind = 'prepare_blocked'")
        assert list(inc.subject) == ["c2 model"]
        assert inc.summary.iloc[0] == ("Snapshot c2: the model prepare ran 30.0 s and was not "
                                       "ready: 2 blocker(s); the coordinator stopped at stage "
                                       "model.")


class TestTheRunRule:
    def test_spans_metrics_and_logs_without_a_run_belong_to_the_stores_default_run(self,
                                                                                  tmp_path):
        path = tmp_path / "nameless.duckdb"
        inst = instrument(path, service_name="anything")
        try:
            kit = SpanKit(inst)
            kit.span("GET /", 0, 1, {}, )
            kit.flush()
            batch = RowBatch()
            batch.add_row("metrics", service="anything", name="m", kind="gauge",
                          ts_ns=ns(0.5), value=1.0)
            batch.add_row("logs", service="anything", ts_ns=ns(0.5), body="hello")
            inst.store.writer().write(batch)
            store = inst.store
            assert store.default_run_id == "nameless"
            assert store.run_ids() == ["nameless"]
            assert store.query("SELECT DISTINCT run_id FROM spans UNION ALL "
                               "SELECT DISTINCT run_id FROM metrics UNION ALL "
                               "SELECT DISTINCT run_id FROM logs") == [("nameless",)] * 3
            assert store.query("SELECT source, first_seen_ns FROM runs") == [("live", ns(0))]
        finally:
            inst.shutdown()

    def test_a_run_directory_names_its_run_and_a_renamed_file_keeps_it(self, tmp_path):
        run_dir = tmp_path / "exp 42"
        RunStore(run_dir).close()  # run.duckdb in a run directory: the folder's name
        moved = tmp_path / "elsewhere.duckdb"
        (run_dir / "run.duckdb").rename(moved)
        with RunStore(moved) as store:
            assert store.default_run_id == "exp-42"

    def test_a_span_names_its_own_run_before_its_resource(self, tmp_path):
        inst = instrument(tmp_path / "two.duckdb", service_name="replay", run_id="resource-run")
        try:
            kit = SpanKit(inst)
            kit.span("a", 0, 1, {Attr.RUN_ID: "span-run"})
            kit.span("b", 0, 1, {})
            store = kit.flush()
            assert store.query("SELECT name, run_id FROM spans ORDER BY name") == [
                ("a", "span-run"), ("b", "resource-run")]
        finally:
            inst.shutdown()

    def test_info_says_how_each_run_was_named(self, tmp_path, capsys):
        path = tmp_path / "mixed.duckdb"
        inst = instrument(path, service_name="anything")
        try:
            kit = SpanKit(inst)
            kit.span("nameless", 0, 1, {})
            kit.span("named", 0, 1, {Attr.RUN_ID: "r1"})
            kit.flush()
        finally:
            inst.shutdown()
        assert main(["info", str(path)]) == 0
        out = capsys.readouterr().out
        assert ("run mixed  source=live\n  run id: 1 span(s) carried no nemo.run.id and belong "
                "to the store's default run, named after its file") in out
        assert "run r1  source=live\n  run id: nemo.run.id on 1 span(s) themselves" in out


@pytest.mark.parametrize("kind", [SpanKind.CLIENT])
def test_an_http_client_span_in_any_convention_is_an_outbound_request(kit, kind):
    tracer = kit.tracer
    for attrs in ({"url.full": "http://10.0.0.5:8000/v1/chat/completions",
                   "http.request.method": "POST", "http.response.status_code": 200},
                  {"http.url": "http://10.0.0.5:8000/health?x=1", "http.method": "GET",
                   "http.status_code": 200}):
        span = tracer.start_span("HTTP", kind=kind, attributes=attrs, start_time=ns(0))
        span.end(end_time=ns(1))
    store = kit.flush()
    h = store.query_df("SELECT * FROM http_requests ORDER BY path")
    assert list(h.target) == ["http://10.0.0.5:8000"] * 2
    assert list(h.path) == ["/health", "/v1/chat/completions"]
    assert list(h.probe) == [True, False] and list(h.model_endpoint) == [False, True]
    assert list(h.internal) == [False, False] and list(h.method) == ["GET", "POST"]
    calls = store.query_df("SELECT * FROM model_calls")
    assert list(calls.source) == ["http"] and list(calls.backend) == ["http://10.0.0.5:8000"]
