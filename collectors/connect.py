"""Point an instrumented process at a running collector, with the stock OTLP exporters.

``connect()`` installs a TracerProvider (and, if asked, a MeterProvider and a LoggerProvider)
exporting over OTLP/HTTP protobuf or OTLP/gRPC, with a BatchSpanProcessor sized so that
20k spans/s do not drop: the SDK default (2,048-span queue, 512-span batches every 5 s) drops
most spans at that rate; the sizes are ``batching.py``'s, which the in-process exporter uses
too, and each stays overridable through the SDK's own ``OTEL_BSP_*`` variables.

Client side: this runs inside the observed process and imports only the standard library,
OpenTelemetry and the vocabulary, never the workbench's DuckDB, Arrow or pandas
(tests/instrument/test_light_client.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from rolloutscope.collectors.batching import batch_span_processor
from rolloutscope.vocabulary import ResourceAttr

Protocol = Literal["http/protobuf", "grpc"]
DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318"
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"
EXPORT_TIMEOUT_S = 30.0  # long enough for a few retries after 429 / RESOURCE_EXHAUSTED


@dataclass
class CollectorConnection:
    tracer_provider: TracerProvider
    meter_provider: Any | None = None
    logger_provider: Any | None = None

    def tracer(self, name: str = "rolloutscope") -> trace.Tracer:
        return self.tracer_provider.get_tracer(name)

    def flush(self, timeout_s: float = 30.0) -> bool:
        ok = self.tracer_provider.force_flush(int(timeout_s * 1000))
        for provider in (self.meter_provider, self.logger_provider):
            if provider is not None:
                ok = provider.force_flush(int(timeout_s * 1000)) and ok
        return ok

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        for provider in (self.meter_provider, self.logger_provider):
            if provider is not None:
                provider.shutdown()


def _exporters(protocol: Protocol):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    elif protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    else:
        raise ValueError(f"protocol must be 'http/protobuf' or 'grpc', got {protocol!r}")
    return OTLPSpanExporter, OTLPMetricExporter, OTLPLogExporter


def connect(
    *, service_name: str, endpoint: str | None = None, protocol: Protocol = "http/protobuf",
    token: str | None = None, run_id: str | None = None,
    resource_attributes: Mapping[str, Any] | None = None, metrics: bool = False,
    logs: bool = False, set_global: bool = False,
) -> CollectorConnection:
    """Install OTel providers exporting to the collector at ``endpoint`` (its base URL)."""
    span_exporter_cls, metric_exporter_cls, log_exporter_cls = _exporters(protocol)
    base = (endpoint or (DEFAULT_GRPC_ENDPOINT if protocol == "grpc"
                         else DEFAULT_HTTP_ENDPOINT)).rstrip("/")
    attrs: dict[str, Any] = {ResourceAttr.SERVICE_NAME: service_name}
    if run_id is not None:
        attrs[ResourceAttr.RUN_ID] = run_id
    attrs.update(resource_attributes or {})
    resource = Resource.create(attrs)

    def exporter(cls, signal: str):
        kw: dict[str, Any] = {"timeout": EXPORT_TIMEOUT_S}
        if protocol == "grpc":
            kw["endpoint"], kw["insecure"] = base, base.startswith("http://")
            if token:
                kw["headers"] = (("authorization", f"Bearer {token}"),)
        else:
            kw["endpoint"] = f"{base}/v1/{signal}"
            if token:
                kw["headers"] = {"Authorization": f"Bearer {token}"}
        return cls(**kw)

    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        batch_span_processor(exporter(span_exporter_cls, "traces")))
    connection = CollectorConnection(tracer_provider)
    if metrics:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        reader = PeriodicExportingMetricReader(exporter(metric_exporter_cls, "metrics"))
        connection.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    if logs:
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        connection.logger_provider = LoggerProvider(resource=resource)
        connection.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(exporter(log_exporter_cls, "logs")))
    if set_global:
        trace.set_tracer_provider(tracer_provider)
    return connection
