"""When and how an instrumented interval announces itself to a live reader.

Client side: imports only OpenTelemetry and the vocabulary (tests/instrument/test_light_client.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from rolloutscope.vocabulary import Attr

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Span

# An interval gets its open marker (emit_open_marker) only once it has lasted this long. Most
# deadlines and control calls end within milliseconds: a marker for them is a wasted row, and
# when a marker and its span's end reach the store in one commit the writer keeps the marker,
# so the view would show a finished interval as still open.
OPEN_MARKER_AFTER_S = 1.0


def emit_open_marker(tracer: trace.Tracer, span: Span) -> None:
    """Make an interval visible before it ends.

    OTel exports a span only when it ends, but live views need intervals that are still open (a
    rollout parked right now, a shard's current state). This emits a zero-length marker span
    carrying the open span's name, parent, start and attributes plus ``Attr.OPEN_MARKER_FOR``
    (the open span's id); the store files it under that id with no end, and drops it when the
    real span arrives.
    """
    attrs = open_marker_attributes(span.attributes, span.get_span_context(), span.parent)
    # a child of the open span, so that it shares its trace id whatever the parent
    marker = tracer.start_span(span.name, context=trace.set_span_in_context(span),
                               kind=span.kind, attributes=attrs, start_time=span.start_time)
    marker.end(end_time=span.start_time)


def open_marker_attributes(attributes: Mapping[str, Any] | None, context: trace.SpanContext,
                           parent: trace.SpanContext | None) -> dict[str, Any]:
    """The attributes of the start marker of the open span with ``context`` and ``parent``:
    its own, plus the ids the store files the marker under (see ``emit_open_marker``)."""
    attrs = dict(attributes or {})
    attrs[Attr.OPEN_MARKER_FOR] = format(context.span_id, "016x")
    if parent is not None:
        attrs[Attr.OPEN_MARKER_PARENT] = format(parent.span_id, "016x")
    return attrs
