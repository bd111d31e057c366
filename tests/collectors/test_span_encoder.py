"""The exporter's encoder reads a ReadableSpan's fields directly: the rows are the ones its public
properties give, whatever kind of span, status, event or link it carries."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from rolloutscope.collectors import exporter
from rolloutscope.collectors.exporter import SpanEncoder
from rolloutscope.replay.telemetry import Telemetry
from rolloutscope.store.schema import COLUMNS
from rolloutscope.vocabulary import Attr, ResourceAttr

T0 = 1_800_000_000 * 10**9


def sdk_tracer(scope: str) -> tuple[InMemorySpanExporter, trace.Tracer]:
    """A tracer of the SDK (service ``svc``, run ``run-1``) whose ended spans go to the
    returned in-memory exporter."""
    out = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({ResourceAttr.SERVICE_NAME: "svc",
                                                 ResourceAttr.RUN_ID: "run-1"}))
    provider.add_span_processor(SimpleSpanProcessor(out))
    return out, provider.get_tracer(scope, "1.2")


def _sdk_spans() -> list[ReadableSpan]:
    out, tracer = sdk_tracer("tests.encoder")
    root = tracer.start_span("root", kind=SpanKind.SERVER, start_time=T0,
                             attributes={Attr.PROMPT_IDX: 7, "list": (1, 2)})
    child = tracer.start_span("child", context=trace.set_span_in_context(root),
                              kind=SpanKind.CLIENT, start_time=T0 + 1,
                              links=[Link(root.get_span_context(), {"why": "caused"})])
    for i in range(3):
        child.add_event(f"event-{i}", {"i": i, "s": "x"}, timestamp=T0 + 2 + i)
    child.set_status(Status(StatusCode.ERROR, "boom"))
    child.end(end_time=T0 + 9)
    root.set_status(Status(StatusCode.OK))
    root.end(end_time=T0 + 10)
    return list(out.get_finished_spans())


def _replay_spans() -> list[ReadableSpan]:
    out = InMemorySpanExporter()
    tel = Telemetry(exporter=out, run_id="run-2", scenario="s", seed=3)
    root = tel.start("svc/a", "root", 1.0, {Attr.PROMPT_IDX: 3})
    child = tel.start("svc/a", "child", 1.5, {Attr.ROW_IDX: 0}, root)
    tel.event(child, "ev", 2.0, {Attr.ROLLOUT_ID: "p3"})
    child.set_status(Status(StatusCode.ERROR, "failed"))
    tel.end(child, 3.0, {"state": "done"})
    tel.end(root, 4.0)
    tel.finish()
    return list(out.get_finished_spans())


def _rows(spans: list[ReadableSpan]) -> dict[str, list[tuple]]:
    encoder = SpanEncoder()
    batch = encoder.encode(spans)
    assert encoder.rejected == 0
    # rows in the order they were added: the compiled encoder's first, then the spans it left
    # to the Python loop (a link, an event with join keys)
    return {t: rows for t in ("spans", "span_events", "span_links")
            if (rows := batch.row_tuples(t))}


def _unordered(tables: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    return {t: sorted(rows, key=repr) for t, rows in tables.items()}


def test_the_installed_sdk_is_read_field_by_field():
    assert exporter._DIRECT_READS


def test_spans_read_field_by_field_give_the_rows_their_public_properties_give(monkeypatch):
    spans = _sdk_spans() + _replay_spans()
    direct = _unordered(_rows(spans))
    assert set(direct) == {"spans", "span_events", "span_links"}
    monkeypatch.setattr(exporter, "_DIRECT_READS", False)
    assert _unordered(_rows(spans)) == direct


class Renamed(ReadableSpan):
    """A span type that overrides a public property (its name)."""

    @property
    def name(self) -> str:
        return "renamed"


def renamed(span: ReadableSpan) -> Renamed:
    """``span`` as a ``Renamed``."""
    return Renamed(name=span.name, context=span.context, parent=span.parent,
                   resource=span.resource, attributes=span.attributes, events=span.events,
                   links=span.links, kind=span.kind, status=span.status,
                   start_time=span.start_time, end_time=span.end_time,
                   instrumentation_scope=span.instrumentation_scope)


def test_a_span_type_that_overrides_a_property_is_read_through_it():
    span = _sdk_spans()[0]
    rows = _rows([renamed(span)])["spans"]
    assert len(rows) == 1 and "renamed" in rows[0] and span.name not in rows[0]


def test_spans_of_several_scopes_and_resources_in_one_batch_keep_each_their_own():
    out = InMemorySpanExporter()
    tracers = []
    for service in ("svc-a", "svc-b"):
        provider = TracerProvider(resource=Resource({ResourceAttr.SERVICE_NAME: service}))
        provider.add_span_processor(SimpleSpanProcessor(out))
        tracers += [provider.get_tracer("scope.one"), provider.get_tracer("scope.two")]
    for i in range(12):  # each span's scope and resource differ from the previous span's
        tracers[(i * 3) % 4].start_span(f"s{i}", start_time=T0 + i).end(end_time=T0 + i + 1)
    spans = list(out.get_finished_spans())
    unscoped = spans[0]
    spans.insert(5, ReadableSpan(name="unscoped", context=unscoped.context,
                                 resource=unscoped.resource, start_time=T0, end_time=T0 + 1))
    rows = _rows(spans)["spans"]
    name, service, scope = (COLUMNS["spans"].index(c) for c in ("name", "service", "scope"))
    assert [(row[name], row[service], row[scope]) for row in rows] == [
        (s.name, s.resource.attributes[ResourceAttr.SERVICE_NAME],
         None if s.instrumentation_scope is None else s.instrumentation_scope.name)
        for s in spans]
    assert {row[scope] for row in rows} == {"scope.one", "scope.two", None}
