"""How finished spans leave an instrumented process: the BatchSpanProcessor sizing.

The SDK's defaults (a 2,048-span queue, 512-span batches every 5 s) drop about a quarter of the
spans a process makes at 20k spans/s; these sizes keep up with that rate without drops
(benchmarks/bench_exporter.py). Both ways out of a process use them: ``connect()`` (OTLP to a
collector) and the workbench's in-process exporter (``rolloutscope.collectors.exporter``).
Each stays overridable through the SDK's own ``OTEL_BSP_*`` variables.

Client side: this module imports only the standard library and the OpenTelemetry SDK, as
everything that runs inside an observed process must (tests/instrument/test_light_client.py).
"""

from __future__ import annotations

import logging
import os

from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

log = logging.getLogger(__name__)

ENV_BSP_MAX_QUEUE_SIZE = "OTEL_BSP_MAX_QUEUE_SIZE"
ENV_BSP_SCHEDULE_DELAY = "OTEL_BSP_SCHEDULE_DELAY"
ENV_BSP_MAX_EXPORT_BATCH_SIZE = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
DEFAULT_MAX_QUEUE_SIZE = 262_144
DEFAULT_SCHEDULE_DELAY_MS = 100
DEFAULT_MAX_EXPORT_BATCH_SIZE = 8_192


def env_int(name: str, default: int) -> int:
    """The integer in the environment variable ``name``, or ``default`` (unset, empty, or not
    an integer: that last one is logged)."""
    raw = os.environ.get(name)
    try:
        return int(raw) if raw else default
    except ValueError:
        log.warning("ignoring %s=%r: not an integer", name, raw)
        return default


def batch_span_processor(exporter: SpanExporter) -> BatchSpanProcessor:
    """A BatchSpanProcessor for ``exporter`` with the sizes above, or the ``OTEL_BSP_*``
    variables where they are set."""
    return BatchSpanProcessor(
        exporter,
        max_queue_size=env_int(ENV_BSP_MAX_QUEUE_SIZE, DEFAULT_MAX_QUEUE_SIZE),
        schedule_delay_millis=env_int(ENV_BSP_SCHEDULE_DELAY, DEFAULT_SCHEDULE_DELAY_MS),
        max_export_batch_size=env_int(ENV_BSP_MAX_EXPORT_BATCH_SIZE,
                                      DEFAULT_MAX_EXPORT_BATCH_SIZE),
    )
