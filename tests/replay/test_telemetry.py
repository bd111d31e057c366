"""A replay's spans are the ones the OTel SDK's tracer would make, field for field.

``Telemetry`` builds the SDK's ``ReadableSpan``s itself instead of going through a tracer; each
test here runs the same operations through a real ``TracerProvider`` (same seeded ids, same
resources) and compares what reaches an exporter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from rolloutscope.collectors.exporter import emit_open_marker
from rolloutscope.vocabulary import Attr, ResourceAttr
from rolloutscope.replay.telemetry import VIRTUAL_EPOCH_NS, SeededIdGenerator, Telemetry

RUN, SCENARIO, SEED = "run-1", "scenario-1", 7


class TracerTelemetry:
    """What ``Telemetry`` did through the SDK's tracer: the reference it must match."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._ids = SeededIdGenerator(SEED)
        self._processor = SimpleSpanProcessor(exporter)
        self._tracers: dict[str, trace.Tracer] = {}
        self._open: dict[int, Any] = {}

    def tracer(self, service: str) -> trace.Tracer:
        if service not in self._tracers:
            provider = TracerProvider(
                resource=Resource({ResourceAttr.SERVICE_NAME: service,
                                   ResourceAttr.RUN_ID: RUN}),
                id_generator=self._ids, shutdown_on_exit=False)
            provider.add_span_processor(self._processor)
            self._tracers[service] = provider.get_tracer("rolloutscope.replay")
        return self._tracers[service]

    def start(self, service: str, name: str, t: float, attrs: Mapping[str, Any],
              parent: Any = None) -> Any:
        ctx = None if parent is None else trace.set_span_in_context(parent)
        span = self.tracer(service).start_span(
            name, context=ctx, attributes={**attrs, Attr.REPLAY_SCENARIO: SCENARIO},
            start_time=_ns(t))
        self._open[id(span)] = span
        return span

    def end(self, span: Any, t: float, attrs: Mapping[str, Any] | None = None) -> None:
        if attrs:
            span.set_attributes(attrs)
        self._open.pop(id(span), None)
        span.end(end_time=_ns(t))

    def event(self, span: Any, name: str, t: float,
              attrs: Mapping[str, Any] | None = None) -> None:
        span.add_event(name, attributes=attrs, timestamp=_ns(t))

    def instant(self, service: str, name: str, t: float, attrs: Mapping[str, Any],
                parent: Any = None, events: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> Any:
        span = self.start(service, name, t, attrs, parent)
        for ev_name, ev_attrs in events:
            self.event(span, ev_name, t, ev_attrs)
        self.end(span, t)
        return span

    def finish(self) -> int:
        for span in list(self._open.values()):
            service = span.resource.attributes[ResourceAttr.SERVICE_NAME]
            emit_open_marker(self.tracer(service), span)
        return len(self._open)


def _ns(t: float) -> int:
    return VIRTUAL_EPOCH_NS + round(t * 1e9)


def _fields(span: ReadableSpan) -> dict[str, Any]:
    return {
        "name": span.name, "context": tuple(span.context), "parent": span.parent,
        "kind": span.kind, "start": span.start_time, "end": span.end_time,
        # the order of the keys is part of what an exporter sees (the store keeps JSON text)
        "attributes": list(span.attributes.items()), "dropped_attributes":
            span.dropped_attributes,
        "events": [(e.name, e.timestamp, list((e.attributes or {}).items()))
                   for e in span.events],
        "dropped_events": span.dropped_events, "links": list(span.links),
        "status": (span.status.status_code, span.status.description),
        "resource": dict(span.resource.attributes),
        "scope": (span.instrumentation_scope.name, span.instrumentation_scope.version),
    }


def _both(operations) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    replay_out, tracer_out = InMemorySpanExporter(), InMemorySpanExporter()
    tel = Telemetry(exporter=replay_out, run_id=RUN, scenario=SCENARIO, seed=SEED)
    ref = TracerTelemetry(tracer_out)
    assert operations(tel) == operations(ref)
    assert tel.finish() == ref.finish()
    return ([_fields(s) for s in replay_out.get_finished_spans()],
            [_fields(s) for s in tracer_out.get_finished_spans()])


def test_roots_children_events_and_late_attributes_match_the_tracer():
    def operations(tel):
        root = tel.start("svc/a", "root", 1.0, {Attr.PROMPT_IDX: 3, Attr.ROLLOUT_ID: "p3"})
        child = tel.start("svc/b", "child", 1.5, {Attr.ROW_IDX: 0, "state": "running"}, root)
        tel.event(child, "ev.plain", 2.0, {Attr.ROLLOUT_ID: "p3", "n": 1, "x": 0.5})
        tel.event(child, "ev.bare", 2.5)
        # set again at the end: the tracer moves the key to the end of the attributes
        tel.end(child, 3.0, {"state": "completed", "extra": True})
        tel.instant("svc/a", "ack", 3.0, {"receipts": 2}, root,
                    events=[("acked", {"i": 0}), ("acked", {"i": 1})])
        tel.end(root, 4.0, {Attr.PROMPT_IDX: 3})
        return None

    replayed, traced = _both(operations)
    assert len(replayed) == 3 and replayed == traced


def test_statuses_follow_the_tracers_rules():
    def operations(tel):
        failed = tel.start("svc", "failed", 0.0, {})
        failed.set_status(Status(StatusCode.ERROR, "boom"))
        failed.set_status(Status(StatusCode.UNSET))  # changes nothing
        tel.end(failed, 1.0)
        ok = tel.start("svc", "ok", 0.0, {})
        ok.set_status(Status(StatusCode.OK))
        ok.set_status(Status(StatusCode.ERROR, "too late"))  # OK is final
        tel.end(ok, 1.0)
        return [failed.is_recording(), ok.is_recording()]

    replayed, traced = _both(operations)
    assert [r["status"][0] for r in replayed] == [StatusCode.ERROR, StatusCode.OK]
    assert replayed == traced


def test_an_ended_span_ignores_events_attributes_and_a_second_end():
    def operations(tel):
        span = tel.start("svc", "once", 0.0, {"a": 1})
        tel.end(span, 1.0, {"b": 2})
        tel.event(span, "late", 2.0, {"c": 3})
        tel.end(span, 3.0, {"d": 4})
        return None

    replayed, traced = _both(operations)
    assert len(replayed) == 1 and replayed == traced


def test_values_that_are_not_plain_scalars_are_cleaned_as_the_tracer_cleans_them():
    def operations(tel):
        span = tel.start("svc", "mixed", 0.0, {"keys": ["a", "b"], "none": None, "n": 1})
        tel.event(span, "ev", 0.5, {"list": [1, 2], "flag": False})
        tel.end(span, 1.0, {"more": ("x", "y"), "n": 2})
        return None

    replayed, traced = _both(operations)
    assert dict(replayed[0]["attributes"])["keys"] == ("a", "b")
    assert replayed == traced


def test_the_event_limit_keeps_the_newest_events_as_the_tracer_does():
    def operations(tel):
        tel.instant("svc", "ack", 0.0, {}, events=[("acked", {"i": i}) for i in range(200)])
        return None

    replayed, traced = _both(operations)
    assert replayed[0]["dropped_events"] == 200 - len(replayed[0]["events"]) > 0
    assert replayed[0]["events"][-1][2] == [("i", 199)]
    assert replayed == traced


def test_intervals_still_open_at_the_end_get_the_tracers_start_markers():
    def operations(tel):
        root = tel.start("svc/a", "open-root", 0.0, {Attr.PROMPT_IDX: 1})
        tel.start("svc/b", "open-child", 1.0, {Attr.ROW_IDX: 2}, root)
        return None

    replayed, traced = _both(operations)
    assert [dict(r["attributes"]).get(Attr.OPEN_MARKER_FOR) is not None for r in replayed] == [
        True, True]
    assert replayed == traced


def test_span_limits_from_the_environment_apply_as_in_the_sdk(monkeypatch):
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "3")
    monkeypatch.setenv("OTEL_SPAN_EVENT_COUNT_LIMIT", "3")

    def operations(tel):
        span = tel.start("svc", "bounded", 0.0, {"a": 1, "b": 2})
        for i in range(5):
            tel.event(span, "ev", 0.1 * i, {"i": i})
        tel.end(span, 1.0, {"c": 3, "d": 4})
        return None

    replayed, traced = _both(operations)
    assert replayed[0]["dropped_attributes"] == 2 and replayed[0]["dropped_events"] == 2
    assert replayed == traced
