"""``otlp-json``: files of OTLP/JSON, one JSON object per line, through the collector's decoder.

Each line is one of:

- an OTLP/JSON export request — ``{"resourceSpans": …}``, ``{"resourceMetrics": …}`` or
  ``{"resourceLogs": …}`` — as the OpenTelemetry Collector's file exporter and OTLP/JSON console
  exporters write them;
- one span as the OpenTelemetry SDK's ``ConsoleSpanExporter`` prints it (``span.to_json()``
  with ``indent=None``: ``name``, ``context.trace_id``, ``start_time`` ISO 8601, …), which is what
  nemo-lens's console exporter emits; it is rewritten as a one-span OTLP/JSON request first.

Either way ``collectors.otlp.decode`` turns it into rows, so imported telemetry is stored exactly
as if a collector had received it. A resource without ``nemo.run.id`` is given the import's run
id. A line the decoder refuses, and each item it leaves out, is a bad record with its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from rolloutscope.collectors.importers.log_lines import parse_iso8601
from rolloutscope.collectors.importers.report import ImportReport
from rolloutscope.collectors.importers.sink import ImportSink
from rolloutscope.collectors.otlp.decode import JSON, decode_request, parse_request
from rolloutscope.collectors.otlp.errors import BadRequestError
from rolloutscope.collectors.otlp.limits import DecodeLimits
from rolloutscope.collectors.otlp.signals import Signal
from rolloutscope.store import RowBatch
from rolloutscope.store.fit import MAX_NS
from rolloutscope.vocabulary import ResourceAttr

_SIGNAL_KEYS = {"resourceSpans": Signal.TRACES, "resource_spans": Signal.TRACES,
                "resourceMetrics": Signal.METRICS, "resource_metrics": Signal.METRICS,
                "resourceLogs": Signal.LOGS, "resource_logs": Signal.LOGS}
_SDK_KINDS = {"SpanKind.INTERNAL": 1, "SpanKind.SERVER": 2, "SpanKind.CLIENT": 3,
              "SpanKind.PRODUCER": 4, "SpanKind.CONSUMER": 5}
_SDK_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}


class NotOtlpError(ValueError):
    """A JSON object that is neither an OTLP/JSON request nor an SDK console span."""


# -- SDK console span → OTLP/JSON ----------------------------------------------------------
def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _kvs(attrs: Any) -> list[dict[str, Any]]:
    if not isinstance(attrs, dict):
        return []
    return [{"key": str(k), "value": _any_value(v)} for k, v in attrs.items()]


def _hex(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise NotOtlpError(f"{what} is missing")
    return value[2:] if value.startswith("0x") else value


def _ns(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise NotOtlpError(f"{what} is missing")
    try:
        return str(parse_iso8601(value))
    except ValueError:
        raise NotOtlpError(f"{what} {value[:40]!r} is not ISO 8601") from None


def sdk_span_request(span: dict[str, Any]) -> dict[str, Any]:
    """A one-span OTLP/JSON trace request from the SDK console exporter's JSON of a span."""
    ctx = span.get("context") or {}
    status = span.get("status") or {}
    out: dict[str, Any] = {
        "traceId": _hex(ctx.get("trace_id"), "context.trace_id"),
        "spanId": _hex(ctx.get("span_id"), "context.span_id"),
        "name": str(span.get("name", "")),
        "kind": _SDK_KINDS.get(span.get("kind"), 1),
        "startTimeUnixNano": _ns(span.get("start_time"), "start_time"),
        "endTimeUnixNano": _ns(span.get("end_time"), "end_time"),
        "attributes": _kvs(span.get("attributes")),
        "events": [{"name": str(e.get("name", "")),
                    "timeUnixNano": _ns(e.get("timestamp"), "event timestamp"),
                    "attributes": _kvs(e.get("attributes"))}
                   for e in span.get("events") or [] if isinstance(e, dict)],
        "links": [{"traceId": _hex((lk.get("context") or {}).get("trace_id"), "link trace_id"),
                   "spanId": _hex((lk.get("context") or {}).get("span_id"), "link span_id"),
                   "attributes": _kvs(lk.get("attributes"))}
                  for lk in span.get("links") or [] if isinstance(lk, dict)],
        "status": {"code": _SDK_STATUS.get(status.get("status_code"), 0),
                   "message": status.get("description") or ""},
    }
    if span.get("parent_id"):
        out["parentSpanId"] = _hex(span["parent_id"], "parent_id")
    resource = (span.get("resource") or {}).get("attributes")
    return {"resourceSpans": [{"resource": {"attributes": _kvs(resource)},
                               "scopeSpans": [{"scope": {}, "spans": [out]}]}]}


def request_of(doc: Any) -> tuple[Signal, dict[str, Any], str]:
    """(signal, OTLP/JSON request, shape) of one line's object."""
    if not isinstance(doc, dict):
        raise NotOtlpError(f"a JSON {type(doc).__name__}, not an object")
    for key, signal in _SIGNAL_KEYS.items():
        if key in doc:
            return signal, doc, "otlp"
    if "name" in doc and isinstance(doc.get("context"), dict):
        return Signal.TRACES, sdk_span_request(doc), "sdk_console_span"
    raise NotOtlpError("neither an OTLP/JSON request (resourceSpans / resourceMetrics / "
                       "resourceLogs) nor an SDK console span")


# -- the request, before decoding ----------------------------------------------------------
def _resources(signal: Signal, request) -> list:
    if signal is Signal.TRACES:
        return list(request.resource_spans)
    if signal is Signal.METRICS:
        return list(request.resource_metrics)
    return list(request.resource_logs)


def _stamp_run_id(resource, run_id: str) -> str:
    for kv in resource.attributes:
        if kv.key == ResourceAttr.RUN_ID and kv.value.string_value:
            return kv.value.string_value
    kv = resource.attributes.add()
    kv.key = ResourceAttr.RUN_ID
    kv.value.string_value = run_id
    return run_id


def _times(signal: Signal, group) -> list[int]:
    if signal is Signal.TRACES:
        return [t for ss in group.scope_spans for s in ss.spans
                for t in (s.start_time_unix_nano, s.end_time_unix_nano) if t]
    if signal is Signal.LOGS:
        return [r.time_unix_nano or r.observed_time_unix_nano
                for sl in group.scope_logs for r in sl.log_records]
    times = []
    for sm in group.scope_metrics:
        for m in sm.metrics:
            kind = m.WhichOneof("data")
            if kind is not None:
                times.extend(p.time_unix_nano for p in getattr(m, kind).data_points)
    return [t for t in times if t]


def import_otlp_json(paths: list[Path], *, store, default_run_id: str, report: ImportReport,
                     limits: DecodeLimits | None = None) -> dict[str, ImportSink]:
    """Reads every line into the store; returns one sink per run id the records named."""
    limits = limits or DecodeLimits()
    sinks: dict[str, ImportSink] = {}
    shapes: dict[str, int] = {}
    for path in paths:
        name = str(path)
        report.files.append(name)
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                report.lines_read += 1
                try:
                    signal, doc, shape = request_of(orjson.loads(line))
                    request = parse_request(signal, orjson.dumps(doc), JSON)
                except orjson.JSONDecodeError as exc:
                    report.add_bad(name, number, f"not JSON ({exc})")
                    continue
                except (NotOtlpError, BadRequestError) as exc:
                    report.add_bad(name, number, str(exc))
                    continue
                for group in _resources(signal, request):
                    run_id = _stamp_run_id(group.resource, default_run_id)
                    sink = sinks.get(run_id)
                    if sink is None:
                        sink = sinks[run_id] = ImportSink(store, run_id)
                    # the run's time range: only times the store holds (the decoder rejects
                    # the items with the others)
                    times = [t for t in _times(signal, group) if t <= MAX_NS]
                    if times:
                        sink.saw(min(times), max(times))
                try:
                    decoded = decode_request(signal, request, limits, RowBatch())
                except BadRequestError as exc:
                    report.add_bad(name, number, exc.message)
                    continue
                for problem in decoded.problems:
                    report.add_bad(name, number, problem)
                report.bad_count += decoded.rejected - len(decoded.problems)
                shapes[shape] = shapes.get(shape, 0) + 1
                report.count(f"{shape}_{signal.value}")
                _count(signal, decoded.accepted, request, report)
                if decoded.batch.rows and sinks:
                    next(iter(sinks.values())).write(decoded.batch)
    return sinks


def _count(signal: Signal, accepted: int, request, report: ImportReport) -> None:
    if signal is Signal.TRACES:
        report.spans += accepted
        report.events += sum(len(s.events) for rs in request.resource_spans
                             for ss in rs.scope_spans for s in ss.spans)
    elif signal is Signal.METRICS:
        report.metrics += accepted
    else:
        report.logs += accepted
