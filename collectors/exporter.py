"""In-process OpenTelemetry exporter into a run store, and the one-call set-up helper.

``StoreSpanExporter`` is a stock OTel ``SpanExporter``: the BatchSpanProcessor's worker thread
hands it finished spans, it encodes them into a ``RowBatch`` and queues that on the store's
writer. It never raises into the observed process: anything it cannot write is counted
(``dropped_spans``) and logged once per burst.

``instrument()`` installs a TracerProvider whose BatchSpanProcessor is sized for 20k spans/s
without drops (the SDK defaults — a 2,048-span queue exported every 5 s — drop about a quarter
of the spans at that rate; ``rolloutscope.collectors.batching``).

Workbench side: this module loads DuckDB and Arrow through the store. What runs inside an
observed process and only sends spans imports ``rolloutscope.collectors.connect``, the adapters
of ``rolloutscope.collectors.instrument`` and ``rolloutscope.collectors.batching`` instead;
the names they share with this module (the processor's sizes, ``emit_open_marker``,
``open_marker_attributes``) are imported here from there and stay importable from here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode

from rolloutscope.collectors.batching import (  # noqa: F401 - importable from here too
    DEFAULT_MAX_EXPORT_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_SIZE,
    DEFAULT_SCHEDULE_DELAY_MS,
    ENV_BSP_MAX_EXPORT_BATCH_SIZE,
    ENV_BSP_MAX_QUEUE_SIZE,
    ENV_BSP_SCHEDULE_DELAY,
    batch_span_processor,
)
from rolloutscope.collectors.instrument.markers import (  # noqa: F401 - importable from here too
    emit_open_marker,
    open_marker_attributes,
)
from rolloutscope.store.errors import QueueFullError
from rolloutscope.store.fit import COPIED, ROW_KEYS, ColumnFitError
from rolloutscope.store.rows import RowBatch, arrow_from_buffers, attributes_json, span_problem
from rolloutscope.store.schema import ARROW_SCHEMAS
from rolloutscope.store.store import RunStore
from rolloutscope.vocabulary import ResourceAttr

log = logging.getLogger(__name__)

# How long the store's writer gathers the processor's exports into one commit. No sender waits
# on an acknowledgement here (``force_flush`` commits at once), so the bound is a second, not
# the collector's 50 ms: at 20k spans/s a commit holds ~20,000 rows instead of ~2,000, which
# costs DuckDB a few µs less per span (benchmarks/bench_exporter.py).
COMMIT_DELAY_MS = 1_000


def _plain_attributes(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes as a plain dict.

    The public ``attributes`` is a read-only proxy over the SDK's ``BoundedAttributes``, whose
    Python-level iteration costs a few µs a span; its backing dict copies at C speed. A span
    built with a plain dict (a replay's) hands that over as it is: an ended span's attributes
    no longer change, and ``RowBatch`` only reads them. Falls back to the public API if the
    SDK's internals ever change shape.
    """
    attributes = getattr(span, "_attributes", None)
    if type(attributes) is dict:
        return attributes
    backing = getattr(attributes, "_dict", None)
    if isinstance(backing, dict):
        return dict(backing)
    return dict(span.attributes or {})


def _finished_events(span: ReadableSpan) -> Sequence[Any]:
    """The span's events, read like ``_plain_attributes`` reads attributes.

    The public ``events`` (and ``links``) copies the SDK's ``BoundedList`` through a locked
    Python iterator, about 1 µs a span even when empty. A span that has ended no longer
    changes, so its backing deque is read directly; anything else goes through the public API.
    """
    backing = getattr(getattr(span, "_events", None), "_dq", None)
    return backing if backing is not None else span.events


def _finished_links(span: ReadableSpan) -> Sequence[Any]:
    """The span's links; see ``_finished_events``."""
    backing = getattr(getattr(span, "_links", None), "_dq", None)
    return backing if backing is not None else span.links


# the public properties of a finished span and of its events that ``SpanEncoder`` reads as the
# fields behind them, where a type inherits them unchanged (``SpanEncoder.encode``)
_SPAN_PROPERTIES = ("name", "context", "parent", "resource", "status", "instrumentation_scope",
                    "events", "links", "start_time", "end_time", "kind", "attributes")
_EVENT_PROPERTIES = ("name", "timestamp", "attributes")


def _reads_its_fields(cls: type, base: type, properties: tuple[str, ...]) -> bool:
    """Whether ``cls`` inherits ``base``'s public properties unchanged, so its fields can be
    read directly (a subclass that overrides one keeps going through the public API)."""
    return issubclass(cls, base) and all(
        getattr(cls, name, None) is getattr(base, name, None) for name in properties)


def _sdk_fields_match() -> bool:
    """Whether this SDK's ``ReadableSpan`` and ``Event`` properties return the fields the
    encoder reads in their place (checked once, at import; another layout: the properties)."""
    context = SpanContext(3, 5, False)
    event = Event("e", {"k": 1}, 7)
    span = ReadableSpan(name="n", context=context, parent=context,
                        resource=Resource({"service.name": "s"}), attributes={"a": 1},
                        events=[event], links=(), kind=trace.SpanKind.SERVER,
                        status=Status(StatusCode.OK), start_time=1, end_time=2,
                        instrumentation_scope=InstrumentationScope("scope"))
    return (span.name is span._name and span.context is span._context
            and span.parent is span._parent and span.resource is span._resource
            and span.status is span._status
            and span.instrumentation_scope is span._instrumentation_scope
            and span.events == tuple(span._events) and span.links == tuple(span._links)
            and span.start_time is span._start_time and span.end_time is span._end_time
            and span.kind is span._kind and dict(span.attributes) == span._attributes
            and (event.name, event.timestamp, event.attributes)
            == (event._name, event._timestamp, event._attributes)
            # a span context is a tuple of (trace id, span id, ...); a status keeps its fields
            and isinstance(context, tuple) and (context[0], context[1]) == (3, 5)
            and span.status.status_code is span.status._status_code
            and Status(StatusCode.ERROR, "d").description == Status(StatusCode.ERROR,
                                                                     "d")._description)


_DIRECT_READS = _sdk_fields_match()
_NO_SCOPE = object()  # no span's scope: the first span's is encoded


# The compiled encoder (collectors/_fastencode.c): the common span's rows straight into Arrow
# buffers, every other span left to ``SpanEncoder``'s Python loop. Its key indices: the row keys
# (fit.ROW_KEYS, in the order of the C file's K_ enum), then each copied column's keys at
# 16 + 4 * column + rank.
FORCE_PYTHON_ENCODER_ENV = "ROLLOUTSCOPE_PYTHON_ENCODER"
ENCODER_FALLBACK_COST = ("encoding exported spans in Python costs about 8 us more CPU per span "
                         "in the observed process (benchmarks/bench_exporter.py)")
_ENCODE_KEYS = {key: i for i, key in enumerate(ROW_KEYS)}
_ENCODE_KEYS.update({key: 16 + 4 * column + rank for column, copy in enumerate(COPIED)
                     for rank, key in enumerate(copy.keys)})
# each copied column as the C file's COPY_TEXT (0), COPY_INT (1) or COPY_AUTHORITY (2)
_COPY_KINDS = tuple(2 if copy.column == "server_authority" else 1 if copy.sql == "INTEGER"
                    else 0 for copy in COPIED)


def _load_encoder():
    if os.environ.get(FORCE_PYTHON_ENCODER_ENV, "") not in ("", "0"):
        return None, f"{FORCE_PYTHON_ENCODER_ENV} is set"
    if not _DIRECT_READS:
        return None, "this OpenTelemetry SDK's spans are not laid out as the encoder reads them"
    try:
        from rolloutscope.collectors import _fastencode
    except ImportError as exc:
        return None, f"the compiled encoder is not built ({exc})"
    _fastencode.configure(_ENCODE_KEYS, _COPY_KINDS, Event, SpanContext, Status, orjson.dumps)
    return _fastencode, None


_compiled, encoder_unavailable = _load_encoder()
_encoder_warned = False


def _warn_if_python_encoder() -> None:
    global _encoder_warned
    if encoder_unavailable is not None and not _encoder_warned:
        _encoder_warned = True
        log.warning("exported spans are encoded in Python: %s; %s.", encoder_unavailable,
                    ENCODER_FALLBACK_COST)


_SPANS, _EVENTS = ARROW_SCHEMAS["spans"], ARROW_SCHEMAS["span_events"]


def _hex_trace(value: int) -> str:
    return format(value, "032x")


def _hex_span(value: int) -> str:
    return format(value, "016x")


class SpanEncoder:
    """Pure encoding of SDK spans into a RowBatch; caches each Resource's JSON.

    A span with a value its column cannot hold (``rolloutscope.store.fit``) is left out and
    counted in ``rejected``, with the first reason in ``problem``: one bad span never costs the
    batch it came in.

    With the compiled encoder built (``compiled``, the default where it is), the common span
    goes straight into Arrow buffers there and only the others through the Python loop below;
    both give the same rows (tests/collectors/test_fast_encode.py)."""

    def __init__(self, *, compiled: bool = True) -> None:
        self._resources: dict[int, tuple[Resource, str | None, str | None, str | None]] = {}
        self._direct: dict[type, bool] = {}  # span and event types whose fields are read
        self._compiled = _compiled if compiled else None
        self.rejected = 0
        self.problem: str | None = None

    def _reads_span_directly(self, cls: type) -> bool:
        return self._reads_directly(cls, ReadableSpan, _SPAN_PROPERTIES)

    def _reads_directly(self, cls: type, base: type, properties: tuple[str, ...]) -> bool:
        direct = self._direct.get(cls)
        if direct is None:
            direct = self._direct[cls] = _DIRECT_READS and _reads_its_fields(cls, base,
                                                                             properties)
        return direct

    def _events(self, events: Sequence[Any]) -> list[tuple[str, int, Any]]:
        direct = self._direct
        out: list[tuple[str, int, Any]] = []
        add = out.append
        for e in events:
            kind = type(e)
            if direct.get(kind) or self._reads_directly(kind, Event, _EVENT_PROPERTIES):
                add((e._name, e._timestamp, e._attributes))
            else:
                add((e.name, e.timestamp, e.attributes))
        return out

    def _resource(self, resource: Resource) -> tuple[str | None, str | None, str | None]:
        cached = self._resources.get(id(resource))
        if cached is None or cached[0] is not resource:
            attrs = resource.attributes
            service, run_id = (attrs.get(ResourceAttr.SERVICE_NAME),
                               attrs.get(ResourceAttr.RUN_ID))
            try:
                resource_json = attributes_json(attrs)
            except ColumnFitError:
                resource_json = None
            # the decoder's rule for a resource's ids: text as sent, anything else as text
            cached = (resource, resource_json, None if service is None else str(service),
                      None if run_id is None else str(run_id))
            if len(self._resources) > 1024:
                self._resources.clear()
            self._resources[id(resource)] = cached
        return cached[1], cached[2], cached[3]

    @staticmethod
    def _public_fields(span: ReadableSpan) -> tuple[Any, ...]:
        """(context, parent, status, resource, name, kind, start, end, scope, events, links,
        attributes) of a span whose type overrides a public property: each read once."""
        return (span.context, span.parent, span.status, span.resource, span.name, span.kind,
                span.start_time, span.end_time, span.instrumentation_scope,
                _finished_events(span), _finished_links(span), _plain_attributes(span))

    def encode(self, spans: Sequence[ReadableSpan], batch: RowBatch | None = None) -> RowBatch:
        """The spans' rows, added to ``batch`` (a new one if None).

        A ``ReadableSpan`` (the SDK's finished spans, a replay's) is read field by field, in
        this loop: each public property is a Python call, and ``events``/``links`` copy into a
        tuple, together more than half of what encoding a span cost; a type that overrides a
        property goes through the public API (``_public_fields``). The resource and the scope
        are nearly always the previous span's objects: each is encoded when it changes."""
        batch = RowBatch() if batch is None else batch
        if self._compiled is not None and spans:
            if type(spans) is not list and type(spans) is not tuple:
                spans = list(spans)
            span_columns, n_spans, event_columns, n_events, left = self._compiled.encode_spans(
                spans, self._direct, self._reads_span_directly, self._resource)
            if n_spans:
                batch.add_arrow("spans", arrow_from_buffers(span_columns, n_spans, _SPANS))
            if n_events:
                batch.add_arrow("span_events", arrow_from_buffers(event_columns, n_events, _EVENTS))
            if not left:
                return batch
            spans = [spans[i] for i in left]
        append = batch.append_span
        direct, reads_directly = self._direct, self._reads_directly
        # the SDK's span context is a tuple (trace id, span id, ...), and its status keeps its
        # code and message as they are (``_sdk_fields_match``)
        context_type, status_type = (SpanContext, Status) if _DIRECT_READS else (None, None)
        last_resource = last_encoded = None
        last_scope: Any = _NO_SCOPE
        scope_name = None
        for span in spans:
            cls = type(span)
            if direct.get(cls) or reads_directly(cls, ReadableSpan, _SPAN_PROPERTIES):
                ctx, parent, status = span._context, span._parent, span._status
                resource, name, kind = span._resource, span._name, span._kind
                start, end, scope = span._start_time, span._end_time, span._instrumentation_scope
                events, links, attributes = span._events, span._links, span._attributes
                if events and type(events) is not list:
                    events = getattr(events, "_dq", None) or tuple(events)
                if links and type(links) is not tuple:
                    links = getattr(links, "_dq", None) or tuple(links)
                if type(attributes) is not dict:
                    attributes = _plain_attributes(span)
            else:
                (ctx, parent, status, resource, name, kind, start, end, scope, events, links,
                 attributes) = self._public_fields(span)
            if type(ctx) is context_type:
                trace_id, span_id = ctx[0], ctx[1]
            else:
                trace_id, span_id = ctx.trace_id, ctx.span_id
            if parent is not None:
                parent = parent[1] if type(parent) is context_type else parent.span_id
            if type(status) is status_type:
                code, description = status._status_code, status._description
            else:
                code, description = status.status_code, status.description
            if resource is not last_resource:
                last_resource, last_encoded = resource, self._resource(resource)
            resource_json, service, run_id = last_encoded
            if scope is not last_scope:
                last_scope, scope_name = scope, None if scope is None else scope.name
            try:
                # the SDK stores whatever the instrumented code passed: the span's own scalars
                # are checked here (RowBatch checks promoted attributes, attributes, events);
                # the literals are INT64_MIN / INT64_MAX
                if not (type(start) is int and type(end) is int
                        and -9223372036854775808 <= start <= 9223372036854775807
                        and -9223372036854775808 <= end <= 9223372036854775807
                        and type(name) is str and (description is None or type(description) is str)
                        and (scope_name is None or type(scope_name) is str)):
                    raise ColumnFitError(span_problem(start, end, name=name,
                                                      status_message=description,
                                                      scope=scope_name))
                append(
                    run_id, format(trace_id, "032x"), format(span_id, "016x"),
                    None if parent is None else format(parent, "016x"), name,
                    # ``_name_`` is the enum member's own attribute: ``.name`` and hashing the
                    # member for a dict lookup both run Python code
                    kind._name_, service, start, end, code._name_, description,
                    attributes, resource_json, scope_name,
                    self._events(events) if events else None,
                    [(_hex_trace(lk.context.trace_id), _hex_span(lk.context.span_id),
                      lk.attributes) for lk in links] if links else None,
                )
            except ColumnFitError as exc:
                self.rejected += 1
                if self.problem is None:
                    self.problem = f"span {format(span_id, '016x')}: {exc}"
        return batch


class StoreSpanExporter(SpanExporter):
    """Exports finished spans into a RunStore through its writer."""

    def __init__(self, store: RunStore, *, submit_timeout_s: float = 5.0) -> None:
        self._store = store
        self._writer = store.writer(max_delay_ms=COMMIT_DELAY_MS)
        self._encoder = SpanEncoder()
        _warn_if_python_encoder()
        self._submit_timeout_s = submit_timeout_s
        self._lock = threading.Lock()
        self.exported_spans = 0
        self.dropped_spans = 0
        self._last_warning = 0.0
        self._shutdown = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            self._count_drop(len(spans), "exporter is shut down")
            return SpanExportResult.FAILURE
        written = len(spans)
        try:
            encoder = self._encoder  # the processor's one worker thread calls export
            batch = encoder.encode(spans)
            if encoder.rejected:
                # the spans that cannot be stored are dropped; the rest of the batch goes on
                written -= encoder.rejected
                self._count_drop(encoder.rejected, f"cannot be stored: {encoder.problem}")
                encoder.rejected, encoder.problem = 0, None
            self._writer.submit(batch, block=True, timeout=self._submit_timeout_s)
        except QueueFullError as exc:
            self._count_drop(written, str(exc))
            return SpanExportResult.FAILURE
        except Exception as exc:  # noqa: BLE001 - never raise into the observed process
            self._count_drop(written, f"{type(exc).__name__}: {exc}")
            return SpanExportResult.FAILURE
        with self._lock:
            self.exported_spans += written
        return SpanExportResult.SUCCESS

    def _count_drop(self, n: int, why: str) -> None:
        with self._lock:
            self.dropped_spans += n
            now = time.monotonic()
            if now - self._last_warning < 10.0:
                return
            self._last_warning = now
        log.warning("rolloutscope exporter could not write %d span(s) (%d so far): %s",
                    n, self.dropped_spans, why)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        try:
            return self._writer.flush(timeout_millis / 1000.0)
        except Exception:  # noqa: BLE001
            return False

    def shutdown(self) -> None:
        self.force_flush()
        self._shutdown = True


@dataclass
class Instrumentation:
    """What ``instrument()`` installed; ``shutdown()`` flushes everything into the store."""

    provider: TracerProvider
    exporter: StoreSpanExporter
    processor: BatchSpanProcessor
    store: RunStore
    owns_store: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def tracer(self, name: str = "rolloutscope") -> trace.Tracer:
        return self.provider.get_tracer(name)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export every ended span and wait until the store has committed it."""
        # the SDK's processor flush exports its queue but does not flush the exporter
        return (self.provider.force_flush(int(timeout_s * 1000))
                and self.exporter.force_flush(int(timeout_s * 1000)))

    def shutdown(self) -> None:
        self.provider.shutdown()
        self.exporter.force_flush()
        if self.owns_store:
            self.store.close()


def instrument(
    store: RunStore | str | Path, *, service_name: str, run_id: str | None = None,
    resource_attributes: Mapping[str, Any] | None = None, set_global: bool = False,
) -> Instrumentation:
    """Install a TracerProvider that writes into ``store`` (a RunStore or a path)."""
    owns = not isinstance(store, RunStore)
    # A store opened here serves only this exporter: one DuckDB thread keeps the appends off the
    # observed process's other cores (and costs ~2-3 us a span less than the default pool).
    run_store = RunStore(store, threads=1) if owns else store
    attrs: dict[str, Any] = {ResourceAttr.SERVICE_NAME: service_name}
    if run_id is not None:
        attrs[ResourceAttr.RUN_ID] = run_id
    attrs.update(resource_attributes or {})
    provider = TracerProvider(resource=Resource.create(attrs))
    exporter = StoreSpanExporter(run_store)
    processor = batch_span_processor(exporter)
    provider.add_span_processor(processor)
    if set_global:
        trace.set_tracer_provider(provider)
    return Instrumentation(provider=provider, exporter=exporter, processor=processor,
                           store=run_store, owns_store=owns)
