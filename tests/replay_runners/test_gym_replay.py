"""A real Gym 0.7.0 run (the captured fixture, posted to a collector) extracted into a scenario
and replayed: the Gym side's workload, said to be only that, and no RL verdict on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolloutscope.cli import main
from rolloutscope.replay.extract import ExtractionError, extract_scenario
from rolloutscope.store import RunStore
from tests.gym_capture import RUN_ID, collect_capture, expected_spans


@pytest.fixture(scope="module")
def gym_run(tmp_path_factory) -> Path:
    return collect_capture(tmp_path_factory.mktemp("gymreplay") / "gym.duckdb")


def test_the_workload_comes_from_gyms_rollouts_and_model_calls(gym_run):
    with RunStore(gym_run, read_only=True) as store:
        ex = extract_scenario(store)
    report, scenario = ex.report, ex.scenario
    assert report.dialect == "gym" and report.run_id == RUN_ID
    prompts = scenario.prompts()
    assert [p.idx for p in prompts] == [0, 1, 2, 3, 4]  # Gym's task indices
    assert scenario.config.rollout.num_generations_per_prompt == 1
    spans = expected_spans()
    t0 = min(s["start"] for s in spans)
    rollouts = {s["attrs"]["nemo.gym.rollout.id"]: s for s in spans if s["name"] == "gym.rollout"}
    model = [s for s in spans if s["name"] == "gym.model.responses"]
    for p in prompts:
        r = rollouts[f"{p.idx}-0"]
        assert p.arrival_s == pytest.approx((r["start"] - t0) / 1e9, abs=1e-6)
        (row,) = p.rows
        calls = sorted((s for s in model if s["attrs"]["nemo.gym.rollout.id"] == f"{p.idx}-0"),
                       key=lambda s: s["start"])
        assert [t.model_s for t in row.turns] == pytest.approx(
            [(c["end"] - c["start"]) / 1e9 for c in calls], abs=1e-6)
        assert row.setup_s == pytest.approx((calls[0]["start"] - r["start"]) / 1e9, abs=1e-6)
        # the last turn's tool time runs to the rollout's end: the whole /run is accounted for
        total = row.setup_s + sum(t.model_s + t.tool_s for t in row.turns)
        assert total == pytest.approx((r["end"] - r["start"]) / 1e9, abs=1e-5)
        assert all(t.input_tokens == 0 and t.output_tokens == 0 for t in row.turns)
    lines = "\n".join(report.lines())
    assert "Gym side only: the run has no RL-side spans" in lines
    assert "defaulted: workload.turns.tokens: no span carries token counts" in lines
    assert "missing: workload.gym_attempts: 1 later Gym attempt(s) (0-0-a1)" in lines
    assert "inferred: workload.prompts.grouping: by Gym task index (5 task(s) of 1 " \
           "repeat(s))" in lines


def test_replay_of_a_gym_run_replays_it_and_says_what_it_is(gym_run, tmp_path, capsys):
    out, report = tmp_path / "replayed.duckdb", tmp_path / "report.md"
    rc = main(["replay", str(gym_run), "--out", str(out), "--report", str(report),
               "--fail-on-divergence"])
    text = capsys.readouterr().out
    assert rc == 0, text  # no RL outcome is compared, so nothing diverged
    assert "Gym side only" in text and "DIVERGED" not in text
    assert "Gym side only" in report.read_text()
    with RunStore(out, read_only=True) as store:
        att = store.query_df("SELECT * FROM rollout_attempts ORDER BY start_ns")
    assert len(att) == 5 and set(att.outcome) == {"committed"}
    with RunStore(gym_run, read_only=True) as store:
        g = store.query_df("SELECT * FROM gym_rollouts WHERE gym_attempt = 0 "
                           "ORDER BY start_ns")
    # the replayed tries take the captured rollouts' time
    assert list(att.duration_s) == pytest.approx(list(g.duration_s), abs=1e-5)


def test_a_run_with_neither_rl_nor_gym_rollouts_is_refused_by_name(tmp_path):
    from rolloutscope.collectors.exporter import instrument

    inst = instrument(tmp_path / "plain.duckdb", service_name="web")
    try:
        inst.tracer().start_span("GET /").end()
        assert inst.flush()
        with pytest.raises(ExtractionError, match="neither rl.rollout.prompt nor gym.rollout"):
            extract_scenario(inst.store)
    finally:
        inst.shutdown()
