"""The openai backend's failures take the live path into the failure taxonomy: an engine that
answers 5xx fails the row like a live one, and a server that is not there stops the replay
before it starts."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest
from aiohttp import web

from rolloutscope.store import RunStore
from rolloutscope.replay.backends import BackendError
from rolloutscope.replay.backends.openai import OpenAIBackend
from rolloutscope.replay.run_scenario import replay_into_store, wall_clock_driver
from rolloutscope.replay.scenarios import get


class FailingEngine:
    """An HTTP server on loopback that lists a model and answers every generation 503 (its
    forced-length probe, one token, succeeds)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.generations = 0

    async def _models(self, _req: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "policy"}]})

    async def _completions(self, req: web.Request) -> web.Response:
        body = await req.json()
        if body.get("max_tokens") == 1:
            return web.json_response({"choices": [{"text": "x"}],
                                      "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        self.generations += 1
        return web.json_response({"error": "engine overloaded"}, status=503)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"

    def __enter__(self) -> FailingEngine:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def test_an_engine_answering_5xx_fails_the_row_into_the_failure_taxonomy(tmp_path):
    # 20x: the 20 s horizon is a second of wall time, for a 503 over loopback to come back in
    scenario = dataclasses.replace(get("snapshot-outlasts-deadline"), horizon_s=20.0)
    with FailingEngine() as engine, RunStore(tmp_path / "run.duckdb") as store:
        result = replay_into_store(scenario, store, run_id="r",
                                   backend=OpenAIBackend([engine.url]),
                                   driver=wall_clock_driver(20.0))
        store.writer().flush()
        attempts = store.view("rollout_attempts")
        statuses = store.query("SELECT DISTINCT status_message FROM spans WHERE run_id = 'r' "
                               "AND name = 'gym.agent.execution'")
    print(attempts[["attempt", "outcome", "failure_class", "failure_reason"]].to_string())
    # every generation fails: no try commits; a try whose answer the horizon cut is still open
    assert set(attempts.outcome) <= {"failed", "open"}
    failed = attempts[attempts.outcome == "failed"]
    assert len(failed) >= 1 and engine.generations >= 1
    # RL sees the agent's 500 as a transport failure, as it would live; the agent's span says why
    assert set(failed.failure_class) == {"infra"}
    assert set(failed.failure_reason) == {"GymTransportError"}
    assert [m for (m,) in statuses if m] == [
        "NeMo-Gym /run failed with HTTP 500: policy model call failed: EngineHTTPError: "
        "HTTP 503: {\"error\": \"engine overloaded\"}"]
    # each answer that came back before the horizon is recorded as the engine's error, and
    # failed its try; an answer the horizon cut is the engine's but not the run's
    errors = result.stats["generation"]["kinds"]["2048->1024 tok"]["errors"]
    assert set(errors) == {"EngineHTTPError"}
    assert len(failed) <= errors["EngineHTTPError"] <= engine.generations


def test_a_server_that_is_not_there_stops_the_replay_before_it_starts(tmp_path):
    scenario = dataclasses.replace(get("snapshot-outlasts-deadline"), horizon_s=20.0)
    with RunStore(tmp_path / "run.duckdb") as store, pytest.raises(
            BackendError, match="cannot reach the OpenAI-compatible server"):
        replay_into_store(scenario, store, run_id="r",
                          backend=OpenAIBackend(["http://127.0.0.1:9/v1"]),
                          driver=wall_clock_driver(100.0))


def test_a_fleet_needs_one_backend_url_per_shard(tmp_path):
    scenario = dataclasses.replace(get("two-shard-failover"), horizon_s=5.0)
    with FailingEngine() as engine, RunStore(tmp_path / "run.duckdb") as store, pytest.raises(
            BackendError, match="2 generation shard"):
        replay_into_store(scenario, store, run_id="r", backend=OpenAIBackend([engine.url]),
                          driver=wall_clock_driver(100.0))
