"""The openai backend against a real OpenAI-compatible server and engine on loopback
(``transformers serve`` with the tiny random model): a short wall-clock replay of
snapshot-outlasts-deadline served by it still reproduces the incident."""

from __future__ import annotations

from rolloutscope.store import RunStore
from rolloutscope.replay import compare
from rolloutscope.replay.backends.openai import OpenAIBackend
from rolloutscope.replay.replay_capture import ReplayOptions, capture_from_store, replay_run


def test_a_replay_served_by_a_real_openai_compatible_server_reproduces_the_incident(
        openai_server, small_capture, tmp_path):
    capture = capture_from_store(small_capture("snapshot-outlasts-deadline", 600.0))
    # 400x: the server's 1024-token call outlasts the 150 s snapshot, as the captured one did
    result = replay_run(capture, out=tmp_path / "replayed.duckdb", fail_on_divergence=False,
                        options=ReplayOptions(backend=lambda: OpenAIBackend([openai_server]),
                                              speed=400.0))
    print("\n".join(result.lines()))
    assert result.error is None
    assert ("deadline_fired_while_parked", "p00000 try 0") in result.reproduced
    gen = result.generation
    assert gen["backend"] == "openai" and gen["endpoints"] == [openai_server]
    # transformers serve refuses ignore_eos/min_tokens: the backend found out and left them out
    assert gen["engine"][f"forced_length@{openai_server}"].startswith("no")
    assert gen["submitted"] >= 1
    with RunStore(tmp_path / "replayed.duckdb", read_only=True) as store:
        assert compare.generation_summary(store, result.run_id)["backend"] == "openai"
