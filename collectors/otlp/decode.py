"""OTLP request → ``RowBatch``: pure functions, no I/O, no clock.

``parse_request`` turns a body (protobuf or OTLP/JSON, already decompressed) into the official
``opentelemetry-proto`` request message; ``decode_request`` turns that message into rows. Both
raise ``BadRequestError`` naming the problem when nothing usable is in the request. Items that
are individually invalid (an id of the wrong length, an end before the start, an absurd
attribute) are left out and counted, so a request that is partly valid is answered with an OTLP
partial success; one with no valid item at all is a bad request. ``encode.py`` is the inverse,
for round-trip tests.

Spans go through ``RowBatch.append_span``, the one place where hot attributes are promoted and open
interval markers are filed. Every value is fitted to its column there (``rolloutscope.store.fit``):
an item with a value that cannot be stored (a time past 2^63 − 1 ns, an attempt of 2^40, a
checkpoint id sent as a list) is rejected like any other invalid item, so it never reaches a
commit; a value coerced to fit is named in the partial-success message. A span repeated within
one request (same trace_id and span_id) is kept once, the first time.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from rolloutscope.collectors.otlp.errors import BadRequestError
from rolloutscope.collectors.otlp.limits import DecodeLimits
from rolloutscope.collectors.otlp.signals import Signal
from rolloutscope.store.fit import MAX_NS, ColumnFitError, check_time, fit_attribute, time_problem
from rolloutscope.store.rows import RowBatch, attributes_json
from rolloutscope.vocabulary import Attr, ResourceAttr

PROTOBUF = "protobuf"
JSON = "json"

# OTLP enum numbers → the names the SDK-side exporter stores (SpanKind.name, StatusCode.name).
SPAN_KINDS = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS_CODES = ("UNSET", "OK", "ERROR")
_MAX_PROBLEMS = 5  # distinct problems quoted in one partial-success message


class ItemRejected(Exception):
    """One span / data point / log record is invalid; it is left out and counted."""


@dataclass
class Decoded:
    """What one request contributed: rows to commit, and what was left out and why."""

    batch: RowBatch
    accepted: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)
    nbytes: int = 0  # the body's size: what the writer's group commit counts it as

    def reject(self, what: str, why: str) -> None:
        self.rejected += 1
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(f"{what}: {why}")

    def message(self, noun: str) -> str:
        """The partial-success error message: how many items were rejected and the first
        reasons, then how many values were coerced to fit their columns (``fit``) and how.
        Empty when everything was stored as sent."""
        parts = []
        if self.rejected:
            total = self.accepted + self.rejected
            more = " …" if self.rejected > len(self.problems) else ""
            parts.append(f"rejected {self.rejected} of {total} {noun}: "
                         + "; ".join(self.problems) + more)
        coerced, notes = self.batch.coerced, self.batch.notes
        if coerced:
            more = " …" if coerced > len(notes) else ""
            parts.append(f"coerced {coerced} value{'s' if coerced > 1 else ''} to fit "
                         f"{'their columns' if coerced > 1 else 'its column'}: "
                         + "; ".join(notes) + more)
        return "; ".join(parts) if len(parts) < 2 else f"{parts[0]}. {parts[1]}"


# -- body → message ----------------------------------------------------------------------
def parse_request(signal: Signal, body: bytes, encoding: str):
    """The request message for ``signal`` from a decompressed body."""
    if encoding == PROTOBUF:
        try:
            return signal.request_type.FromString(body)
        except DecodeError as exc:
            detail = str(exc).rsplit(": ", 1)[-1]
            raise BadRequestError(
                "malformed_protobuf",
                f"body is not a valid protobuf {signal.request_type.DESCRIPTOR.name}: {detail}",
            ) from None
    if encoding == JSON:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            problem = "invalid_utf8" if "utf-8" in str(exc).lower() else "invalid_json"
            raise BadRequestError(problem, f"body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise BadRequestError("invalid_json",
                                  f"OTLP/JSON body must be an object, got {type(doc).__name__}")
        _hex_ids_to_base64(doc)
        try:
            return json_format.ParseDict(doc, signal.request_type(), ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise BadRequestError("otlp_json_schema",
                                  f"JSON does not match the OTLP {signal} schema: {exc}") from None
    raise ValueError(f"unknown encoding {encoding!r}")


_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
_CONTAINERS = ("resourceSpans", "resource_spans", "scopeSpans", "scope_spans", "spans", "links",
               "resourceLogs", "resource_logs", "scopeLogs", "scope_logs", "logRecords",
               "log_records", "resourceMetrics", "resource_metrics", "scopeMetrics",
               "scope_metrics", "metrics", "gauge", "sum", "histogram", "exponentialHistogram",
               "exponential_histogram", "summary", "dataPoints", "data_points", "exemplars")


def _hex_ids_to_base64(node: Any) -> None:
    """OTLP/JSON writes ids as hex where protobuf's JSON mapping expects base64."""
    if isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)
        return
    if not isinstance(node, dict):
        return
    for key in _ID_KEYS:
        value = node.get(key)
        if isinstance(value, str):
            try:
                raw = bytes.fromhex(value)
            except ValueError:
                raise BadRequestError("bad_id", f"{key} {value[:40]!r} is not hex") from None
            node[key] = base64.b64encode(raw).decode()
    for key in _CONTAINERS:
        child = node.get(key)
        if child is not None:
            _hex_ids_to_base64(child)


# -- values ------------------------------------------------------------------------------
_SCALAR_KINDS = frozenset(("int_value", "double_value", "bool_value"))


class _Values:
    """AnyValue/KeyValue → Python, enforcing the attribute limits."""

    __slots__ = ("max_attrs", "max_bytes")

    def __init__(self, limits: DecodeLimits) -> None:
        self.max_attrs = limits.max_attributes
        self.max_bytes = limits.max_attribute_value_bytes

    def attrs(self, kvs) -> dict[str, Any]:
        if not kvs:
            return {}
        if len(kvs) > self.max_attrs:
            raise ItemRejected(f"{len(kvs)} attributes, limit {self.max_attrs}")
        # Inlined for the common scalar kinds: this loop runs for every attribute of every
        # span, and a method call per value costs as much as the rest of the decode.
        out = {}
        max_bytes = self.max_bytes
        for kv in kvs:
            v = kv.value
            kind = v.WhichOneof("value")
            if kind == "string_value":
                s = v.string_value
                if len(s) > max_bytes:
                    raise ItemRejected(f"attribute {kv.key[:64]!r} is {len(s)} characters, "
                                       f"limit {max_bytes}")
                out[kv.key] = s
            elif kind in _SCALAR_KINDS:
                out[kv.key] = getattr(v, kind)
            else:
                out[kv.key] = self.value(v, kv.key)
        return out

    def value(self, v, key: str) -> Any:
        kind = v.WhichOneof("value")
        if kind == "string_value":
            s = v.string_value
            if len(s) > self.max_bytes:
                raise ItemRejected(f"attribute {key[:64]!r} is {len(s)} characters, "
                                   f"limit {self.max_bytes}")
            return s
        if kind == "int_value":
            return v.int_value
        if kind == "double_value":
            return v.double_value
        if kind == "bool_value":
            return v.bool_value
        if kind == "array_value":
            values = v.array_value.values
            if len(values) > self.max_attrs:
                raise ItemRejected(f"attribute {key[:64]!r} has {len(values)} elements, "
                                   f"limit {self.max_attrs}")
            if v.ByteSize() > self.max_bytes:
                raise ItemRejected(f"attribute {key[:64]!r} is {v.ByteSize()} bytes, "
                                   f"limit {self.max_bytes}")
            return [self.value(x, key) for x in values]
        if kind == "kvlist_value":
            if v.ByteSize() > self.max_bytes:
                raise ItemRejected(f"attribute {key[:64]!r} is {v.ByteSize()} bytes, "
                                   f"limit {self.max_bytes}")
            return self.attrs(v.kvlist_value.values)
        if kind == "bytes_value":
            b = v.bytes_value
            if len(b) > self.max_bytes:
                raise ItemRejected(f"attribute {key[:64]!r} is {len(b)} bytes, "
                                   f"limit {self.max_bytes}")
            return b
        return None


@dataclass(frozen=True)
class _Resource:
    json: str | None
    service: str | None
    run_id: str | None
    problem: str | None = None  # why none of this resource's items can be stored


def _resource(resource, values: _Values, batch: RowBatch) -> _Resource:
    try:
        attrs = values.attrs(resource.attributes)
    except ItemRejected as exc:
        raise BadRequestError("resource_attributes", f"resource: {exc}") from None
    notes: list[str] = []
    try:
        service = fit_attribute(ResourceAttr.SERVICE_NAME,
                                attrs.get(ResourceAttr.SERVICE_NAME), notes)
        run_id = fit_attribute(ResourceAttr.RUN_ID, attrs.get(ResourceAttr.RUN_ID), notes)
        resource_json = attributes_json(attrs)
    except ColumnFitError as exc:
        return _Resource(None, None, None, f"resource {exc}")
    if notes:
        batch._note("resource", notes)
    return _Resource(resource_json, service, run_id)


def _count_items(signal: Signal, request) -> int:
    if signal is Signal.TRACES:
        return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    if signal is Signal.LOGS:
        return sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)
    return sum(_points(m)[1].__len__() for rm in request.resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics)


# -- message → rows ----------------------------------------------------------------------
def decode_request(signal: Signal, request, limits: DecodeLimits,
                   batch: RowBatch | None = None) -> Decoded:
    """Rows for every valid item of ``request``. Raises ``BadRequestError`` when the request
    is over the item limit, or carries items and none of them is valid."""
    total = _count_items(signal, request)
    if total > limits.max_items_per_request:
        raise BadRequestError("too_many_items", f"request carries {total} {signal.item_noun}, "
                                                f"limit {limits.max_items_per_request}")
    decoded = Decoded(RowBatch())
    values = _Values(limits)
    if signal is Signal.TRACES:
        if not _decode_traces(request, decoded, values, limits):
            decoded = Decoded(RowBatch())
            _decode_traces(request, decoded, values, limits, dedupe=True)
    elif signal is Signal.METRICS:
        _decode_metrics(request, decoded, values)
    else:
        _decode_logs(request, decoded, values)
    if decoded.rejected and not decoded.accepted:
        raise BadRequestError("no_valid_items", decoded.message(signal.item_noun))
    if batch is not None:  # the caller's batch gets this request's rows, all or none
        batch.extend(decoded.batch)
        batch.notes.extend(decoded.batch.notes[:max(0, 5 - len(batch.notes))])
        decoded.batch = batch
    return decoded


def _span_problem(span, limits: DecodeLimits) -> str | None:
    """Why a span is invalid, or None. The decode loop checks the same rules faster and asks
    here only for the message."""
    if len(span.trace_id) != 16:
        return f"trace_id must be 16 bytes, got {len(span.trace_id)}"
    if len(span.span_id) != 8:
        return f"span_id must be 8 bytes, got {len(span.span_id)}"
    if span.trace_id == _ZERO_TRACE or span.span_id == _ZERO_SPAN:
        return "trace_id/span_id must not be all zeros"
    if len(span.parent_span_id) not in (0, 8):
        return f"parent_span_id must be empty or 8 bytes, got {len(span.parent_span_id)}"
    if span.start_time_unix_nano == 0:
        return "start_time_unix_nano is missing"
    if span.end_time_unix_nano < span.start_time_unix_nano:
        return (f"end_time_unix_nano {span.end_time_unix_nano} is before "
                f"start_time_unix_nano {span.start_time_unix_nano}")
    if span.end_time_unix_nano > MAX_NS:
        return time_problem(span.end_time_unix_nano, "end_time_unix_nano")
    if len(span.events) > limits.max_events_per_span:
        return f"{len(span.events)} events, limit {limits.max_events_per_span}"
    if len(span.links) > limits.max_links_per_span:
        return f"{len(span.links)} links, limit {limits.max_links_per_span}"
    return None


_ZERO_TRACE, _ZERO_SPAN = bytes(16), bytes(8)
DUPLICATE = ("duplicate of an earlier span in this request (same trace_id and span_id); "
             "the first is kept")


def _decode_traces(request, decoded: Decoded, values: _Values, limits: DecodeLimits, *,
                   dedupe: bool = False) -> bool:
    """Decode every span into ``decoded``; False when two spans taken share a span id (the
    caller then decodes again with ``dedupe``)."""
    batch = decoded.batch
    append = batch.append_span
    attrs = values.attrs
    max_events, max_links = limits.max_events_per_span, limits.max_links_per_span
    max_ns = MAX_NS
    # A span repeated within one request is kept once. The ids of the spans taken are listed
    # (cheap); only when two span ids are equal does the decode run again (``dedupe``) with a
    # map of span_id -> trace_id (span ids are random 64-bit: a collision across traces is
    # legal, and kept).
    taken: list[bytes] = []
    take = taken.append
    seen: dict[bytes, bytes] = {}
    collisions: set[bytes] = set()
    accepted = 0
    for rs in request.resource_spans:
        res = _resource(rs.resource, values, batch)
        run_id, service, resource_json, unfit = res.run_id, res.service, res.json, res.problem
        for ss in rs.scope_spans:
            scope = ss.scope.name or None
            for span in ss.spans:
                trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
                start, end = span.start_time_unix_nano, span.end_time_unix_nano
                events, links = span.events, span.links
                if not (len(trace_id) == 16 and len(span_id) == 8 and len(parent) in (0, 8)
                        and trace_id != _ZERO_TRACE and span_id != _ZERO_SPAN
                        and 0 < start <= end <= max_ns
                        and len(events) <= max_events and len(links) <= max_links):
                    decoded.reject(f"span {span_id.hex() or '-'}", _span_problem(span, limits))
                    continue
                span_hex = span_id.hex()
                if unfit is not None:
                    decoded.reject(f"span {span_hex}", unfit)
                    continue
                if dedupe:
                    first_trace = seen.setdefault(span_id, trace_id)
                    if first_trace is not trace_id:
                        if first_trace == trace_id or trace_id + span_id in collisions:
                            decoded.reject(f"span {span_hex}", DUPLICATE)
                            continue
                        collisions.add(trace_id + span_id)
                try:
                    span_attrs = attrs(span.attributes)
                    span_events = [(e.name, e.time_unix_nano, attrs(e.attributes))
                                   for e in events] if events else None
                    span_links = [(_link_ids(lk), lk.span_id.hex(), attrs(lk.attributes))
                                  for lk in links] if links else None
                    kind, status = span.kind, span.status
                    code = status.code
                    append(run_id, trace_id.hex(), span_hex, parent.hex() or None, span.name,
                           SPAN_KINDS[kind] if kind < 6 else "INTERNAL", service, start, end,
                           STATUS_CODES[code] if code < 3 else "UNSET", status.message or None,
                           span_attrs, resource_json, scope, span_events, span_links)
                except (ItemRejected, ColumnFitError) as exc:
                    # a rejected span does not count as seen: a later valid copy is kept
                    if seen.get(span_id) is trace_id:
                        del seen[span_id]
                    decoded.reject(f"span {span_hex}", str(exc))
                    continue
                take(span_id)
                accepted += 1
    decoded.accepted += accepted
    return dedupe or len(set(taken)) == len(taken)


def _link_ids(link) -> str:
    if len(link.trace_id) != 16 or len(link.span_id) != 8:
        raise ItemRejected(f"link ids must be 16 and 8 bytes, got {len(link.trace_id)} and "
                           f"{len(link.span_id)}")
    return link.trace_id.hex()


def _points(metric) -> tuple[str, Any]:
    kind = metric.WhichOneof("data")
    if kind is None:
        return "empty", ()
    return kind, getattr(metric, kind).data_points


def _decode_metrics(request, decoded: Decoded, values: _Values) -> None:
    batch = decoded.batch
    add = batch.add_row
    for rm in request.resource_metrics:
        res = _resource(rm.resource, values, batch)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind, points = _points(metric)
                for p in points:
                    what = f"data point of {metric.name[:80]!r}"
                    if p.time_unix_nano == 0:
                        decoded.reject(what, "time_unix_nano is missing")
                        continue
                    if res.problem is not None:
                        decoded.reject(what, res.problem)
                        continue
                    notes: list[str] = []
                    try:
                        check_time(p.time_unix_nano, "time_unix_nano")
                        p_attrs = values.attrs(p.attributes)
                        step = p_attrs.get(Attr.METRIC_STEP)
                        row = dict(run_id=res.run_id, service=res.service, name=metric.name,
                                   kind=kind, ts_ns=p.time_unix_nano, unit=metric.unit or None,
                                   step=None if step is None else fit_attribute(
                                       Attr.METRIC_STEP, step, notes),
                                   attributes=attributes_json(p_attrs), resource=res.json)
                        if kind in ("gauge", "sum"):
                            number = p.WhichOneof("value")
                            row["value"] = None if number is None else float(getattr(p, number))
                        else:  # histogram, exponential_histogram, summary
                            row["count"] = p.count
                            row["sum"] = p.sum
                            if kind != "summary":
                                row["min"] = p.min if p.HasField("min") else None
                                row["max"] = p.max if p.HasField("max") else None
                        add("metrics", **row)
                    except (ItemRejected, ColumnFitError) as exc:
                        decoded.reject(what, str(exc))
                        continue
                    if notes:
                        batch._note(what, notes)
                    decoded.accepted += 1


_SEVERITY = ("UNSPECIFIED", "TRACE", "TRACE2", "TRACE3", "TRACE4", "DEBUG", "DEBUG2", "DEBUG3",
             "DEBUG4", "INFO", "INFO2", "INFO3", "INFO4", "WARN", "WARN2", "WARN3", "WARN4",
             "ERROR", "ERROR2", "ERROR3", "ERROR4", "FATAL", "FATAL2", "FATAL3", "FATAL4")


def _decode_logs(request, decoded: Decoded, values: _Values) -> None:
    add = decoded.batch.add_row
    for rl in request.resource_logs:
        res = _resource(rl.resource, values, decoded.batch)
        for sl in rl.scope_logs:
            for rec in sl.log_records:
                what = "log record"
                if len(rec.trace_id) not in (0, 16) or len(rec.span_id) not in (0, 8):
                    decoded.reject(what, f"trace_id/span_id must be 16/8 bytes or empty, got "
                                         f"{len(rec.trace_id)}/{len(rec.span_id)}")
                    continue
                ts = rec.time_unix_nano or rec.observed_time_unix_nano
                if ts == 0:
                    decoded.reject(what, "neither time_unix_nano nor observed_time_unix_nano")
                    continue
                if res.problem is not None:
                    decoded.reject(what, res.problem)
                    continue
                try:
                    check_time(ts, "time_unix_nano" if rec.time_unix_nano
                               else "observed_time_unix_nano")
                    r_attrs = values.attrs(rec.attributes)
                    body = values.value(rec.body, "body") if rec.HasField("body") else None
                    if body is not None and not isinstance(body, str):
                        body = attributes_json({"body": body})[len('{"body":'):-1]
                    severity = rec.severity_text or (
                        _SEVERITY[rec.severity_number] if 0 < rec.severity_number < 25 else None)
                    add("logs", run_id=res.run_id, service=res.service, ts_ns=ts,
                        severity=severity, body=body, trace_id=rec.trace_id.hex() or None,
                        span_id=rec.span_id.hex() or None, attributes=attributes_json(r_attrs),
                        resource=res.json)
                except (ItemRejected, ColumnFitError) as exc:
                    decoded.reject(what, str(exc))
                    continue
                decoded.accepted += 1


def decode_body(signal: Signal, body: bytes, encoding: str, limits: DecodeLimits) -> Decoded:
    """``parse_request`` then ``decode_request``: bytes to rows in one call."""
    return decode_request(signal, parse_request(signal, body, encoding), limits)


def hex_id(value: str) -> bytes:
    """An id written as hex (as OTLP/JSON and the store write them) back to bytes."""
    try:
        return binascii.unhexlify(value)
    except (binascii.Error, ValueError):
        raise BadRequestError("bad_id", f"{value[:40]!r} is not hex") from None
