"""A replay in wall-clock time, exported over OTLP/HTTP to a running collector.

The virtual-clock engine paced by ``PacedDriver``: virtual time runs ``speed`` times faster than
the wall clock, virtual 0 is the wall clock's now, every span goes through the stock OTLP
exporter behind a BatchSpanProcessor (the real pipeline a training process uses), intervals
announce themselves with start markers as they begin, and the watchdog's gauges go to the
collector's ``/v1/metrics`` as OTLP gauge points carrying the Logger step. This is what
``rolloutscope demo`` runs, and ``rolloutscope scenario run NAME --live URL``.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from rolloutscope.collectors.exporter import (
    DEFAULT_MAX_EXPORT_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_SIZE,
)
from rolloutscope.vocabulary import Attr, ResourceAttr
from rolloutscope.replay.backends.base import GenerationBackend
from rolloutscope.replay.event_engine import Inbox, PacedDriver
from rolloutscope.replay.run_scenario import ReplayResult, replay
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.telemetry import MetricPoint
from rolloutscope.replay.variants import Variant


class ReplayStopped(Exception):
    """The live replay was asked to stop before its horizon."""


class _ToProcessor(SpanExporter):
    """Hands each ended span to a BatchSpanProcessor, which batches and exports on its thread:
    the engine never waits on the network."""

    def __init__(self, processor: BatchSpanProcessor) -> None:
        self._processor = processor

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._processor.on_end(span)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._processor.shutdown()


class OtlpGaugeSink:
    """Gauge samples to a collector's ``/v1/metrics`` (OTLP protobuf; explicit timestamps,
    which the metrics API of the SDK cannot carry).

    A background thread sends them, coalescing whatever queued meanwhile into one request: a
    collector acknowledges only after its group commit, and the paced engine must not wait on
    that for every sample."""

    def __init__(self, endpoint: str, *, run_id: str, headers: dict[str, str] | None = None,
                 timeout_s: float = 10.0) -> None:
        self._url = endpoint.rstrip("/") + "/v1/metrics"
        self._run_id = run_id
        self._headers = {"Content-Type": "application/x-protobuf", **(headers or {})}
        self._timeout_s = timeout_s
        self.failed = 0
        self._pending: list[MetricPoint] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="rolloutscope-gauges",
                                        daemon=True)
        self._thread.start()

    def __call__(self, points: Sequence[MetricPoint]) -> None:
        with self._cond:
            self._pending.extend(points)
            self._cond.notify()

    def close(self, timeout_s: float = 30.0) -> None:
        """Send what is queued, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                points, self._pending = self._pending, []
                if not points and self._closed:
                    return
            self._send(points)

    def _send(self, points: Sequence[MetricPoint]) -> None:
        request = ExportMetricsServiceRequest()
        by_service: dict[str, object] = {}
        for p in points:
            scope = by_service.get(p.service)
            if scope is None:
                rm = request.resource_metrics.add()
                for key, value in ((ResourceAttr.SERVICE_NAME, p.service),
                                   (ResourceAttr.RUN_ID, self._run_id)):
                    kv = rm.resource.attributes.add()
                    kv.key, kv.value.string_value = key, value
                scope = by_service[p.service] = rm.scope_metrics.add()
            metric = scope.metrics.add()
            metric.name = p.name
            point = metric.gauge.data_points.add()
            point.time_unix_nano = p.ts_ns
            point.as_double = p.value
            kv = point.attributes.add()
            kv.key, kv.value.int_value = Attr.METRIC_STEP, p.step
        req = urllib.request.Request(self._url, data=request.SerializeToString(),
                                     headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self._timeout_s):
                pass
        except (urllib.error.URLError, OSError):
            self.failed += len(points)  # gauges are samples: a lost tick is not worth a retry


def replay_live(scenario: Scenario, *, endpoint: str, speed: float, run_id: str,
                variants: Iterable[Variant | str] = (), without: Iterable[Variant | str] = (),
                token: str | None = None, stop: threading.Event | None = None,
                backend: GenerationBackend | None = None) -> ReplayResult:
    """Replay ``scenario`` at ``speed``x wall-clock time into the collector at ``endpoint``
    (its OTLP/HTTP base URL). Raises ``ReplayStopped`` if ``stop`` is set first. ``backend``:
    the model calls are served by a real engine, whose answers wake the driver."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    processor = BatchSpanProcessor(
        OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", headers=headers),
        max_queue_size=DEFAULT_MAX_QUEUE_SIZE, schedule_delay_millis=200,
        max_export_batch_size=DEFAULT_MAX_EXPORT_BATCH_SIZE)
    stop = stop or threading.Event()

    inbox = Inbox() if backend is not None else None

    def sleep(seconds: float) -> None:
        if inbox is not None:
            inbox.wait(seconds)  # an engine's answer wakes it; a stop is seen at the next wait
            if stop.is_set():
                raise ReplayStopped
        elif stop.wait(seconds):
            raise ReplayStopped

    gauges = OtlpGaugeSink(endpoint, run_id=run_id, headers=headers)
    try:
        return replay(scenario, _ToProcessor(processor), run_id=run_id, variants=variants,
                      without=without, live=True, epoch_ns=time.time_ns(),
                      driver=PacedDriver(factor=speed, monotonic=time.monotonic, sleep=sleep,
                                         inbox=inbox),
                      metric_sink=gauges, backend=backend)
    finally:
        processor.shutdown()  # exports what is queued
        gauges.close()
