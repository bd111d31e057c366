from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from rolloutscope.collectors.exporter import Instrumentation, instrument
from rolloutscope.store import RunStore
from tests.store_kinds import STORE_KINDS, store_target

T0 = 1_800_000_000 * 10**9  # a fixed epoch, so expected rows can be written as offsets
S = 10**9


class SpanKit:
    """Builds spans with explicit times (seconds after T0) through the real SDK and exporter."""

    def __init__(self, inst: Instrumentation) -> None:
        self.inst = inst
        self.tracer = inst.tracer("tests")

    def span(self, name: str, start_s: float, end_s: float | None,
             attrs: Mapping[str, Any] | None = None,
             events: list[tuple[str, float, Mapping[str, Any]]] = (), parent=None,
             error: str | None = None):
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        ctx = trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(name, context=ctx, attributes=dict(attrs or {}),
                                      start_time=T0 + int(start_s * S))
        for ev_name, ts, ev_attrs in events:
            span.add_event(ev_name, dict(ev_attrs), timestamp=T0 + int(ts * S))
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        if end_s is not None:
            span.end(end_time=T0 + int(end_s * S))
        return span

    def open(self, name: str, start_s: float, attrs: Mapping[str, Any] | None = None):
        from rolloutscope.collectors.exporter import emit_open_marker

        span = self.span(name, start_s, None, attrs)
        emit_open_marker(self.tracer, span)
        return span

    def flush(self) -> RunStore:
        assert self.inst.flush()
        return self.inst.store


@pytest.fixture(params=STORE_KINDS)
def store_path(request, tmp_path):
    """A fresh store of each kind (tests/store_kinds.py): every view test runs on both."""
    return store_target(request.param, tmp_path)


@pytest.fixture
def kit(store_path) -> Iterator[SpanKit]:
    inst = instrument(store_path, service_name="tests", run_id="run-1")
    try:
        yield SpanKit(inst)
    finally:
        inst.shutdown()
