"""An instrumented process for the collector tests: the stock OTel Python SDK and exporters.

    sender.py stock PROTOCOL ENDPOINT RUN_ID SPANS LOGS
        spans, metrics and logs through the SDK providers (protocol: http-protobuf,
        http-json, grpc); prints what it sent as JSON.
    sender.py batches PROTOCOL ENDPOINT RUN_ID BATCHES BATCH_SIZE ACK_FILE
        calls the stock span exporter directly, batch after batch; after each batch the
        exporter reports a success for, appends the batch number to ACK_FILE. Stops at the
        first failure. Prints {"acked": ..., "failed": ...}.
    sender.py rounds PROTOCOL ENDPOINT RUN_ID BATCHES BATCH_SIZE ACK_FILE GO_PREFIX
        as ``batches``, with every batch's spans made first, and batch b exported only once
        the file GO_PREFIX.b exists: the test starts each round in every sender at once.
"""

from __future__ import annotations

import json
import logging
import sys

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from rolloutscope.collectors.connect import EXPORT_TIMEOUT_S, connect
from rolloutscope.vocabulary import Attr, ResourceAttr


def json_http_connection(endpoint: str, resource: Resource):
    from opentelemetry.exporter.otlp.json.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.json.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from rolloutscope.collectors.connect import CollectorConnection

    tp = TracerProvider(resource=resource)
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    mp = MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"))])
    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(BatchLogRecordProcessor(
        OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")))
    return CollectorConnection(tp, mp, lp)


def stock(protocol: str, endpoint: str, run_id: str, n_spans: int, n_logs: int) -> dict:
    if protocol == "http-json":
        resource = Resource.create({ResourceAttr.SERVICE_NAME: f"sender-{protocol}",
                                    ResourceAttr.RUN_ID: run_id})
        conn = json_http_connection(endpoint, resource)
    else:
        conn = connect(service_name=f"sender-{protocol}", endpoint=endpoint, run_id=run_id,
                       protocol="grpc" if protocol == "grpc" else "http/protobuf",
                       metrics=True, logs=True)
    tracer = conn.tracer("sender")
    with tracer.start_as_current_span("gym.rollout.batch") as root:
        root.set_attribute("sender.protocol", protocol)
        for i in range(n_spans - 1):
            with tracer.start_as_current_span("gym.rollout") as span:
                span.set_attribute(Attr.ROLLOUT_ID, f"{run_id}-r{i}-a1")
                span.set_attribute("sender.index", i)
                span.set_attribute("sender.ratio", i / 4)
                span.set_attribute("sender.flags", [True, False])
                span.add_event("gym.rollout.ack", {"sender.index": i})
                if i % 10 == 0:
                    span.set_status(Status(StatusCode.ERROR, f"failure {i}"))
    meter = conn.meter_provider.get_meter("sender")
    counter = meter.create_counter("sender.requests", unit="{request}")
    histogram = meter.create_histogram("sender.latency_ms", unit="ms")
    for i in range(10):
        counter.add(1, {"route": "/run"})
        histogram.record(float(i), {"route": "/run"})
    from opentelemetry.sdk._logs import LoggingHandler

    logger = logging.getLogger(f"sender.{protocol}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(LoggingHandler(logger_provider=conn.logger_provider))
    for i in range(n_logs):
        logger.warning("sender log line %d", i)
    ok = conn.flush()
    conn.shutdown()
    return {"spans": n_spans, "logs": n_logs, "counter_total": 10, "histogram_count": 10,
            "flushed": ok}


def span_exporter(protocol: str, endpoint: str):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        return OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=EXPORT_TIMEOUT_S)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=EXPORT_TIMEOUT_S)


def batches(protocol: str, endpoint: str, run_id: str, n_batches: int, size: int,
            ack_file: str) -> dict:
    provider = TracerProvider(resource=Resource.create(
        {ResourceAttr.SERVICE_NAME: "sender-batches", ResourceAttr.RUN_ID: run_id}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("sender")
    exporter = span_exporter(protocol, endpoint)
    acked = failed = 0
    with open(ack_file, "a") as acks:
        for b in range(n_batches):
            for j in range(size):
                tracer.start_span("sender.item", attributes={Attr.PROMPT_IDX: b, "j": j}).end()
            spans = memory.get_finished_spans()
            memory.clear()
            if exporter.export(spans) is not SpanExportResult.SUCCESS:
                failed += 1
                break
            acked += 1
            acks.write(f"{b}\n")
            acks.flush()
    exporter.shutdown()
    return {"acked": acked, "failed": failed}


def rounds(protocol: str, endpoint: str, run_id: str, n_batches: int, size: int,
           ack_file: str, go_prefix: str) -> dict:
    import os
    import time

    provider = TracerProvider(resource=Resource.create(
        {ResourceAttr.SERVICE_NAME: "sender-rounds", ResourceAttr.RUN_ID: run_id}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("sender")
    made = []
    for b in range(n_batches):
        for j in range(size):
            tracer.start_span("sender.item", attributes={Attr.PROMPT_IDX: b, "j": j}).end()
        made.append(memory.get_finished_spans())
        memory.clear()
    exporter = span_exporter(protocol, endpoint)
    acked = failed = 0
    with open(ack_file, "a") as acks:
        for b, spans in enumerate(made):
            while not os.path.exists(f"{go_prefix}.{b}"):
                time.sleep(0.005)  # the test's signal comes from another process
            if exporter.export(spans) is not SpanExportResult.SUCCESS:
                failed += 1
                break
            acked += 1
            acks.write(f"{b}\n")
            acks.flush()
    exporter.shutdown()
    return {"acked": acked, "failed": failed}


if __name__ == "__main__":
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    mode, *rest = sys.argv[1:]
    if mode == "stock":
        result = stock(rest[0], rest[1], rest[2], int(rest[3]), int(rest[4]))
    elif mode == "rounds":
        result = rounds(rest[0], rest[1], rest[2], int(rest[3]), int(rest[4]), rest[5], rest[6])
    else:
        result = batches(rest[0], rest[1], rest[2], int(rest[3]), int(rest[4]), rest[5])
    print(json.dumps(result), flush=True)
