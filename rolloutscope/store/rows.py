"""Column batches: the one shape in which data reaches the store's writer.

Pure encoding, no I/O. The in-process exporter (OTel SDK spans), the OTLP receiver (protobuf /
JSON) and the importers (logs, metrics files) all fill a ``RowBatch``; the writer turns each
table's columns into one Arrow table per commit. Promotion of hot attributes to real columns
happens here and only here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from rolloutscope.store.schema import ARROW_SCHEMAS, COLUMNS
from rolloutscope.vocabulary import Attr

_dumps = orjson.dumps

# Which run a row belongs to, in order: the span's own ``nemo.run.id`` attribute (a replay
# writes several runs through one process), its resource's ``nemo.run.id``, else the run the
# writer files rows without one under: the store's default run (``RunStore.default_run_id``,
# named after the file), which the collector and the in-process exporter both write through.
# ``rolloutscope import otlp-json`` stamps its own run on resources without one first.
RUN_RULE = ("span nemo.run.id", "resource nemo.run.id", "the store's default run")


def attributes_json(attributes: Mapping[str, Any] | None) -> str | None:
    """JSON text of an attribute mapping (tuples become arrays; non-finite floats become null)."""
    if not attributes:
        return None
    if type(attributes) is not dict:
        attributes = dict(attributes)  # e.g. the SDK's BoundedAttributes, which orjson rejects
    try:
        return _dumps(attributes).decode()
    except TypeError:
        # bytes or other non-JSON values (OTLP bytes / kvlist from a receiver): stringify them
        return _dumps({str(k): _jsonable(v) for k, v in attributes.items()}).decode()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def promoted(attrs: Mapping[str, Any]) -> tuple[Any, Any, Any, Any, Any, Any]:
    """(rollout_id, attempt, prompt_idx, checkpoint_id, participant_kind, shard_idx)."""
    get = attrs.get
    rollout_id = get(Attr.ROLLOUT_ID)
    if rollout_id is None:
        rollout_id = get(Attr.EPISODE_ROLLOUT_ID)
    attempt = get(Attr.RL_ATTEMPT)
    if attempt is None:
        attempt = get(Attr.EPISODE_ATTEMPT)
    prompt_idx = get(Attr.PROMPT_IDX)
    shard_idx = get(Attr.SHARD_IDX)
    # ``type(x) is int`` first: the usual case, and it excludes bool as _int_or_none does
    return (
        None if rollout_id is None else str(rollout_id),
        attempt if type(attempt) is int else _int_or_none(attempt),
        prompt_idx if type(prompt_idx) is int else _int_or_none(prompt_idx),
        get(Attr.CHECKPOINT_ID),
        get(Attr.CK_PARTICIPANT_KIND),
        shard_idx if type(shard_idx) is int else _int_or_none(shard_idx),
    )


_NOT_PROMOTED = (None, None, None, None, None, None)
# Every key that changes a span's row beyond its attributes JSON. Most spans carry none of
# them, and one ``isdisjoint`` (a C loop over the span's keys) lets those skip the lookups.
_ROW_KEYS = frozenset((
    Attr.ROLLOUT_ID, Attr.EPISODE_ROLLOUT_ID, Attr.RL_ATTEMPT, Attr.EPISODE_ATTEMPT,
    Attr.PROMPT_IDX, Attr.CHECKPOINT_ID, Attr.CK_PARTICIPANT_KIND, Attr.SHARD_IDX,
    Attr.RUN_ID, Attr.OPEN_MARKER_FOR,
))
_MARKER_KEYS = (Attr.OPEN_MARKER_FOR, Attr.OPEN_MARKER_PARENT)


class RowBatch:
    """Rows for several tables, each kept as a list of tuples in the table's column order
    (one append per row; the transpose to columns happens once, in C, in ``arrow``).
    Not thread-safe; hand it to the writer whole.

    ``append_span`` is the entry point the exporter and the OTLP decoder share (positional,
    no copies); ``add_span`` is its keyword form for everyone else.
    """

    __slots__ = ("tables", "rows")

    def __init__(self) -> None:
        self.tables: dict[str, list[tuple[Any, ...]]] = {}
        self.rows = 0

    def _rows(self, table: str) -> list[tuple[Any, ...]]:
        rows = self.tables.get(table)
        if rows is None:
            rows = self.tables[table] = []
        return rows

    def append_span(
        self, run_id: str | None, trace_id: str, span_id: str, parent_span_id: str | None,
        name: str, kind: str, service: str | None, start_ns: int, end_ns: int | None,
        status_code: str, status_message: str | None, attributes: dict[str, Any],
        resource_json: str | None, scope: str | None,
        events: Iterable[tuple[str, int, Mapping[str, Any]]] | None = None,
        links: Iterable[tuple[str, str, Mapping[str, Any]]] | None = None,
    ) -> None:
        """``add_span`` for the hot paths: positional, and ``attributes`` must be a plain
        ``dict`` that the caller hands over (it is read, never modified)."""
        if _ROW_KEYS.isdisjoint(attributes):
            promo = _NOT_PROMOTED
        else:
            promo = promoted(attributes)
            run_id = attributes.get(Attr.RUN_ID, run_id)
            marker_for = attributes.get(Attr.OPEN_MARKER_FOR)
            if marker_for is not None:
                # filed under the id of the span it opens, with no end; its events and links
                # arrive with the finished span
                self._rows("open_spans").append((
                    run_id, trace_id, str(marker_for), attributes.get(Attr.OPEN_MARKER_PARENT),
                    name, kind, service, start_ns, None, status_code, status_message, *promo,
                    attributes_json({k: v for k, v in attributes.items()
                                     if k not in _MARKER_KEYS}),
                    resource_json, scope))
                self.rows += 1
                return
        self._rows("spans").append((
            run_id, trace_id, span_id, parent_span_id, name, kind, service, start_ns, end_ns,
            status_code, status_message, *promo, attributes_json(attributes), resource_json,
            scope))
        self.rows += 1
        if events:
            keys = (promo[0], promo[1], promo[2], promo[3], promo[5])
            for ev_name, ts_ns, ev_attrs in events:
                self.add_event(run_id=run_id, trace_id=trace_id, span_id=span_id,
                               span_name=name, name=ev_name, ts_ns=ts_ns, attributes=ev_attrs,
                               inherited=keys)
        if links:
            lrows = self._rows("span_links")
            for linked_trace, linked_span, link_attrs in links:
                lrows.append((run_id, trace_id, span_id, linked_trace, linked_span,
                              attributes_json(link_attrs)))
                self.rows += 1

    def add_span(
        self, *, run_id: str | None, trace_id: str, span_id: str, parent_span_id: str | None,
        name: str, kind: str, service: str | None, start_ns: int, end_ns: int | None,
        status_code: str, status_message: str | None, attributes: Mapping[str, Any],
        resource_json: str | None, scope: str | None,
        events: Iterable[tuple[str, int, Mapping[str, Any]]] = (),
        links: Iterable[tuple[str, str, Mapping[str, Any]]] = (),
    ) -> None:
        """One span. A span carrying ``Attr.OPEN_MARKER_FOR`` is the start marker of the span
        whose id it names, and lands in ``open_spans`` under that id with no end."""
        self.append_span(run_id, trace_id, span_id, parent_span_id, name, kind, service,
                         start_ns, end_ns, status_code, status_message,
                         attributes if type(attributes) is dict else dict(attributes),
                         resource_json, scope, events, links)

    def add_event(
        self, *, run_id: str | None, trace_id: str, span_id: str, span_name: str, name: str,
        ts_ns: int, attributes: Mapping[str, Any] | None,
        inherited: tuple[Any, Any, Any, Any, Any] = (None, None, None, None, None),
    ) -> None:
        """One span event; join keys come from the event's own attributes, else its span's."""
        rollout_id, attempt, prompt_idx, checkpoint_id, shard_idx = inherited
        if attributes:
            if type(attributes) is not dict:
                attributes = dict(attributes)
            e_rollout, e_attempt, e_prompt, e_ck, _, e_shard = promoted(attributes)
            rollout_id = e_rollout if e_rollout is not None else rollout_id
            attempt = e_attempt if e_attempt is not None else attempt
            prompt_idx = e_prompt if e_prompt is not None else prompt_idx
            checkpoint_id = e_ck if e_ck is not None else checkpoint_id
            shard_idx = e_shard if e_shard is not None else shard_idx
        self._rows("span_events").append((
            run_id, trace_id, span_id, span_name, name, ts_ns, rollout_id, attempt, prompt_idx,
            checkpoint_id, shard_idx, attributes_json(attributes)))
        self.rows += 1

    def add_row(self, table: str, **values: Any) -> None:
        """A metric or log row (or any batch table), by column name; missing columns are NULL."""
        columns = COLUMNS[table]
        unknown = set(values) - set(columns)
        if unknown:
            raise ValueError(f"unknown column(s) for table {table!r}: {sorted(unknown)}")
        self._rows(table).append(tuple(values.get(col) for col in columns))
        self.rows += 1

    def extend(self, other: RowBatch) -> None:
        for table, rows in other.tables.items():
            self._rows(table).extend(rows)
        self.rows += other.rows

    def arrow(self, table: str, *, default_run_id: str | None = None) -> pa.Table | None:
        """The table's rows as Arrow; with ``default_run_id``, rows without a run get it
        (the run rule, see ``RUN_RULE``)."""
        rows = self.tables.get(table)
        if not rows:
            return None
        schema = ARROW_SCHEMAS[table]
        columns = list(zip(*rows, strict=True))
        arrays = [pa.array(col, type=field.type) for col, field in zip(columns, schema,
                                                                        strict=True)]
        if default_run_id is not None and schema.names[0] == "run_id" and arrays[0].null_count:
            arrays[0] = pc.fill_null(arrays[0], default_run_id)
        return pa.Table.from_arrays(arrays, schema=schema)
