"""Overhead of the instruments in the observed process, against the same code unobserved.

Gym middleware: per-request time of a trivial FastAPI app driven straight through ASGI (no
socket, so the figure is the middleware's and not the network's), with and without
``GymCheckpointMiddleware``, for a path it ignores, a data-plane call it only watches, and a
control operation it records as a span (its endpoint reads the JSON body, as Gym's do, so the
middleware copies and parses both bodies). Fleet wrapper: per-call time of the project's
``GenerationFleetHealth`` with and without ``ObservedFleetHealth``, for a call that changes
nothing (``report_success``) and for a probe it records as an event, on a call span of its own
or inside ``probe_tick()`` (one span per probe round, as the probe pump would use it).

Batches alternate between the two variants in the same run; each figure is the median over
batches of the mean per call, in wall time and in this process's CPU time (all its threads: the
exporter's too). On a busy machine the wall figures grow with the load while the CPU figures
barely move, so both are printed. Spans go into a real run store through the in-process
exporter.
The last table is the floor under any recorded span: the OTel SDK's own cost for one span with
an event, through the same exporter and through a provider with no processor at all (the
difference is the batch processor and the exporter thread, which share the observed process's
interpreter). Targets: <= 50 us per control operation, <= 20 us per wrapped call that changes
nothing. Check ``uptime`` first: on a busy machine every figure grows.

    .venv/bin/python benchmarks/bench_instrument.py [--batches 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from opentelemetry.sdk.trace import TracerProvider

from rolloutscope.collectors.exporter import instrument
from rolloutscope.collectors.instrument import GymCheckpointMiddleware, ObservedFleetHealth
from rolloutscope.replay.participants.fleet_health import FleetHealthConfig, GenerationFleetHealth

REQUESTS_PER_BATCH = 200
CALLS_PER_BATCH = 2_000
RENEW_BODY = b'{"checkpoint_id": "rollout-step-0-snapshot-1", "deadline_ts": 1800000300.0}'


def trivial_app() -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health():
        return Response(b"ok")

    @app.post("/ng-rollout/{capture_key}/v1/responses")
    async def responses(capture_key: str):
        return Response(b'{"id": "resp-1"}', media_type="application/json")

    @app.post("/ng-control/v1/checkpoint/renew")
    async def renew(request: Request):
        await request.body()
        return Response(b'{"phase": "preparing", "checkpoint_id": "rollout-step-0-snapshot-1"}',
                        media_type="application/json")

    return app


def _scope(method: str, path: str) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "",
            "headers": [(b"host", b"gym"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}


Sample = tuple[float, float]  # (wall s, CPU s) per call
Row = tuple[str, Sample, Sample]  # label, without, with


async def _per_request_s(app, method: str, path: str, body: bytes, n: int) -> Sample:
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        pass

    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await app(_scope(method, path), receive, send)
    return (time.perf_counter() - start) / n, (time.process_time() - cpu) / n


def _median(samples: list[Sample]) -> Sample:
    return (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))


def bench_middleware(batches: int, tracer) -> list[Row]:
    bare = trivial_app()
    observed = GymCheckpointMiddleware(trivial_app(), tracer=tracer)
    cases = [("ignored path  GET /health", "GET", "/health", b""),
             ("data plane    POST /ng-rollout/{id}/v1/responses", "POST",
              "/ng-rollout/roll-1-a1/v1/responses", b"{}"),
             ("control op    POST /ng-control/v1/checkpoint/renew (span)", "POST",
              "/ng-control/v1/checkpoint/renew", RENEW_BODY)]
    results = []
    for label, method, path, body in cases:
        samples: dict[str, list[Sample]] = {"bare": [], "observed": []}

        async def run_batches() -> None:
            for app in (bare, observed):  # warm-up: route compilation, first spans
                await _per_request_s(app, method, path, body, 50)
            for _ in range(batches):
                samples["bare"].append(
                    await _per_request_s(bare, method, path, body, REQUESTS_PER_BATCH))
                samples["observed"].append(
                    await _per_request_s(observed, method, path, body, REQUESTS_PER_BATCH))

        asyncio.run(run_batches())
        results.append((label, _median(samples["bare"]), _median(samples["observed"])))
    assert observed.failures.count == 0, observed.failures.last
    return results


def _per_call_s(call, n: int) -> Sample:
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        call(i)
    return (time.perf_counter() - start) / n, (time.process_time() - cpu) / n


def bench_fleet(batches: int, tracer, shards: int) -> list[Row]:
    def model() -> GenerationFleetHealth:
        return GenerationFleetHealth(num_shards=shards, config=FleetHealthConfig(),
                                     clock=time.monotonic)

    bare = model()
    observed = ObservedFleetHealth(model(), tracer=tracer)
    cases = [(f"report_success, nothing changes ({shards} shards)",
              lambda f: (lambda i: f.report_success(i % shards))),
             (f"record_probe ok, event on its own call span ({shards} shards)",
              lambda f: (lambda i: f.record_probe(i % shards, True))),
             (f"record_probe ok, event inside probe_tick() ({shards} shards)",
              lambda f: (lambda i: f.record_probe(i % shards, True)))]
    results = []
    for label, make in cases:
        bare_call, observed_call = make(bare), make(observed)
        if "probe_tick" in label:  # how the probe pump would call it: one tick per round
            tick = observed.probe_tick()
            tick.__enter__()
        _per_call_s(bare_call, 200), _per_call_s(observed_call, 200)
        bare_s, observed_s = [], []
        for _ in range(batches):
            bare_s.append(_per_call_s(bare_call, CALLS_PER_BATCH))
            observed_s.append(_per_call_s(observed_call, CALLS_PER_BATCH))
        if "probe_tick" in label:
            tick.__exit__(None, None, None)
        results.append((label, _median(bare_s), _median(observed_s)))
    assert observed.failures.count == 0, observed.failures.last
    return results


def bench_span_floor(batches: int, tracer) -> list[Row]:
    """One span with three attributes and an event of seven, as a probe's call span: through a
    provider with no processor, and through ``tracer`` (the store exporter's)."""
    bare = TracerProvider().get_tracer("floor")
    attrs = {"a": "record_probe", "b": 3, "c": "run-1"}
    event = {f"e{i}": i for i in range(7)}

    def span(t):
        def one(i):
            s = t.start_span("floor", attributes=attrs, start_time=i)
            s.add_event("floor.event", event, timestamp=i)
            s.end(end_time=i)
        return one

    bare_call, observed_call = span(bare), span(tracer)
    _per_call_s(bare_call, 200), _per_call_s(observed_call, 200)
    bare_s, observed_s = [], []
    for _ in range(batches):
        bare_s.append(_per_call_s(bare_call, CALLS_PER_BATCH // 4))
        observed_s.append(_per_call_s(observed_call, CALLS_PER_BATCH // 4))
    return [("SDK span + event: no processor vs store exporter",
             _median(bare_s), _median(observed_s))]


def _print(title: str, rows: list[Row], target_us: float | None) -> None:
    print(title)
    print(f"  {'case':58s} {'without':>9s} {'with':>9s} {'overhead':>9s} {'ratio':>6s}"
          f"   {'cpu: without':>12s} {'with':>9s} {'overhead':>9s}")
    for label, (bare, bare_cpu), (observed, observed_cpu) in rows:
        overhead = (observed - bare) * 1e6
        cpu_overhead = (observed_cpu - bare_cpu) * 1e6
        over = [] if target_us is None else [
            name for name, value in (("wall", overhead), ("cpu", cpu_overhead))
            if value > target_us]
        print(f"  {label:58s} {bare * 1e6:7.1f}us {observed * 1e6:7.1f}us "
              f"{overhead:7.1f}us {observed / bare:5.2f}x   {bare_cpu * 1e6:10.1f}us "
              f"{observed_cpu * 1e6:7.1f}us {cpu_overhead:7.1f}us"
              + (f"  (over the target: {', '.join(over)})" if over else ""))
    print(f"  target: <= {target_us:.0f} us overhead\n" if target_us is not None else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args()
    print("before: load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        inst = instrument(Path(tmp) / "bench.duckdb", service_name="bench", run_id="bench")
        tracer = inst.tracer("bench")
        try:
            _print("Gym checkpoint middleware, per request (ASGI, in-process)",
                   bench_middleware(args.batches, tracer), 50)
            _print("Fleet-health wrapper, per call", bench_fleet(args.batches, tracer, 8)
                   + bench_fleet(args.batches, tracer, 16), 20)
            _print("The floor: what the SDK and the exporter charge for any span",
                   bench_span_floor(args.batches, tracer), None)
        finally:
            inst.shutdown()
        print(f"spans written: {inst.exporter.exported_spans}, "
              f"dropped: {inst.exporter.dropped_spans}")
    print("after: load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
