"""Spans out of a replay: through the real OTel SDK, with explicit timestamps and seeded ids.

Rule: nothing here reads the wall clock, the host or the process. Times are the virtual clock's
seconds on a fixed virtual epoch; span and trace ids come from a seeded ``IdGenerator``; the
resource of each simulated process is built without detectors (no hostname, pid or env). So the
same scenario and seed give the same spans, ids included.

Each simulated process (controller, each Gym server) gets its own ``TracerProvider`` and
resource, as live telemetry would; they share one id generator and one synchronous collecting
processor that hands full batches to an exporter (the in-process ``StoreSpanExporter`` for a
run store; an OTLP exporter for a live collector in the wall-clock mode).

The watchdog's gauges (``rollout/*``, ``gen_fleet/*``, ``router/*``) are metrics, not spans: they
go as ``MetricPoint`` batches to an optional ``MetricSink`` (the runner's writes them into the
store's ``metrics`` table), stamped with the same virtual times.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from rolloutscope.collectors.exporter import emit_open_marker
from rolloutscope.collectors.vocabulary import Attr, ResourceAttr

# 2026-09-01T00:00:00Z: a fixed epoch so a replay's times do not depend on when it ran
VIRTUAL_EPOCH_NS = 1_788_220_800 * 1_000_000_000
DEFAULT_BATCH = 8192


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One gauge sample, as the RL ``Logger`` publishes it (step = train steps)."""

    service: str
    name: str
    ts_ns: int
    step: int
    value: float


MetricSink = Callable[[Sequence[MetricPoint]], None]


class SeededIdGenerator(IdGenerator):
    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"rolloutscope-ids-{seed}")

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._rng.getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:
        return True


class _BatchingProcessor(SpanProcessor):
    """Synchronous: ended spans go to the exporter in the engine's thread, in end order."""

    def __init__(self, exporter: SpanExporter, batch: int) -> None:
        self._exporter = exporter
        self._batch = batch
        self._pending: list[ReadableSpan] = []
        self.exported = 0

    def on_end(self, span: ReadableSpan) -> None:
        self._pending.append(span)
        if len(self._pending) >= self._batch:
            self.force_flush()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self._pending:
            spans, self._pending = self._pending, []
            self._exporter.export(spans)
            self.exported += len(spans)
        return True

    def shutdown(self) -> None:
        self.force_flush()


class Telemetry:
    """Span helpers over per-service tracers; tracks open spans so the end can mark them."""

    def __init__(self, *, exporter: SpanExporter, run_id: str, scenario: str, seed: int,
                 batch: int = DEFAULT_BATCH, metric_sink: MetricSink | None = None,
                 epoch_ns: int = VIRTUAL_EPOCH_NS, live: bool = False) -> None:
        """``live``: the wall-clock mode. Every span goes to the exporter as it ends (the
        exporter batches), and an interval announces itself with a start marker when it
        starts, so a live dashboard sees a rollout parked now, not when it is released.
        ``epoch_ns`` is what virtual time 0 maps to (the wall clock's now, in live mode)."""
        self._epoch_ns = epoch_ns
        self._live = live
        if live:
            batch = 1
        self._metric_sink = metric_sink
        self._metrics: list[MetricPoint] = []
        self.metrics_published = 0
        self._batch = batch
        self._ids = SeededIdGenerator(seed)
        self._processor = _BatchingProcessor(exporter, batch)
        self._run_id = run_id
        self._scenario = scenario
        self._tracers: dict[str, trace.Tracer] = {}
        self._providers: list[TracerProvider] = []
        self._open: dict[int, Span] = {}
        self._contexts: dict[int, Any] = {}  # open span -> the context that makes it a parent

    def tracer(self, service: str) -> trace.Tracer:
        tracer = self._tracers.get(service)
        if tracer is None:
            resource = Resource({ResourceAttr.SERVICE_NAME: service,
                                 ResourceAttr.RUN_ID: self._run_id})
            provider = TracerProvider(resource=resource, id_generator=self._ids,
                                      shutdown_on_exit=False)
            provider.add_span_processor(self._processor)
            self._providers.append(provider)
            tracer = self._tracers[service] = provider.get_tracer("rolloutscope.replay")
        return tracer

    def ns(self, t: float) -> int:
        return self._epoch_ns + round(t * 1e9)

    def start(self, service: str, name: str, t: float, attrs: Mapping[str, Any],
              parent: Span | None = None, *, instant: bool = False) -> Span:
        a = dict(attrs)
        a[Attr.REPLAY_SCENARIO] = self._scenario
        ctx = None
        if parent is not None:
            ctx = self._contexts.get(id(parent))
            if ctx is None:
                ctx = trace.set_span_in_context(parent)
                if id(parent) in self._open:  # cached only while the parent is open
                    self._contexts[id(parent)] = ctx
        tracer = self.tracer(service)
        span = tracer.start_span(name, context=ctx, attributes=a, start_time=self.ns(t))
        self._open[id(span)] = span
        if self._live and not instant:
            emit_open_marker(tracer, span)
        return span

    def end(self, span: Span, t: float, attrs: Mapping[str, Any] | None = None) -> None:
        if attrs:
            span.set_attributes(attrs)
        self._open.pop(id(span), None)
        self._contexts.pop(id(span), None)
        span.end(end_time=self.ns(t))

    def event(self, span: Span, name: str, t: float,
              attrs: Mapping[str, Any] | None = None) -> None:
        span.add_event(name, attributes=attrs, timestamp=self.ns(t))

    def instant(self, service: str, name: str, t: float, attrs: Mapping[str, Any],
                parent: Span | None = None,
                events: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> Span:
        span = self.start(service, name, t, attrs, parent, instant=True)
        for ev_name, ev_attrs in events:
            self.event(span, ev_name, t, ev_attrs)
        self.end(span, t)
        return span

    def gauge(self, service: str, name: str, t: float, value: float, step: int) -> None:
        if self._metric_sink is None:
            return
        self._metrics.append(MetricPoint(service, name, self.ns(t), step, float(value)))
        if len(self._metrics) >= self._batch:
            self._flush_metrics()

    def _flush_metrics(self) -> None:
        if self._metrics and self._metric_sink is not None:
            points, self._metrics = self._metrics, []
            self._metric_sink(points)
            self.metrics_published += len(points)

    @property
    def exported(self) -> int:
        return self._processor.exported

    def finish(self) -> int:
        """Mark every still-open interval (so views show it open), then flush. Returns count."""
        open_spans = list(self._open.values())
        for span in [] if self._live else open_spans:  # live: marked when they started
            emit_open_marker(self.tracer(span.resource.attributes[ResourceAttr.SERVICE_NAME]),
                             span)
        self._processor.force_flush()
        self._flush_metrics()
        return len(open_spans)
