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


def test_a_short_wall_clock_replay_on_the_engine_still_reproduces_the_incident(
        small_capture, tmp_path, capsys):
    need_engine()
    # at 400x a 1024-token call of even a fast CPU's engine lasts past the 150 s snapshot (the
    # capture's 120 s call must not finish its row before it), so the row is parked when its
    # deadline fires; the run lasts 1.5 s
    captured = small_capture("snapshot-outlasts-deadline", 600.0)
    out, report = tmp_path / "replayed.duckdb", tmp_path / "report.md"
    rc = main(["replay", str(captured), "--out", str(out), "--backend", "transformers",
               "--device", "cpu", "--speed", "400", "--report", str(report)])
    printed = capsys.readouterr().out
    print(printed)
    assert rc == 0
    assert "incident deadline_fired_while_parked (p00000 try 0) reproduced" in printed
    assert "generation backend: transformers on cpu" in printed
    with RunStore(out, read_only=True) as store:
        (run_id,) = store.run_ids()
        generation = compare.generation_summary(store, run_id)
    assert generation["backend"] == "transformers" and generation["device"] == "cpu"
    assert {"torch", "transformers"} <= set(generation["engine"])
    kinds = generation["kinds"]  # the second turn's calls end within the horizon on a fast CPU
    assert "2048->1024 tok" in kinds and set(kinds) <= {"2048->1024 tok", "3200->256 tok"}
    assert all(k["completion_tokens"] == k["asked_completion_tokens"] for k in kinds.values())
    text = report.read_text()
    assert "## Model-call latency: transformers backend vs captured" in text
    assert "| 2048->1024 tok |" in text
