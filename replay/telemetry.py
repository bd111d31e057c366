"""Spans out of a replay: OTel SDK spans with explicit timestamps and seeded ids.

Rule: nothing here reads the wall clock, the host or the process. Times are the virtual clock's
seconds on a fixed virtual epoch; span and trace ids come from a seeded ``IdGenerator``; the
resource of each simulated process is built without detectors (no hostname, pid or env). So the
same scenario and seed give the same spans, ids included.

Each simulated process (controller, each Gym server) has its own resource, as live telemetry
would. A span is a ``ReplaySpan``: the SDK's ``ReadableSpan`` (with SDK ``SpanContext``,
``Event``, ``Status`` and ``Resource`` objects), filled in while it is open and, once it has
ended, handed as it is to one synchronous collecting processor that passes full batches to any
``SpanExporter``: the in-process ``StoreSpanExporter`` for a run store, an OTLP exporter for a
live collector in the wall-clock mode.

What the replay skips is the SDK's tracer and its ``Span``, whose per-span work a replay does
not need: context objects to name a parent (a replay holds the parent span itself), the sampler
(a replay records everything), a lock per span, a second copy of each span when it ends, and
attribute cleaning through ``BoundedAttributes`` for dicts that are already clean. Their
observable rules are kept, so the spans are the ones the tracer would make, field for field:
ids are drawn in its order (a root's trace id, then the span id), the span limits from the
environment apply (at most ``max_events`` events, the newest kept), an attribute set again
moves to the end, an ended span ignores further changes, and any attribute value that is not a
plain scalar goes through the SDK's own ``BoundedAttributes``.

The watchdog's gauges (``rollout/*``, ``gen_fleet/*``, ``router/*``) are metrics, not spans: they
go as ``MetricPoint`` batches to an optional ``MetricSink`` (the runner's writes them into the
store's ``metrics`` table), stamped with the same virtual times.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from rolloutscope.collectors.exporter import open_marker_attributes
from rolloutscope.vocabulary import Attr, ResourceAttr

log = logging.getLogger(__name__)

# 2026-09-01T00:00:00Z: a fixed epoch so a replay's times do not depend on when it ran
VIRTUAL_EPOCH_NS = 1_788_220_800 * 1_000_000_000
DEFAULT_BATCH = 8192

# what ``TracerProvider().get_tracer("rolloutscope.replay")`` would name the spans' scope
SCOPE = InstrumentationScope("rolloutscope.replay", "")
# the flags the SDK gives a sampled span whose trace id is random (``SeededIdGenerator``'s are)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_UNSET = Status(StatusCode.UNSET)
_INTERNAL = SpanKind.INTERNAL  # bound once: an ``Enum.MEMBER`` read is slow on Python 3.11
# values the SDK's attribute cleaning returns unchanged; anything else (a list, an enum, a
# user model's numpy float) is cleaned by the SDK itself
_PLAIN_VALUES = frozenset((str, bool, int, float, bytes, type(None)))
_STR = frozenset((str,))
_NO_ATTRIBUTES: Mapping[str, Any] = MappingProxyType({})


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


class ReplaySpan(ReadableSpan):
    """A span of the replay: the SDK's ``ReadableSpan``, filled in while it is open (as the
    SDK's own ``Span`` fills its fields) and handed to the exporter itself once it has ended.

    The simulation holds it as a handle (a parent for later spans, a status to set). Its fields
    are the ``ReadableSpan``'s own (``_attributes``, ``_events``, ``_end_time``), written only
    by ``Telemetry``, and by nothing once the span has ended: the exporter reads it as it is.
    """

    def __init__(self, name: str, context: SpanContext, parent: SpanContext | None,
                 resource: Resource, start_time: int,
                 attributes: dict[str, Any] | BoundedAttributes) -> None:
        super().__init__(name=name, context=context, parent=parent, resource=resource,
                         attributes=attributes, kind=_INTERNAL, status=_UNSET,
                         start_time=start_time, instrumentation_scope=SCOPE)

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_status(self, status: Status) -> None:
        """As the SDK's ``Span.set_status``: OK is final and UNSET changes nothing."""
        if self._end_time is not None:
            log.warning("replay span %s: status set after it ended", self._name)
        elif self._status.status_code is not StatusCode.OK and (
                status.status_code is not StatusCode.UNSET):
            self._status = status


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
    """Span helpers per simulated service; tracks open spans so the end can mark them."""

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
        self._resources: dict[str, Resource] = {}
        self._open: dict[ReplaySpan, None] = {}  # insertion-ordered: the end marks them in order
        limits = SpanLimits()  # the SDK's defaults, or what OTEL_* variables set
        self._max_attributes = _or_unbounded(limits.max_span_attributes)
        self._max_event_attributes = _or_unbounded(limits.max_event_attributes)
        self._max_events = limits.max_events
        # a length limit truncates strings: every dict then goes through the SDK's cleaning
        self._span_value_len = limits.max_span_attribute_length
        self._event_value_len = limits.max_attribute_length

    def resource(self, service: str) -> Resource:
        resource = self._resources.get(service)
        if resource is None:
            resource = self._resources[service] = Resource({
                ResourceAttr.SERVICE_NAME: service, ResourceAttr.RUN_ID: self._run_id})
        return resource

    def ns(self, t: float) -> int:
        return self._epoch_ns + round(t * 1e9)

    # -- spans ------------------------------------------------------------------------------------
    def start(self, service: str, name: str, t: float, attrs: Mapping[str, Any],
              parent: ReplaySpan | None = None, *, instant: bool = False) -> ReplaySpan:
        a = dict(attrs)
        a[Attr.REPLAY_SCENARIO] = self._scenario
        span = self._begin(self.resource(service), name, self.ns(t), a,
                           None if parent is None else parent.context)
        if not instant:
            self._open[span] = None
            if self._live:
                self._mark_open(span)
        return span

    def end(self, span: ReplaySpan, t: float, attrs: Mapping[str, Any] | None = None) -> None:
        if span._end_time is not None:
            log.warning("replay span %s: ended twice", span.name)
            return
        if attrs:
            self._set_attributes(span, attrs)
        self._open.pop(span, None)
        self._export(span, self.ns(t))

    def event(self, span: ReplaySpan, name: str, t: float,
              attrs: Mapping[str, Any] | None = None) -> None:
        if span._end_time is not None:
            log.warning("replay span %s: event %s after it ended", span.name, name)
            return
        if not attrs:
            cleaned: Mapping[str, Any] = _NO_ATTRIBUTES
        elif (self._event_value_len is None and len(attrs) <= self._max_event_attributes
              and _is_plain(attrs)):
            cleaned = dict(attrs)  # the event keeps its own copy, as the SDK's do
        else:
            cleaned = BoundedAttributes(self._max_event_attributes, attrs, immutable=True,
                                        max_value_len=self._event_value_len)
        event = Event(name, cleaned, self.ns(t))
        if span._events:
            span._events.append(event)
        else:
            span._events = [event]

    def instant(self, service: str, name: str, t: float, attrs: Mapping[str, Any],
                parent: ReplaySpan | None = None,
                events: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> ReplaySpan:
        span = self.start(service, name, t, attrs, parent, instant=True)
        for ev_name, ev_attrs in events:
            self.event(span, ev_name, t, ev_attrs)
        self.end(span, t)
        return span

    def _begin(self, resource: Resource, name: str, start_ns: int, attrs: dict[str, Any],
               parent: SpanContext | None) -> ReplaySpan:
        ids = self._ids
        # the tracer's order: a root draws its trace id before its span id
        trace_id = ids.generate_trace_id() if parent is None else parent.trace_id
        context = SpanContext(trace_id, ids.generate_span_id(), False, _SAMPLED)
        if not (self._span_value_len is None and len(attrs) <= self._max_attributes
                and _is_plain(attrs)):
            attrs = BoundedAttributes(self._max_attributes, attrs, immutable=False,
                                      max_value_len=self._span_value_len)
        return ReplaySpan(name, context, parent, resource, start_ns, attrs)

    def _set_attributes(self, span: ReplaySpan, attrs: Mapping[str, Any]) -> None:
        current = span._attributes
        if type(current) is dict and (
                self._span_value_len is None and _is_plain(attrs)
                and len(current) + len(attrs) <= self._max_attributes):
            for key, value in attrs.items():
                # the SDK moves a key that is set again to the end (its JSON text shows it)
                current.pop(key, None)
                current[key] = value
            return
        if type(current) is dict:
            current = span._attributes = BoundedAttributes(
                self._max_attributes, current, immutable=False,
                max_value_len=self._span_value_len)
        for key, value in attrs.items():
            current[key] = value

    def _export(self, span: ReplaySpan, end_ns: int) -> None:
        span._end_time = end_ns
        if len(span._events) > self._max_events:
            span._events = BoundedList.from_seq(self._max_events, span._events)  # the newest
        self._processor.on_end(span)

    def _mark_open(self, span: ReplaySpan) -> None:
        """The start marker of an open interval (see ``emit_open_marker``): a zero-length
        child of the span, so that it shares its trace id whatever the parent."""
        marker = self._begin(span.resource, span.name, span.start_time,
                             open_marker_attributes(span.attributes, span.context, span.parent),
                             span.context)
        self._export(marker, span.start_time)

    # -- gauges -----------------------------------------------------------------------------------
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
        open_spans = list(self._open)
        for span in [] if self._live else open_spans:  # live: marked when they started
            self._mark_open(span)
        self._processor.force_flush()
        self._flush_metrics()
        return len(open_spans)


def _is_plain(attrs: Mapping[str, Any]) -> bool:
    """Whether the SDK's cleaning would hand ``attrs`` back unchanged: non-empty string keys,
    plain scalar values (checked by type, in C: no per-value Python call)."""
    return (_PLAIN_VALUES.issuperset(map(type, attrs.values()))
            and _STR.issuperset(map(type, attrs)) and "" not in attrs)


def _or_unbounded(limit: int | None) -> int:
    return sys.maxsize if limit is None else limit
