"""A generation engine's Prometheus ``/metrics`` as vLLM writes it: the recorded names
(``rolloutscope.dialects.vllm_metrics``) declared with the real ``prometheus_client`` (the
package vLLM's ``PrometheusStatLogger`` uses) and rendered by its ``generate_latest``.

An ``EngineModel`` moves one step per read of its page (``step``), so what a scraper sees
depends on how many reads it made, never on how fast the machine is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
