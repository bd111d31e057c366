"""The bytes a real NeMo-Gym 0.7.0 deployment sent (tests/fixtures/gym-0.7.0-otlp-http/), posted
to a real collector the way the deployment posted them, and read back with the official
opentelemetry-proto messages (not rolloutscope's decoder) to say what the views must show."""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

FIXTURE = Path(__file__).parent / "fixtures" / "gym-0.7.0-otlp-http"
RUN_ID = "gym-probe-1796112734"
ROLLOUT_IDS = ("0-0", "1-0", "2-0", "3-0", "4-0", "0-0-a1")
STUB_BACKEND = "http://127.0.0.1:44937"


def bodies(folder: Path = FIXTURE) -> list[tuple[str, bytes]]:
    """(signal, body) of every request, in the order the deployment sent them."""
    out = []
    for path in sorted(folder.glob("*-pb.bin")):
        signal = path.name.split("-")[1]
        out.append((signal, path.read_bytes()))
    return out


def post_capture(http_base: str, folder: Path = FIXTURE) -> int:
    """POST each body to ``/v1/<signal>``; returns how many were accepted whole (a partial
    success or an error status fails the caller's assertion)."""
    accepted = 0
    for signal, body in bodies(folder):
        req = urllib.request.Request(f"{http_base}/v1/{signal}", data=body,
                                     headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200, (signal, resp.status)
            reply = resp.read()
        kind = ExportTraceServiceResponse if signal == "traces" else ExportMetricsServiceResponse
        partial = kind.FromString(reply).partial_success
        assert not partial.error_message, partial.error_message
        accepted += 1
    return accepted


def collect_capture(db: Path) -> Path:
    """A store holding the capture as a real collector wrote it: ``rolloutscope serve`` on
    ``db``, every body posted, stopped cleanly."""
    from tests.collectors.conftest import start_collector

    collector = start_collector(db)
    try:
        assert post_capture(collector.http) == len(bodies())
    finally:
        assert collector.stop() == 0, "".join(collector.output)
    return db


def expected_spans(folder: Path = FIXTURE) -> list[dict]:
    """Every span as the official messages say: name, kind, service, times, attributes."""
    spans = []
    for signal, body in bodies(folder):
        if signal != "traces":
            continue
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = {kv.key: MessageToDict(kv.value) for kv in rs.resource.attributes}
            service = resource["service.name"]["stringValue"]
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attrs = {}
                    for kv in span.attributes:
                        value = MessageToDict(kv.value)
                        attrs[kv.key] = next(iter(value.values())) if value else None
                    spans.append({"name": span.name, "kind": span.kind, "service": service,
                                  "start": span.start_time_unix_nano,
                                  "end": span.end_time_unix_nano, "attrs": attrs,
                                  "trace_id": span.trace_id.hex(),
                                  "span_id": span.span_id.hex(),
                                  "parent": span.parent_span_id.hex() or None})
    return spans


def expected_metric_points(folder: Path = FIXTURE) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for signal, body in bodies(folder):
        if signal != "metrics":
            continue
        for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    kind = metric.WhichOneof("data")
                    counts[metric.name] += len(getattr(metric, kind).data_points)
    return dict(counts)
