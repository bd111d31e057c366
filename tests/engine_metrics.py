"""A generation engine's Prometheus ``/metrics`` as vLLM writes it, and an HTTP server on
127.0.0.1 that serves it (``Engine``): the recorded names
(``rolloutscope.dialects.vllm_metrics``) declared with the real ``prometheus_client`` (the
package vLLM's ``PrometheusStatLogger`` uses) and rendered by its ``generate_latest``.

An ``EngineModel`` moves one step per read of its page (``step``), so what a scraper sees
depends on how many reads it made, never on how fast the machine is."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rolloutscope.dialects.vllm_metrics import LABELS, TYPES, MetricType, VllmMetric

# vLLM's request_latency_buckets (loggers.py)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_CLASSES = {MetricType.GAUGE: Gauge, MetricType.COUNTER: Counter}


@dataclass(frozen=True)
class Step:
    """What an engine does between two reads: its gauges after it, and the requests it
    finished in it, each as (seconds queued, seconds end to end)."""

    running: int
    waiting: int
    kv_cache_usage: float = 0.5
    preempted: int = 0
    finished: tuple[tuple[float, float], ...] = ()


class EngineModel:
    """One vLLM server with one engine core (``engine="0"``) serving ``model``."""

    def __init__(self, steps: Callable[[int], Step], *, model: str = "Qwen/Qwen3-0.6B") -> None:
        self._steps = steps
        self.reads = 0
        self.registry = CollectorRegistry()
        self._m = {}
        for metric in VllmMetric:
            kind = TYPES[metric]
            if kind is MetricType.HISTOGRAM:
                m = Histogram(metric.value, metric.name, labelnames=LABELS,
                              buckets=LATENCY_BUCKETS, registry=self.registry)
            else:
                m = _CLASSES[kind](metric.value, metric.name, labelnames=LABELS,
                                   registry=self.registry)
            self._m[metric] = m.labels(model, "0")

    def step(self) -> bytes:
        """Advance one step and render the page."""
        s = self._steps(self.reads)
        self.reads += 1
        m = self._m
        m[VllmMetric.NUM_REQUESTS_RUNNING].set(s.running)
        m[VllmMetric.NUM_REQUESTS_WAITING].set(s.waiting)
        m[VllmMetric.KV_CACHE_USAGE_PERC].set(s.kv_cache_usage)
        m[VllmMetric.NUM_PREEMPTIONS].inc(s.preempted)
        for queued, e2e in s.finished:
            m[VllmMetric.REQUEST_QUEUE_TIME_SECONDS].observe(queued)
            m[VllmMetric.E2E_REQUEST_LATENCY_SECONDS].observe(e2e)
            m[VllmMetric.REQUEST_INFERENCE_TIME_SECONDS].observe(e2e - queued)
            m[VllmMetric.TIME_TO_FIRST_TOKEN_SECONDS].observe(queued + 0.05)
        return generate_latest(self.registry)


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.server.page()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class Engine:
    """An HTTP server on 127.0.0.1 whose ``/metrics`` is ``page()``, one step per read."""

    def __init__(self, page) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
        self.server.page = page
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def healthy(k: int) -> Step:
    """Keeps up: a short queue, two requests finished a step, little of it queued."""
    return Step(running=4, waiting=k % 2, kv_cache_usage=0.4, finished=((0.05, 2.0),) * 2)


def wedged(k: int) -> Step:
    """Works for three steps, then holds its requests and finishes none."""
    if k < 3:
        return Step(running=3, waiting=0, finished=((0.1, 1.5),))
    return Step(running=3, waiting=2, kv_cache_usage=0.9)


def saturated(k: int) -> Step:
    """Finishes requests that spent most of their time queued, its queue growing, and preempts."""
    return Step(running=8, waiting=1 + k, kv_cache_usage=0.98, preempted=1,
                finished=((8.0, 10.0),) * 2)


# -- a run written by hand: three engines behind three healthy shards ---------------------------
FAST_THRESHOLDS = {"engine_wedged_s": 2.0, "engine_backlog_s": 2.0,
                   "engine_saturation_window_s": 1.0, "engine_saturated_queue_share": 0.5}
ENGINES = {"healthy": ("10.0.0.7", healthy), "wedged": ("10.0.0.8", wedged),
           "saturated": ("10.0.0.9", saturated)}
READS = 12  # every 0.5 s from 10 s on


def write_engine_run(kit, run_id: str, *, t0_ns: int, s: int = 10**9) -> None:
    """Into ``kit``'s store (tests/store/conftest.py's ``SpanKit``, writing ``run_id``): shard i
    healthy from 0 s to 100 s, served by engine i of ``ENGINES`` at http://HOST:8000/v1, and
    ``READS`` scrapes of each engine's /metrics, through the scraper's own ``points``."""
    from rolloutscope.collectors.scrape import engine_target, points
    from rolloutscope.store import RowBatch
    from rolloutscope.vocabulary import Attr, SpanName

    store = kit.inst.store
    store.register_run(run_id, config=FAST_THRESHOLDS)
    for idx, (host, _) in enumerate(ENGINES.values()):
        kit.span(SpanName.SHARD_STATE, 0, 100, {
            Attr.SHARD_IDX: idx, Attr.FLEET_STATE: "healthy",
            Attr.BACKEND_URL: f"http://{host}:8000/v1"})
    kit.flush()
    batch = RowBatch()
    for host, steps in ENGINES.values():
        model, target = EngineModel(steps), engine_target(f"http://{host}:8000/metrics")
        for k in range(READS):
            batch.extend(points(model.step().decode(), target=target, run_id=run_id,
                                ts_ns=t0_ns + 10 * s + k * s // 2))
    store.writer().write(batch, timeout=120)  # one commit
