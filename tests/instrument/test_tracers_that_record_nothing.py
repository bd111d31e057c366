"""Every adapter under a tracer whose spans record nothing: no SDK installed (the API's no-op
tracer) or a sampler that drops everything. Nothing is recorded, so nothing can fail to be:
the observed code runs as it would bare, and no failure is counted."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI, Request
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from rolloutscope.collectors.instrument import (
    Deadline,
    GymCheckpointMiddleware,
    ObservedFleetHealth,
)
from rolloutscope.clock import ManualClock
from rolloutscope.collectors.instrument.markers import OPEN_MARKER_AFTER_S
from rolloutscope.replay.participants.fleet_health import FleetHealthConfig, GenerationFleetHealth

CK = "/ng-control/v1/checkpoint"

TRACERS = {
    "no SDK": lambda: trace.NoOpTracer(),
    "sampled out": lambda: TracerProvider(sampler=ALWAYS_OFF).get_tracer("tests"),
}


@pytest.fixture(params=sorted(TRACERS))
def tracer(request):
    return TRACERS[request.param]()


class CountingSnapshots(GenerationFleetHealth):
    snapshots = 0

    def snapshot(self):
        self.snapshots += 1
        return super().snapshot()


def test_the_fleet_wrapper_moves_the_model_and_counts_no_failure(tracer):
    model = CountingSnapshots(num_shards=2, config=FleetHealthConfig(unhealthy_threshold=1),
                              clock=lambda: 0.0)
    fleet = ObservedFleetHealth(model, tracer=tracer)
    for _ in range(5):
        fleet.report_success(0)
    fleet.record_probe(1, False, "is_alive timed out")
    with fleet.probe_tick():
        fleet.record_probe(0, True)
    assert fleet.serving_shards() == (0,)
    assert fleet.failures.count == 0, fleet.failures.last
    assert model.snapshots == 2  # the wrap, and the one transition: no re-reads after failures


def test_a_deadline_open_past_the_marker_delay_counts_no_failure(tracer):
    clock = ManualClock()

    async def guarded() -> Deadline:
        deadline = Deadline(30.0, "NeMo-Gym prompt group", tracer=tracer, clock=clock)
        async with deadline:
            clock.advance(OPEN_MARKER_AFTER_S + 1)
        return deadline

    deadline = asyncio.run(guarded())
    assert deadline.outcome.value == "completed"
    assert deadline.failures.count == 0, deadline.failures.last


def test_a_long_control_operation_counts_no_failure(tracer):
    app = FastAPI()

    @app.post(CK + "/prepare")
    async def prepare(request: Request):
        body = await request.json()
        await asyncio.sleep(0.1)  # past the marker delay below
        return {"phase": "prepared", "checkpoint_id": body["checkpoint_id"]}

    middleware = GymCheckpointMiddleware(app, tracer=tracer, open_marker_after_s=0.01)

    async def call():
        transport = httpx.ASGITransport(app=middleware)
        async with httpx.AsyncClient(transport=transport, base_url="http://gym") as client:
            return await client.post(CK + "/prepare", json={"checkpoint_id": "ck-1"})

    reply = asyncio.run(call())
    assert reply.json() == {"phase": "prepared", "checkpoint_id": "ck-1"}
    assert middleware.failures.count == 0, middleware.failures.last
