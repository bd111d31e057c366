"""Column batches: the one shape in which data reaches the store's writer.

Pure encoding, no I/O. The in-process exporter (OTel SDK spans), the OTLP receiver (protobuf /
JSON) and the importers (logs, metrics files) all fill a ``RowBatch``; the writer turns each
table's columns into one Arrow table per commit. Promotion of hot attributes to real columns
happens here and only here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from math import isfinite
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from rolloutscope.store.fit import (
    COPIED,
    COPIED_KEYS,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    ROW_KEYS,
    ColumnFitError,
    check_time,
    copy_authority,
    copy_int,
    copy_text,
    describe,
    fit_attribute,
    fit_column,
    is_null,
    time_problem,
    valid_text,
)
from rolloutscope.store.schema import ARROW_SCHEMAS, BATCH_TABLES
from rolloutscope.vocabulary import Attr

_dumps = orjson.dumps
_FAST_TYPES = {"VARCHAR": str, "BIGINT": int, "INTEGER": int, "DOUBLE": float}


class _TableSpec:
    """A batch table's columns as ``add_row`` checks them."""

    __slots__ = ("names", "fast", "sql", "int32")

    def __init__(self, cols) -> None:
        self.names = tuple(name for name, _, _ in cols)  # in the table's order
        self.sql = {name: sql for name, sql, _ in cols}
        self.fast = {name: _FAST_TYPES[sql] for name, sql, _ in cols}  # the usual Python type
        self.int32 = frozenset(name for name, sql, _ in cols if sql == "INTEGER")


_SPECS = {table: _TableSpec(cols) for table, cols in BATCH_TABLES.items()}

# Which run a row belongs to, in order: the span's own ``nemo.run.id`` attribute (a replay
# writes several runs through one process), its resource's ``nemo.run.id``, else the run the
# writer files rows without one under: the store's default run (``RunStore.default_run_id``,
# named after the file), which the collector and the in-process exporter both write through.
# ``rolloutscope import otlp-json`` stamps its own run on resources without one first.
RUN_RULE = ("span nemo.run.id", "resource nemo.run.id", "the store's default run")


def attributes_json(attributes: Mapping[str, Any] | None) -> str | None:
    """JSON text of an attribute mapping (tuples become arrays; non-finite floats become null).
    Raises ``ColumnFitError`` for what no JSON text can hold (a string with lone surrogates)."""
    if not attributes:
        return None
    if type(attributes) is not dict:
        attributes = dict(attributes)  # e.g. the SDK's BoundedAttributes, which orjson rejects
    try:
        return _dumps(attributes).decode()
    except TypeError:
        pass
    # bytes or other non-JSON values (OTLP bytes / kvlist from a receiver): stringify them
    try:
        return _dumps({str(k): _jsonable(v) for k, v in attributes.items()}).decode()
    except TypeError as exc:
        raise ColumnFitError(f"attributes cannot be stored as JSON: {exc}") from None


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


# the promoted keys as module constants: one name lookup each on the hot path, not two
_ROLLOUT_ID, _EPISODE_ROLLOUT_ID = Attr.ROLLOUT_ID, Attr.EPISODE_ROLLOUT_ID
_RL_ATTEMPT, _EPISODE_ATTEMPT = Attr.RL_ATTEMPT, Attr.EPISODE_ATTEMPT
_PROMPT_IDX, _CHECKPOINT_ID = Attr.PROMPT_IDX, Attr.CHECKPOINT_ID
_PARTICIPANT_KIND, _SHARD_IDX = Attr.CK_PARTICIPANT_KIND, Attr.SHARD_IDX


def promoted(attrs: Mapping[str, Any], notes: list[str] | None = None
             ) -> tuple[Any, Any, Any, Any, Any, Any]:
    """(rollout_id, attempt, prompt_idx, checkpoint_id, participant_kind, shard_idx), each
    fitted to its column (``fit.PROMOTED``). Raises ``ColumnFitError`` for a value that does not
    fit; appends to ``notes`` what it coerced."""
    get = attrs.get
    rollout_id = get(_ROLLOUT_ID)
    if rollout_id is None:
        rollout_id = get(_EPISODE_ROLLOUT_ID)
        if rollout_id is not None and type(rollout_id) is not str:
            rollout_id = fit_attribute(_EPISODE_ROLLOUT_ID, rollout_id, notes)
    elif type(rollout_id) is not str:
        rollout_id = fit_attribute(_ROLLOUT_ID, rollout_id, notes)
    attempt = get(_RL_ATTEMPT)
    if attempt is None:
        attempt = get(_EPISODE_ATTEMPT)
        if attempt is not None and not (type(attempt) is int and
                                        -2147483648 <= attempt <= 2147483647):
            attempt = fit_attribute(_EPISODE_ATTEMPT, attempt, notes)
    elif not (type(attempt) is int and -2147483648 <= attempt <= 2147483647):
        attempt = fit_attribute(_RL_ATTEMPT, attempt, notes)
    prompt_idx = get(_PROMPT_IDX)
    if prompt_idx is not None and not (type(prompt_idx) is int and
                                       -9223372036854775808 <= prompt_idx <= 9223372036854775807):
        prompt_idx = fit_attribute(_PROMPT_IDX, prompt_idx, notes)
    checkpoint_id = get(_CHECKPOINT_ID)
    if checkpoint_id is not None and type(checkpoint_id) is not str:
        checkpoint_id = fit_attribute(_CHECKPOINT_ID, checkpoint_id, notes)
    kind = get(_PARTICIPANT_KIND)
    if kind is not None and type(kind) is not str:
        kind = fit_attribute(_PARTICIPANT_KIND, kind, notes)
    shard_idx = get(_SHARD_IDX)
    if shard_idx is not None and not (type(shard_idx) is int and
                                      -2147483648 <= shard_idx <= 2147483647):
        shard_idx = fit_attribute(_SHARD_IDX, shard_idx, notes)
    # (the literals above are the INTEGER and BIGINT ranges of fit.py, as constants)
    return rollout_id, attempt, prompt_idx, checkpoint_id, kind, shard_idx


_NOT_PROMOTED = (None, None, None, None, None, None)
# Every key that changes a span's row beyond its attributes JSON and the copied attributes.
_ROW_KEYS = frozenset(ROW_KEYS)
# ... and with them: most spans carry none of these, and one ``isdisjoint`` (a C loop over the
# span's keys) lets those skip every lookup
_SPAN_KEYS = _ROW_KEYS | COPIED_KEYS

_NOT_COPIED = (None,) * len(COPIED)
# a copied key -> (its column's place among the copies, its place among the column's keys)
_COPY_SLOT = {key: (slot, rank) for slot, copy in enumerate(COPIED)
              for rank, key in enumerate(copy.keys)}
_INT_SLOTS = frozenset(slot for slot, copy in enumerate(COPIED) if copy.sql == "INTEGER")
_AUTHORITY = next(slot for slot, copy in enumerate(COPIED) if copy.column == "server_authority")
_HOST, _ADDRESS, _PORT = COPIED[_AUTHORITY].keys
# a column's first key -> (the column's place, the type it takes as it is): a str to a text
# column (server_authority's http.host included), an int to http_status
_FIRST_KEY = {copy.keys[0]: (slot, str if copy.sql == "VARCHAR" else int)
              for slot, copy in enumerate(COPIED)}
# what attributes_json writes as itself; any other value (a Decimal, a datetime, a numpy int) it
# writes as orjson or str() renders it, which the copy must match
_JSON_NATIVE = (str, int, float, bytes, bytearray, list, tuple, Mapping)


def copied(attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The span's copied attributes (``fit.COPIED``), in the columns' order: only the keys it
    carries are looked at (an HTTP span has four or five, a rollout try one to three)."""
    present = COPIED_KEYS.intersection(attrs)
    if not present:
        return _NOT_COPIED
    row = list(_NOT_COPIED)
    get = attrs.get
    for key in present:
        value = get(key)
        first = _FIRST_KEY.get(key)
        if first is not None and type(value) is first[1] and (
                first[1] is str or INT32_MIN <= value <= INT32_MAX):
            row[first[0]] = value  # the usual case, copied as it is whatever else is there
            continue
        if key == _ADDRESS and type(value) is str and get(_HOST) is None:
            port = get(_PORT)  # a CLIENT span's usual address: text and an int port
            if type(port) is int:
                row[_AUTHORITY] = f"{value}:{port}"
                continue
        if value is not None and not isinstance(value, _JSON_NATIVE):
            # rare: copied from the JSON text itself, whose values are all native
            return copied(orjson.loads(attributes_json(attrs)))
        if value is None or key == _PORT or (isinstance(value, float) and not isfinite(value)):
            continue  # null in the JSON (or the port, which goes with its address)
        slot, rank = _COPY_SLOT[key]
        if rank and not all(is_null(get(k)) for k in COPIED[slot].keys[:rank]):
            continue  # a key before it in the column's list is there: that one is copied
        if slot == _AUTHORITY:
            row[slot] = copy_authority(value, None, None) if rank == 0 else copy_authority(
                None, value, get(_PORT))
        elif slot in _INT_SLOTS:
            row[slot] = copy_int(value)
        else:
            row[slot] = value if type(value) is str else copy_text(value)
    return tuple(row)


_MARKER_KEYS = (Attr.OPEN_MARKER_FOR, Attr.OPEN_MARKER_PARENT)
MAX_NOTES = 5  # coercions quoted per batch; the rest are only counted


def span_problem(start_ns: Any, end_ns: Any, **text: Any) -> str | None:
    """Why a span's own scalars cannot be stored, or None: its times (``end_ns`` may be None)
    and its text fields (``name`` required, the others str or None)."""
    problem = time_problem(start_ns, "start time")
    if problem is None and end_ns is not None:
        problem = time_problem(end_ns, "end time")
    return problem or text_problem(**text)


def text_problem(**fields: Any) -> str | None:
    """Why one of a span's text fields (``name`` required, the others str or None) cannot be
    stored, or None."""
    for what, value in fields.items():
        if value is None and what != "name":
            continue
        if not isinstance(value, str):
            return f"{what.replace('_', ' ')} {describe(value)} is not a string"
        if not valid_text(value):
            return f"{what.replace('_', ' ')} {describe(value)} is not valid Unicode text"
    return None


class RowBatch:
    """Rows for several tables, each kept as a list of tuples in the table's column order
    (one append per row; the transpose to columns happens once, in C, in ``arrow``), and rows
    that come already in Arrow (``add_arrow``: the compiled decoder's and encoder's), which
    ``arrow`` takes as they are. Not thread-safe; hand it to the writer whole.

    Every value is fitted to its column as it is added (``rolloutscope.store.fit``): a span,
    event or row that cannot be stored raises ``ColumnFitError`` and adds nothing, so one bad
    item never reaches a commit. What was coerced to fit is counted in ``coerced`` and the first
    ``MAX_NOTES`` are described in ``notes``.

    ``append_span`` is the entry point the exporter and the OTLP decoder share (positional,
    no copies); ``add_span`` is its keyword form for everyone else.
    """

    __slots__ = ("tables", "parts", "rows", "coerced", "notes")

    def __init__(self) -> None:
        self.tables: dict[str, list[tuple[Any, ...]]] = {}
        self.parts: dict[str, list[pa.Table]] = {}
        self.rows = 0
        self.coerced = 0
        self.notes: list[str] = []

    def _rows(self, table: str) -> list[tuple[Any, ...]]:
        rows = self.tables.get(table)
        if rows is None:
            rows = self.tables[table] = []
        return rows

    def _note(self, what: str, notes: list[str]) -> None:
        self.coerced += len(notes)
        for note in notes:
            if len(self.notes) < MAX_NOTES:
                self.notes.append(f"{what}: {note}")

    def append_span(
        self, run_id: str | None, trace_id: str, span_id: str, parent_span_id: str | None,
        name: str, kind: str, service: str | None, start_ns: int, end_ns: int | None,
        status_code: str, status_message: str | None, attributes: dict[str, Any],
        resource_json: str | None, scope: str | None,
        events: Iterable[tuple[str, int, Mapping[str, Any]]] | None = None,
        links: Iterable[tuple[str, str, Mapping[str, Any]]] | None = None,
    ) -> None:
        """``add_span`` for the hot paths: positional, and ``attributes`` must be a plain
        ``dict`` that the caller hands over (it is read, never modified). Raises
        ``ColumnFitError`` (adding nothing) when a promoted attribute, an event or the
        attributes cannot be stored.

        The span's own scalars are the caller's to guarantee, because the hot callers already
        know them: text fields (ids, name, kind, service, status message, scope) str or None,
        ``start_ns`` an int and ``end_ns`` an int or None within BIGINT. The OTLP decoder's are
        (protobuf strings and uint64 times it checks against ``fit.MAX_NS``), the exporter
        checks the SDK's with ``span_problem``, and ``add_span`` checks its caller's."""
        if _SPAN_KEYS.isdisjoint(attributes):
            if not events and not links:  # most spans: one row, nothing to promote or copy
                self._rows("spans").append((
                    run_id, trace_id, span_id, parent_span_id, name, kind, service, start_ns,
                    end_ns, status_code, status_message, None, None, None, None, None, None,
                    attributes_json(attributes), resource_json, scope,
                    None, None, None, None, None, None, None, None))
                self.rows += 1
                return
            promo = _NOT_PROMOTED
            copies = _NOT_COPIED
            notes = None
        elif _ROW_KEYS.isdisjoint(attributes):
            promo = _NOT_PROMOTED
            copies = copied(attributes)
            notes = None
        else:
            copies = copied(attributes)
            notes = []
            promo = promoted(attributes, notes)
            if Attr.RUN_ID in attributes:
                span_run = attributes[Attr.RUN_ID]
                if span_run is not None:
                    run_id = span_run if type(span_run) is str else fit_attribute(
                        Attr.RUN_ID, span_run, notes)
            marker_for = attributes.get(Attr.OPEN_MARKER_FOR)
            if marker_for is not None:
                # filed under the id of the span it opens, with no end; its events and links
                # arrive with the finished span
                row = (run_id, trace_id, fit_attribute(Attr.OPEN_MARKER_FOR, marker_for, notes),
                       fit_attribute(Attr.OPEN_MARKER_PARENT,
                                     attributes.get(Attr.OPEN_MARKER_PARENT), notes),
                       name, kind, service, start_ns, None, status_code, status_message, *promo,
                       attributes_json({k: v for k, v in attributes.items()
                                        if k not in _MARKER_KEYS}),
                       resource_json, scope, *copies)
                self._rows("open_spans").append(row)
                self.rows += 1
                if notes:
                    self._note(f"span {span_id}", notes)
                return
        # every row of the span is built before any is added: all of it goes in, or none
        row = (run_id, trace_id, span_id, parent_span_id, name, kind, service, start_ns, end_ns,
               status_code, status_message, *promo, attributes_json(attributes), resource_json,
               scope, *copies)
        if not events and not links:
            self._rows("spans").append(row)
            self.rows += 1
            if notes:
                self._note(f"span {span_id}", notes)
            return
        event_rows = None
        if events:
            r, a, p, c, _, sh = promo
            keys = (r, a, p, c, sh)
            if notes is None:
                notes = []
            event_rows = []
            add_event_row = event_rows.append
            for ev_name, ts_ns, ev_attrs in events:
                if (type(ts_ns) is int  # the literals: INT64_MIN / INT64_MAX
                        and -9223372036854775808 <= ts_ns <= 9223372036854775807
                        and type(ev_name) is str and not ev_attrs):
                    add_event_row((run_id, trace_id, span_id, name, ev_name, ts_ns, r, a, p, c,
                                   sh, None))
                else:
                    add_event_row(self._event_row(run_id, trace_id, span_id, name, ev_name,
                                                  ts_ns, ev_attrs, keys, notes))
        link_rows = None
        if links:
            link_rows = [(run_id, trace_id, span_id, linked_trace, linked_span,
                          attributes_json(link_attrs))
                         for linked_trace, linked_span, link_attrs in links]
        self._rows("spans").append(row)
        self.rows += 1
        if event_rows:
            self._rows("span_events").extend(event_rows)
            self.rows += len(event_rows)
        if link_rows:
            self._rows("span_links").extend(link_rows)
            self.rows += len(link_rows)
        if notes:
            self._note(f"span {span_id}", notes)

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
        problem = span_problem(start_ns, end_ns, name=name, status_message=status_message,
                               scope=scope, run_id=run_id, service=service, trace_id=trace_id,
                               span_id=span_id, parent_span_id=parent_span_id, kind=kind,
                               status_code=status_code, resource=resource_json)
        if problem is not None:
            raise ColumnFitError(problem)
        self.append_span(run_id, trace_id, span_id, parent_span_id, name, kind, service,
                         start_ns, end_ns, status_code, status_message,
                         attributes if type(attributes) is dict else dict(attributes),
                         resource_json, scope, events, links)

    @staticmethod
    def _event_row(run_id: str | None, trace_id: str, span_id: str, span_name: str, name: Any,
                   ts_ns: Any, attributes: Mapping[str, Any] | None,
                   inherited: tuple[Any, Any, Any, Any, Any], notes: list[str]
                   ) -> tuple[Any, ...]:
        if not (type(ts_ns) is int and INT64_MIN <= ts_ns <= INT64_MAX):
            check_time(ts_ns, f"event {str(name)[:80]!r} time")
        if type(name) is not str:
            raise ColumnFitError(f"event name {describe(name)} is not a string")
        rollout_id, attempt, prompt_idx, checkpoint_id, shard_idx = inherited
        if attributes:
            if type(attributes) is not dict:
                attributes = dict(attributes)
            if not _ROW_KEYS.isdisjoint(attributes):
                e_rollout, e_attempt, e_prompt, e_ck, _, e_shard = promoted(attributes, notes)
                rollout_id = e_rollout if e_rollout is not None else rollout_id
                attempt = e_attempt if e_attempt is not None else attempt
                prompt_idx = e_prompt if e_prompt is not None else prompt_idx
                checkpoint_id = e_ck if e_ck is not None else checkpoint_id
                shard_idx = e_shard if e_shard is not None else shard_idx
        return (run_id, trace_id, span_id, span_name, name, ts_ns, rollout_id, attempt,
                prompt_idx, checkpoint_id, shard_idx, attributes_json(attributes))

    def add_event(
        self, *, run_id: str | None, trace_id: str, span_id: str, span_name: str, name: str,
        ts_ns: int, attributes: Mapping[str, Any] | None,
        inherited: tuple[Any, Any, Any, Any, Any] = (None, None, None, None, None),
    ) -> None:
        """One span event; join keys come from the event's own attributes, else its span's."""
        notes: list[str] = []
        self._rows("span_events").append(self._event_row(
            run_id, trace_id, span_id, span_name, name, ts_ns, attributes, inherited, notes))
        self.rows += 1
        if notes:
            self._note(f"event of span {span_id}", notes)

    def add_row(self, table: str, **values: Any) -> None:
        """A metric or log row (or any batch table), by column name; missing columns are NULL.
        Raises ``ColumnFitError`` (adding nothing) for a value its column cannot hold."""
        spec = _SPECS[table]
        fast = spec.fast
        for column, value in values.items():
            want = fast.get(column)
            if want is None:
                raise ValueError(f"unknown column(s) for table {table!r}: "
                                 f"{sorted(values.keys() - fast.keys())}")
            if value is None:
                continue
            if want is str:
                if type(value) is str and value.isascii():
                    continue
            elif want is int:  # the literals: INT64_MIN / INT64_MAX; INTEGER is checked below
                if type(value) is int and -9223372036854775808 <= value <= 9223372036854775807 \
                        and column not in spec.int32:
                    continue
            elif type(value) is float:
                continue
            values[column] = fit_column(table, column, spec.sql[column], value)
        self._rows(table).append(tuple(map(values.get, spec.names)))
        self.rows += 1

    def add_arrow(self, table: str, rows: pa.Table) -> None:
        """Rows of ``table`` already in Arrow, with its schema and values fitted as
        ``append_span`` fits them (the compiled decoder's and encoder's); kept as they are."""
        if rows.schema != ARROW_SCHEMAS[table]:
            raise ValueError(f"{table}: an Arrow table whose schema is not the table's")
        if rows.num_rows:
            self.parts.setdefault(table, []).append(rows)
            self.rows += rows.num_rows

    def extend(self, other: RowBatch) -> None:
        for table, rows in other.tables.items():
            self._rows(table).extend(rows)
        for table, parts in other.parts.items():
            self.parts.setdefault(table, []).extend(parts)  # immutable: shared, not copied
        self.rows += other.rows
        self.coerced += other.coerced

    def row_tuples(self, table: str) -> list[tuple[Any, ...]]:
        """Every row of ``table`` as a tuple in its column order (the ones added as Arrow
        first, then as rows): for tests and diagnostics, not the write path."""
        return [*(row for part in self.parts.get(table, ())
                  for row in zip(*(c.to_pylist() for c in part.columns), strict=True)),
                *self.tables.get(table, ())]

    def arrow(self, table: str, *, default_run_id: str | None = None) -> pa.Table | None:
        """The table's rows as Arrow; with ``default_run_id``, rows without a run get it
        (the run rule, see ``RUN_RULE``)."""
        parts = list(self.arrow_slices(table, 2**62, default_run_id=default_run_id))
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def arrow_slices(self, table: str, rows_per_slice: int, *,
                     default_run_id: str | None = None) -> Iterator[pa.Table]:
        """``arrow(table)`` in slices of at most ``rows_per_slice`` rows, each made as it is
        asked for."""
        schema = ARROW_SCHEMAS[table]
        parts = self.parts.get(table)
        if parts:
            # the requests of a grouped commit as one table of many chunks (no copy): one
            # insert per slice, not one per request
            whole = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
            for start in range(0, whole.num_rows, rows_per_slice):
                piece = whole if whole.num_rows <= rows_per_slice else whole.slice(
                    start, rows_per_slice)
                yield _with_run(piece, default_run_id)
        rows = self.tables.get(table)
        if not rows:
            return
        for start in range(0, len(rows), rows_per_slice):
            yield _to_arrow(rows[start:start + rows_per_slice], schema, default_run_id)


def arrow_from_buffers(columns: list[tuple[Any, ...]], n: int, schema: pa.Schema) -> pa.Table:
    """An Arrow table of ``schema`` from compiled code's buffers: per column, (validity bytes
    or None, offsets bytes or None, data bytes, null count), as collectors/_arrow_columns.h
    makes them. The bytes objects become the arrays' buffers as they are (no copy here).

    ``Array.from_buffers`` checks each array's layout against its type (buffer sizes, the last
    offset within the data; not every value): a column that compiled code laid out for another
    schema raises ``pyarrow.ArrowInvalid`` here rather than reading past a buffer later."""
    arrays = []
    for (valid, offsets, data, nulls), column in zip(columns, schema, strict=True):
        buffers = [None if valid is None else pa.py_buffer(valid)]
        if offsets is not None:
            buffers.append(pa.py_buffer(offsets))
        buffers.append(pa.py_buffer(data))
        arrays.append(pa.Array.from_buffers(column.type, n, buffers, null_count=nulls))
    return pa.Table.from_arrays(arrays, schema=schema)


def _to_arrow(rows: list[tuple[Any, ...]], schema: pa.Schema,
              default_run_id: str | None = None) -> pa.Table:
    return _columns_to_arrow(list(zip(*rows, strict=True)), schema, default_run_id)


def _columns_to_arrow(columns: list, schema: pa.Schema,
                      default_run_id: str | None = None) -> pa.Table:
    arrays = [pa.array(col, type=field.type) for col, field in zip(columns, schema, strict=True)]
    return _with_run(pa.Table.from_arrays(arrays, schema=schema), default_run_id)


def _with_run(rows: pa.Table, default_run_id: str | None) -> pa.Table:
    """``rows`` with ``default_run_id`` where a row has no run (the run rule)."""
    if default_run_id is None or rows.schema.names[0] != "run_id":
        return rows
    run_ids = rows.column(0)
    if not run_ids.null_count:
        return rows
    return rows.set_column(0, rows.schema.field(0), pc.fill_null(run_ids, default_run_id))
