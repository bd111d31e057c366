"""The in-process transformers engine: forced lengths in one batch, and a short wall-clock replay
of snapshot-outlasts-deadline served by it in which the incident still reproduces."""

from __future__ import annotations

import queue

from rolloutscope.cli import main
from rolloutscope.store import RunStore
from rolloutscope.replay import compare
from rolloutscope.replay.backends import GenerationRequest, GenerationResult
from tests.backends.conftest import need_engine


def test_each_sequence_of_a_batch_stops_at_its_own_forced_length():
    need_engine()
    from rolloutscope.replay.backends.transformers_engine import TransformersBackend

    backend = TransformersBackend(device="cpu", max_batch=8)
    info = backend.start()
    answers: queue.Queue[GenerationResult] = queue.Queue()
    firsts: queue.Queue[float] = queue.Queue()
    try:
        for i, (prompt, out) in enumerate([(40, 3), (12, 17), (25, 9)]):
            backend.submit(GenerationRequest(call_id=f"c{i}", shard=None, input_tokens=prompt,
                                             output_tokens=out, stream=i == 1, captured_s=1.0),
                           firsts.put, answers.put)
        got = sorted((answers.get(timeout=60) for _ in range(3)),
                     key=lambda r: r.request.call_id)
    finally:
        backend.close()
    assert info.device == "cpu" and "torch" in info.engine and "transformers" in info.engine
    assert [(r.prompt_tokens, r.completion_tokens, r.ok) for r in got] == [
        (40, 3, True), (12, 17, True), (25, 9, True)]
    assert firsts.qsize() == 1  # only the streaming call reports its first token


def test_a_shard_the_replay_killed_answers_unreachable():
    need_engine()
    from rolloutscope.replay.backends import EngineUnreachable
    from rolloutscope.replay.backends.transformers_engine import TransformersBackend

    backend = TransformersBackend(device="cpu")
    backend.start()
    answers: queue.Queue[GenerationResult] = queue.Queue()
    try:
        backend.set_reachable(1, False)
        backend.submit(GenerationRequest(call_id="c", shard=1, input_tokens=8, output_tokens=4,
                                         stream=False, captured_s=1.0), print, answers.put)
        result = answers.get(timeout=60)
    finally:
        backend.close()
    assert isinstance(result.error, EngineUnreachable)


def _replay(captured, tmp_path, capsys, speed: str) -> tuple[str, dict, str]:
    """``rolloutscope replay`` on the transformers engine at ``speed``: (what it printed, the
    run's generation summary, the report)."""
    out, report = tmp_path / f"replayed-{speed}.duckdb", tmp_path / f"report-{speed}.md"
    rc = main(["replay", str(captured), "--out", str(out), "--backend", "transformers",
               "--device", "cpu", "--speed", speed, "--report", str(report)])
    printed = capsys.readouterr().out
    print(printed)
    assert rc == 0
    with RunStore(out, read_only=True) as store:
        (run_id,) = store.run_ids()
        generation = compare.generation_summary(store, run_id)
    return printed, generation, report.read_text()


def test_a_short_wall_clock_replay_on_the_engine_still_reproduces_the_incident(
        small_capture, tmp_path, capsys):
    need_engine()
    # The incident needs the row's 1024-token call still running at the 150 s snapshot. At
    # 4000x that is 37.5 ms of wall time: no CPU decodes 1024 tokens in it (27,000 tokens/s),
    # so the row is parked when its deadline fires on a fast machine and a busy one alike
    captured = small_capture("snapshot-outlasts-deadline", 600.0)
    printed, generation, text = _replay(captured, tmp_path, capsys, "4000")
    assert "incident deadline_fired_while_parked (p00000 try 0) reproduced" in printed
    assert "generation backend: transformers on cpu" in printed
    assert generation["backend"] == "transformers" and generation["device"] == "cpu"
    assert {"torch", "transformers"} <= set(generation["engine"])
    # the virtual clock handed the engine the calls it issued, however many it finished
    assert generation["submitted"] >= 1
    assert f"{generation['submitted']} call(s) at 4000x wall-clock time" in printed
    assert "## Model-call latency: transformers backend vs captured" in text


def test_every_call_the_engine_finishes_in_a_wall_clock_replay_is_recorded_at_its_length(
        small_capture, tmp_path, capsys):
    """What the engine did, whatever this machine's speed: each call it finished within the
    horizon returned exactly the captured output length and is in the report's latency table;
    the calls it did not finish are counted as submitted, never as served."""
    need_engine()
    captured = small_capture("snapshot-outlasts-deadline", 600.0)
    printed, generation, text = _replay(captured, tmp_path, capsys, "400")
    kinds = generation["kinds"]
    assert set(kinds) <= {"2048->1024 tok", "3200->256 tok"}
    finished = sum(k["calls"] for k in kinds.values())
    failed = sum(sum(k["errors"].values()) for k in kinds.values())
    assert generation["submitted"] >= finished + failed
    assert generation["completion_tokens"] == sum(k["completion_tokens"] for k in kinds.values())
    for name, k in kinds.items():
        assert k["completion_tokens"] == k["asked_completion_tokens"], name
        assert k["short_completions"] == 0, name
        assert f"| {name} | {k['calls']} |" in text
    if not kinds:
        latency = text.split("## Model-call latency: transformers backend vs captured", 1)[1]
        assert latency.lstrip().startswith("(none)")
    assert f"{generation['completion_tokens']} token(s) generated" in printed
