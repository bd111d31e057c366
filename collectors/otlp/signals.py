"""The three OTLP signals and their request/response messages (official opentelemetry-proto)."""

from __future__ import annotations

from enum import StrEnum

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


class Signal(StrEnum):
    TRACES = "traces"
    METRICS = "metrics"
    LOGS = "logs"

    @property
    def request_type(self):
        return _REQUEST[self]

    @property
    def response_type(self):
        return _RESPONSE[self]

    @property
    def item_noun(self) -> str:
        """What one item of this signal is called in messages and partial-success fields."""
        return _NOUN[self]

    @property
    def grpc_service(self) -> str:
        return _GRPC_SERVICE[self]


_REQUEST = {
    Signal.TRACES: trace_service_pb2.ExportTraceServiceRequest,
    Signal.METRICS: metrics_service_pb2.ExportMetricsServiceRequest,
    Signal.LOGS: logs_service_pb2.ExportLogsServiceRequest,
}
_RESPONSE = {
    Signal.TRACES: trace_service_pb2.ExportTraceServiceResponse,
    Signal.METRICS: metrics_service_pb2.ExportMetricsServiceResponse,
    Signal.LOGS: logs_service_pb2.ExportLogsServiceResponse,
}
_NOUN = {Signal.TRACES: "spans", Signal.METRICS: "data_points", Signal.LOGS: "log_records"}
_GRPC_SERVICE = {
    Signal.TRACES: "opentelemetry.proto.collector.trace.v1.TraceService",
    Signal.METRICS: "opentelemetry.proto.collector.metrics.v1.MetricsService",
    Signal.LOGS: "opentelemetry.proto.collector.logs.v1.LogsService",
}
