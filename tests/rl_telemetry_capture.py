"""The bytes NeMo-RL's own telemetry sent (tests/fixtures/nemo-rl-telemetry-otlp-http/: RL #3655's
nemo_rl.telemetry on nemo-lens 0.1.0, an async GRPO loop of four steps), posted to a real
collector the way they were sent, and read back with the official opentelemetry-proto messages
(not rolloutscope's decoder) to say what ``train_steps`` must show."""

from __future__ import annotations

from pathlib import Path

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.gym_capture import bodies, post_capture

FIXTURE = Path(__file__).parent / "fixtures" / "nemo-rl-telemetry-otlp-http"
RUN_ID = "rl-telemetry-probe"


def collect_rl_capture(db: Path) -> Path:
    """A store holding the capture as ``rolloutscope serve`` wrote it from the posted bodies."""
    from tests.collectors.conftest import start_collector

    collector = start_collector(db)
    try:
        assert post_capture(collector.http, FIXTURE) == len(bodies(FIXTURE))
    finally:
        assert collector.stop() == 0, "".join(collector.output)
    return db


def decoded_spans(folder: Path = FIXTURE) -> list[dict]:
    """Every span of the capture: name, ids, times, attributes (their values as the protobuf
    holds them: an int as an int) and the resource's attributes."""
    out = []
    for _, body in bodies(folder):
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    out.append({"name": span.name, "span_id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex() or None,
                                "start": span.start_time_unix_nano,
                                "end": span.end_time_unix_nano,
                                "attrs": {kv.key: _value(kv.value) for kv in span.attributes},
                                "resource": resource})
    return out


def _value(any_value):
    kind, value = next(iter(MessageToDict(any_value).items()))
    return int(value) if kind == "intValue" else value
