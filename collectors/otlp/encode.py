"""Rows → OTLP request: the inverse of ``decode.py``, for round-trip tests, fixtures and the
benchmark. Pure functions.

``encode_spans`` rebuilds an ``ExportTraceServiceRequest`` from a ``RowBatch``'s ``spans``,
``span_events`` and ``span_links`` columns, and its ``open_spans`` as the start-marker spans a
live process sends (``Attr.OPEN_MARKER_FOR``), so a batch assembled outside the collector
(``rolloutscope follow``) reaches it whole; ``encode_logs`` does the same for ``logs``;
``to_json`` writes any OTLP request as OTLP/JSON (hex ids, camelCase).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import orjson
from google.protobuf import json_format
import hashlib

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from rolloutscope.collectors.otlp.decode import SPAN_KINDS, STATUS_CODES, hex_id
from rolloutscope.store.rows import RowBatch
from rolloutscope.vocabulary import Attr

_KIND_NUMBER = {name: number for number, name in enumerate(SPAN_KINDS) if number}
_STATUS_NUMBER = {name: number for number, name in enumerate(STATUS_CODES)}


def set_any_value(target: AnyValue, value: Any) -> None:
    """Fill an AnyValue from a Python value (bool before int: bool is an int in Python)."""
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bytes | bytearray):
        target.bytes_value = bytes(value)
    elif isinstance(value, Mapping):
        target.kvlist_value.SetInParent()  # an empty mapping is still a kvlist, not "no value"
        fill_attributes(target.kvlist_value.values, value)
    elif isinstance(value, list | tuple):
        target.array_value.SetInParent()  # likewise an empty list
        for item in value:
            set_any_value(target.array_value.values.add(), item)
    elif value is not None:
        raise TypeError(f"cannot encode {type(value).__name__} as an OTLP AnyValue")


def fill_attributes(target, attributes: Mapping[str, Any] | None) -> None:
    for key, value in (attributes or {}).items():
        kv: KeyValue = target.add()
        kv.key = key
        set_any_value(kv.value, value)


def _json_attrs(text: str | None) -> dict[str, Any]:
    return orjson.loads(text) if text else {}


def _columns(batch: RowBatch, table: str) -> dict[str, list[Any]]:
    """A table of the batch as columns, through its public Arrow view."""
    arrow = batch.arrow(table)
    return {} if arrow is None else arrow.to_pydict()


def _marker_id(span_id: str) -> str:
    """A start marker's own span id: derived from the open span's, so a resend is identical."""
    return hashlib.blake2b(bytes.fromhex(span_id), digest_size=8,
                           person=b"rs-open-marker").hexdigest()


def encode_spans(batch: RowBatch) -> ExportTraceServiceRequest:
    """An OTLP trace request carrying the batch's finished spans, their events and links, and
    a start-marker span for each of its open intervals."""
    request = ExportTraceServiceRequest()
    cols = _columns(batch, "spans")
    scopes: dict[tuple[str | None, str | None], Any] = {}
    _encode_open(request, scopes, _columns(batch, "open_spans"))
    if not cols:
        return request
    events: dict[tuple[str, str], list[int]] = {}
    ev = _columns(batch, "span_events")
    for i, key in enumerate(zip(ev.get("trace_id", ()), ev.get("span_id", ()), strict=True)):
        events.setdefault(key, []).append(i)
    links: dict[tuple[str, str], list[int]] = {}
    lk = _columns(batch, "span_links")
    for i, key in enumerate(zip(lk.get("trace_id", ()), lk.get("span_id", ()), strict=True)):
        links.setdefault(key, []).append(i)
    for i in range(len(cols["span_id"])):
        span = _scope_spans(request, scopes, cols["resource"][i], cols["scope"][i]).spans.add()
        trace_id, span_id = cols["trace_id"][i], cols["span_id"][i]
        span.trace_id = hex_id(trace_id)
        span.span_id = hex_id(span_id)
        if cols["parent_span_id"][i]:
            span.parent_span_id = hex_id(cols["parent_span_id"][i])
        span.name = cols["name"][i]
        span.kind = _KIND_NUMBER.get(cols["kind"][i], 1)
        span.start_time_unix_nano = cols["start_ns"][i]
        span.end_time_unix_nano = cols["end_ns"][i]
        span.status.code = _STATUS_NUMBER.get(cols["status_code"][i], 0)
        if cols["status_message"][i]:
            span.status.message = cols["status_message"][i]
        fill_attributes(span.attributes, _json_attrs(cols["attributes"][i]))
        for j in events.get((trace_id, span_id), ()):
            event = span.events.add()
            event.name = ev["name"][j]
            event.time_unix_nano = ev["ts_ns"][j]
            fill_attributes(event.attributes, _json_attrs(ev["attributes"][j]))
        for j in links.get((trace_id, span_id), ()):
            link = span.links.add()
            link.trace_id = hex_id(lk["linked_trace_id"][j])
            link.span_id = hex_id(lk["linked_span_id"][j])
            fill_attributes(link.attributes, _json_attrs(lk["attributes"][j]))
    return request


def _scope_spans(request, scopes: dict, resource: str | None, scope: str | None):
    scope_spans = scopes.get((resource, scope))
    if scope_spans is None:
        rs = request.resource_spans.add()
        fill_attributes(rs.resource.attributes, _json_attrs(resource))
        scope_spans = rs.scope_spans.add()
        if scope is not None:
            scope_spans.scope.name = scope
        scopes[(resource, scope)] = scope_spans
    return scope_spans


def _encode_open(request, scopes: dict, cols: dict[str, list[Any]]) -> None:
    for i in range(len(cols.get("span_id", ()))):
        span = _scope_spans(request, scopes, cols["resource"][i], cols["scope"][i]).spans.add()
        span_id, parent = cols["span_id"][i], cols["parent_span_id"][i]
        span.trace_id = hex_id(cols["trace_id"][i])
        span.span_id = hex_id(_marker_id(span_id))
        span.parent_span_id = hex_id(span_id)  # shares the open span's trace
        span.name = cols["name"][i]
        span.kind = _KIND_NUMBER.get(cols["kind"][i], 1)
        span.start_time_unix_nano = span.end_time_unix_nano = cols["start_ns"][i]
        attrs = _json_attrs(cols["attributes"][i])
        attrs[Attr.OPEN_MARKER_FOR] = span_id
        if parent:
            attrs[Attr.OPEN_MARKER_PARENT] = parent
        fill_attributes(span.attributes, attrs)


def encode_logs(batch: RowBatch) -> ExportLogsServiceRequest:
    """An OTLP logs request carrying the batch's log rows."""
    request = ExportLogsServiceRequest()
    cols = _columns(batch, "logs")
    groups: dict[tuple[str | None, str | None], Any] = {}
    for i in range(len(cols.get("ts_ns", ()))):
        key = (cols["resource"][i], cols["service"][i])
        scope_logs = groups.get(key)
        if scope_logs is None:
            rl = request.resource_logs.add()
            resource = _json_attrs(key[0])
            if key[1] is not None:
                resource.setdefault("service.name", key[1])
            if cols["run_id"][i] is not None:
                resource.setdefault("nemo.run.id", cols["run_id"][i])
            fill_attributes(rl.resource.attributes, resource)
            scope_logs = groups[key] = rl.scope_logs.add()
        rec = scope_logs.log_records.add()
        rec.time_unix_nano = cols["ts_ns"][i]
        if cols["severity"][i]:
            rec.severity_text = cols["severity"][i]
        if cols["body"][i] is not None:
            rec.body.string_value = cols["body"][i]
        if cols["trace_id"][i]:
            rec.trace_id = hex_id(cols["trace_id"][i])
        if cols["span_id"][i]:
            rec.span_id = hex_id(cols["span_id"][i])
        fill_attributes(rec.attributes, _json_attrs(cols["attributes"][i]))
    return request


_JSON_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _base64_ids_to_hex(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _base64_ids_to_hex(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in _JSON_ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _base64_ids_to_hex(value)


def to_json(request) -> bytes:
    """OTLP/JSON for any OTLP request message: camelCase keys, hex ids, enums as numbers."""
    doc = json_format.MessageToDict(request, use_integers_for_enums=True)
    _base64_ids_to_hex(doc)
    return orjson.dumps(doc)
