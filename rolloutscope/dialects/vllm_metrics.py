"""The Prometheus metrics of a vLLM engine that rolloutscope reads, as vLLM names them.

vLLM's ``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``) declares each metric with
``prometheus_client`` under a ``vllm:`` name and the labels ``model_name`` (the served model) and
``engine`` (the engine core's index, one per data-parallel rank behind one API server), and
serves them as Prometheus text on ``/metrics``. A counter is exposed with ``_total`` after its
name and a histogram as ``_bucket`` / ``_count`` / ``_sum`` samples; ``rolloutscope serve
--scrape`` stores each under the declared name below (``collectors/scrape.py``).

Checked against vLLM's source by tests/dialects/test_vllm_metrics.py wherever a checkout or an
unpacked wheel is at ``ROLLOUTSCOPE_VLLM_SRC`` (read from vLLM 0.34.0's wheel when written).
"""

from __future__ import annotations

from enum import StrEnum

LABEL_MODEL_NAME = "model_name"
LABEL_ENGINE = "engine"
LABELS = (LABEL_MODEL_NAME, LABEL_ENGINE)
"""The labels every metric below carries, in vLLM's order."""

SOURCE_FILE = "vllm/v1/metrics/loggers.py"
"""Where vLLM declares them, relative to a checkout's root or an unpacked wheel."""


class MetricType(StrEnum):
    """The ``prometheus_client`` class vLLM declares a metric with."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class VllmMetric(StrEnum):
    """The metric names the engine views read (``engine_state``)."""

    NUM_REQUESTS_RUNNING = "vllm:num_requests_running"  # requests in execution batches
    NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"  # requests waiting to be scheduled
    KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"  # KV cache used, 1 = 100 %
    NUM_PREEMPTIONS = "vllm:num_preemptions"  # cumulative preemptions (exposed as _total)
    E2E_REQUEST_LATENCY_SECONDS = "vllm:e2e_request_latency_seconds"  # one per finished request
    REQUEST_QUEUE_TIME_SECONDS = "vllm:request_queue_time_seconds"  # its time WAITING
    REQUEST_INFERENCE_TIME_SECONDS = "vllm:request_inference_time_seconds"  # its time RUNNING
    TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"


TYPES: dict[VllmMetric, MetricType] = {
    VllmMetric.NUM_REQUESTS_RUNNING: MetricType.GAUGE,
    VllmMetric.NUM_REQUESTS_WAITING: MetricType.GAUGE,
    VllmMetric.KV_CACHE_USAGE_PERC: MetricType.GAUGE,
    VllmMetric.NUM_PREEMPTIONS: MetricType.COUNTER,
    VllmMetric.E2E_REQUEST_LATENCY_SECONDS: MetricType.HISTOGRAM,
    VllmMetric.REQUEST_QUEUE_TIME_SECONDS: MetricType.HISTOGRAM,
    VllmMetric.REQUEST_INFERENCE_TIME_SECONDS: MetricType.HISTOGRAM,
    VllmMetric.TIME_TO_FIRST_TOKEN_SECONDS: MetricType.HISTOGRAM,
}
