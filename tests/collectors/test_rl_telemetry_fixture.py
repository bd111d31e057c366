"""What NeMo-RL's own telemetry sent (RL #3655: four async GRPO steps, buffer starvation at step
2, a refit bubble every step, checkpoints at steps 2 and 4), posted over OTLP/HTTP to a running
collector: ``train_steps``, ``step_ledger`` and ``rolloutscope steps`` on it, against what the
official protobuf messages of the capture say."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rolloutscope.cli import main
from rolloutscope.store import RunStore
from tests.rl_telemetry_capture import RUN_ID, collect_rl_capture, decoded_spans

SPANS = decoded_spans()


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory) -> Iterator[Path]:
    yield collect_rl_capture(tmp_path_factory.mktemp("rl") / "rl.duckdb")


@pytest.fixture
def store(rl_run) -> Iterator[RunStore]:
    with RunStore(rl_run, read_only=True) as s:
        yield s


def seconds(span: dict) -> float:
    return (span["end"] - span["start"]) / 1e9


def expected_steps() -> dict[int, dict]:
    """Each step as the capture's bytes say: its children by their parent id, summed by name
    and by rl.bucket; the batches the collector sent, by the weight version they target."""
    steps = {s["span_id"]: s for s in SPANS if s["name"] == "rl.grpo.step"}
    out = {}
    for sid, step in steps.items():
        kids = [s for s in SPANS if s["parent"] == sid]
        by_name: dict[str, float] = defaultdict(float)
        by_bucket: dict[str, float] = defaultdict(float)
        for k in kids:
            by_name[k["name"]] += seconds(k)
            if "rl.bucket" in k["attrs"]:
                by_bucket[k["attrs"]["rl.bucket"]] += seconds(k)
        starving = [k for k in kids if k["name"] == "rl.idle.buffer_starvation"]
        iteration = step["attrs"]["rl.iteration"]
        batches = [s for s in SPANS if s["name"] == "rl.grpo.collect_rollouts"
                   and s["attrs"]["rl.target_weight_version"] == iteration - 1]
        out[iteration] = {
            "start_ns": step["start"], "end_ns": step["end"], "span_id": sid,
            "ready_ns": max((k["end"] for k in starving), default=step["start"]),
            "names": dict(by_name), "buckets": dict(by_bucket), "starvation_waits": len(starving),
            "batches": batches}
    return out


EXPECTED = expected_steps()


class TestTrainStepsFromRLTelemetry:
    def test_the_capture_is_four_grpo_steps_with_the_shape_its_readme_says(self):
        assert sorted(EXPECTED) == [1, 2, 3, 4]
        assert [EXPECTED[i]["starvation_waits"] for i in (1, 2, 3, 4)] == [0, 3, 0, 0]
        assert [("rl.grpo.save_checkpoint" in EXPECTED[i]["names"]) for i in (1, 2, 3, 4)] == \
            [False, True, False, True]
        assert len(SPANS) == 44

    def test_one_row_per_step_with_its_times_algorithm_and_dialect(self, store):
        rows = store.query_df("SELECT * FROM train_steps WHERE run_id = ? ORDER BY step",
                              [RUN_ID])
        assert list(rows.step) == [1, 2, 3, 4]
        assert set(rows.dialect) == {"rl_telemetry"} and set(rows.algorithm) == {"grpo"}
        assert rows.epoch.isna().all()  # the capture's steps carry no rl.epoch
        for r in rows.itertuples():
            e = EXPECTED[r.step]
            assert (r.start_ns, r.end_ns, r.span_id) == (e["start_ns"], e["end_ns"], e["span_id"])
            assert (r.wait_start_ns, r.ready_ns) == (e["start_ns"], e["ready_ns"])

    @pytest.mark.parametrize("column, names", [
        ("rewards_s", ["rl.grpo.compute_rewards"]),
        ("logprobs_s", ["rl.grpo.compute_logprobs"]),
        ("advantages_s", ["rl.grpo.compute_advantages"]),
        ("data_processing_s", ["rl.grpo.data_processing"]),
        ("policy_update_s", ["rl.grpo.policy_update"]),
        ("refit_s", ["rl.idle.refit_bubble"]),
        ("checkpoint_s", ["rl.grpo.save_checkpoint"]),
        ("buffer_starvation_s", ["rl.idle.buffer_starvation"]),
    ])
    def test_each_phase_is_the_seconds_of_the_steps_children_of_that_name(self, store, column,
                                                                          names):
        rows = store.query_df(f"SELECT step, {column} AS v FROM train_steps WHERE run_id = ?",
                              [RUN_ID])
        for r in rows.itertuples():
            want = sum(EXPECTED[r.step]["names"].get(n, 0.0) for n in names)
            if want:
                assert r.v == pytest.approx(want, abs=1e-9), (r.step, column)
            else:
                assert pd.isna(r.v), (r.step, column)  # NULL: the step sent no such span

    def test_goodput_buckets_are_rl_bucket_seconds_and_step_2_idles_for_its_starvation(self,
                                                                                    store):
        rows = store.query_df("SELECT * FROM train_steps WHERE run_id = ? ORDER BY step",
                              [RUN_ID])
        for r in rows.itertuples():
            b = EXPECTED[r.step]["buckets"]
            for bucket in ("productive", "overhead", "idle"):
                assert getattr(r, f"{bucket}_s") == pytest.approx(b[bucket], abs=1e-9)
            assert pd.isna(r.wasted_s)  # NULL: nothing wasted was sent
            assert r.starvation_waits == EXPECTED[r.step]["starvation_waits"]
        idle = rows.set_index("step").idle_s
        assert idle[2] > 1.5 > idle[1]  # three 0.5 s polls on top of the refit bubble

    def test_the_collectors_batches_feed_the_step_whose_weights_they_target(self, store):
        rows = store.query_df("SELECT * FROM train_steps WHERE run_id = ? ORDER BY step",
                              [RUN_ID]).set_index("step")
        for step, e in EXPECTED.items():
            r = rows.loc[step]
            assert r.weight_version == step - 1
            assert r.batches == len(e["batches"])
            if not e["batches"]:  # step 1 trained on what was generated before the capture
                assert pd.isna(r.policy_lag) and pd.isna(r.prompt_groups)
                continue
            oldest = min(b["attrs"]["rl.weight_version"] for b in e["batches"])
            assert r.batch_weight_version == oldest
            assert r.policy_lag == step - 1 - oldest
            assert r.prompt_groups == sum(b["attrs"]["rl.num_prompt_groups"]
                                          for b in e["batches"])
        assert list(rows.policy_lag.iloc[1:]) == [1, 1, 1]


class TestTheLedgerOfRLTelemetry:
    def test_the_wall_time_splits_into_parts_that_add_up_to_each_step(self, store):
        rows = store.query_df("SELECT * FROM step_ledger WHERE run_id = ? ORDER BY step",
                              [RUN_ID])
        for r in rows.itertuples():
            e = EXPECTED[r.step]["names"]
            parts = (r.generating_s + r.refit_s + r.train_s + r.checkpoint_s + r.other_s)
            assert parts == pytest.approx(r.duration_s, abs=1e-9)
            assert r.generating_s == pytest.approx(e.get("rl.idle.buffer_starvation", 0.0))
            assert r.train_s == pytest.approx(sum(e.get(f"rl.grpo.{n}", 0.0) for n in (
                "compute_rewards", "compute_logprobs", "compute_advantages", "data_processing",
                "policy_update")))
            assert 0 <= r.other_s < 0.05  # the gaps between the children
            assert pd.isna(r.straggler_s)  # no per-group spans in this capture

    def test_the_generation_bubble_is_the_step_time_no_batch_was_collecting(self, store):
        batches = [(s["start"], s["end"]) for s in SPANS
                   if s["name"] == "rl.grpo.collect_rollouts"]
        rows = store.query_df("SELECT * FROM step_ledger WHERE run_id = ?", [RUN_ID])
        for r in rows.itertuples():
            # the batches never overlap each other in this capture: add their parts in the step
            busy = sum(max(0, min(b, r.end_ns) - max(a, r.start_ns)) for a, b in batches) / 1e9
            assert r.generation_bubble_s == pytest.approx(r.duration_s - busy, abs=1e-9)

    def test_the_command_prints_the_ledger_and_its_json(self, rl_run, capsys):
        assert main(["steps", str(rl_run)]) == 0
        out = capsys.readouterr().out
        assert f"run {RUN_ID}: 4 train steps (rl_telemetry)" in out and "productive" in out
        assert main(["steps", str(rl_run), "--run-id", RUN_ID, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [s["step"] for s in doc["steps"]] == [1, 2, 3, 4]
        assert doc["steps"][1]["starvation_waits"] == 3
        assert all(s["straggler_groups"] == [] for s in doc["steps"]) and doc["pending"] == []
        assert main(["steps", str(rl_run), "--run-id", "nope"]) == 2
        assert "no run 'nope'" in capsys.readouterr().err
