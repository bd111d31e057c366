"""Builders of OTLP requests for the tests (official opentelemetry-proto messages)."""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rolloutscope.collectors.otlp.encode import fill_attributes
from rolloutscope.vocabulary import ResourceAttr

T0 = 1_700_000_000_000_000_000


def span_request(n: int = 1, *, run_id: str = "fixture", resource: dict | None = None,
                 **fields: Any) -> ExportTraceServiceRequest:
    """``n`` valid spans; ``fields`` override span fields (``attributes`` a dict)."""
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    fill_attributes(rs.resource.attributes,
                    resource or {ResourceAttr.SERVICE_NAME: "fixture", ResourceAttr.RUN_ID: run_id})
    ss = rs.scope_spans.add()
    ss.scope.name = "fixture"
    for i in range(n):
        span = ss.spans.add()
        span.trace_id = os.urandom(16)
        span.span_id = os.urandom(8)
        span.name = "fixture.span"
        span.kind = 1
        span.start_time_unix_nano = T0 + i
        span.end_time_unix_nano = T0 + i + 1000
        attributes = dict(fields.get("attributes", {"i": i}))
        fill_attributes(span.attributes, attributes)
        for key, value in fields.items():
            if key == "attributes":
                continue
            if key == "events":
                for name in value:
                    span.events.add(name=name, time_unix_nano=T0)
            elif key == "links":
                for trace_id, span_id in value:
                    span.links.add(trace_id=trace_id, span_id=span_id)
            else:
                setattr(span, key, value)
    return request


def metric_request(*, time_unix_nano: int = T0) -> ExportMetricsServiceRequest:
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "fixture.gauge"
    point = metric.gauge.data_points.add()
    point.time_unix_nano = time_unix_nano
    point.as_double = 1.5
    return request


def log_request(*, trace_id: bytes = b"") -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add()
    record.time_unix_nano = T0
    record.body.string_value = "fixture log"
    record.trace_id = trace_id
    return request
