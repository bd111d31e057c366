"""The run store's schema: every table's DDL and column order, in one place.

A run store is one DuckDB file. Raw tables hold what arrived (spans, span events, links, metrics,
logs) plus one row per run with the config it used; the model views in ``views/`` are the
contract every reader uses. Times are epoch nanoseconds. Hot attributes are promoted to real
columns; all attributes (promoted ones included) stay in the ``attributes`` JSON so nothing is
lost in translation. JSON columns are VARCHAR holding JSON text: DuckDB's JSON functions read
them the same, and appending skips a validation pass that cost ~6 µs a span.

``open_spans`` holds start markers of intervals that have not ended yet (a parked rollout, a
shard's current state, a live deadline). The writer deletes a marker when its span's end
arrives, so ``all_spans`` (finished ∪ open, ``end_ns`` NULL for open) is what live views read.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

# Column name -> (DuckDB type, Arrow type). Order is the physical order of the table.
_SPAN_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("run_id", "VARCHAR", pa.string()),
    ("trace_id", "VARCHAR", pa.string()),
    ("span_id", "VARCHAR", pa.string()),
    ("parent_span_id", "VARCHAR", pa.string()),
    ("name", "VARCHAR", pa.string()),
    ("kind", "VARCHAR", pa.string()),
    ("service", "VARCHAR", pa.string()),
    ("start_ns", "BIGINT", pa.int64()),
    ("end_ns", "BIGINT", pa.int64()),
    ("status_code", "VARCHAR", pa.string()),
    ("status_message", "VARCHAR", pa.string()),
    ("rollout_id", "VARCHAR", pa.string()),
    ("attempt", "INTEGER", pa.int32()),
    ("prompt_idx", "BIGINT", pa.int64()),
    ("checkpoint_id", "VARCHAR", pa.string()),
    ("participant_kind", "VARCHAR", pa.string()),
    ("shard_idx", "INTEGER", pa.int32()),
    ("attributes", "VARCHAR", pa.string()),
    ("resource", "VARCHAR", pa.string()),
    ("scope", "VARCHAR", pa.string()),
]

_EVENT_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("run_id", "VARCHAR", pa.string()),
    ("trace_id", "VARCHAR", pa.string()),
    ("span_id", "VARCHAR", pa.string()),
    ("span_name", "VARCHAR", pa.string()),
    ("name", "VARCHAR", pa.string()),
    ("ts_ns", "BIGINT", pa.int64()),
    ("rollout_id", "VARCHAR", pa.string()),
    ("attempt", "INTEGER", pa.int32()),
    ("prompt_idx", "BIGINT", pa.int64()),
    ("checkpoint_id", "VARCHAR", pa.string()),
    ("shard_idx", "INTEGER", pa.int32()),
    ("attributes", "VARCHAR", pa.string()),
]

_LINK_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("run_id", "VARCHAR", pa.string()),
    ("trace_id", "VARCHAR", pa.string()),
    ("span_id", "VARCHAR", pa.string()),
    ("linked_trace_id", "VARCHAR", pa.string()),
    ("linked_span_id", "VARCHAR", pa.string()),
    ("attributes", "VARCHAR", pa.string()),
]

_METRIC_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("run_id", "VARCHAR", pa.string()),
    ("service", "VARCHAR", pa.string()),
    ("name", "VARCHAR", pa.string()),
    ("kind", "VARCHAR", pa.string()),  # gauge | sum | histogram | scalar (imported)
    ("ts_ns", "BIGINT", pa.int64()),
    ("step", "BIGINT", pa.int64()),
    ("value", "DOUBLE", pa.float64()),
    ("count", "BIGINT", pa.int64()),
    ("sum", "DOUBLE", pa.float64()),
    ("min", "DOUBLE", pa.float64()),
    ("max", "DOUBLE", pa.float64()),
    ("unit", "VARCHAR", pa.string()),
    ("attributes", "VARCHAR", pa.string()),
    ("resource", "VARCHAR", pa.string()),
]

_LOG_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("run_id", "VARCHAR", pa.string()),
    ("service", "VARCHAR", pa.string()),
    ("ts_ns", "BIGINT", pa.int64()),
    ("severity", "VARCHAR", pa.string()),
    ("body", "VARCHAR", pa.string()),
    ("trace_id", "VARCHAR", pa.string()),
    ("span_id", "VARCHAR", pa.string()),
    ("attributes", "VARCHAR", pa.string()),
    ("resource", "VARCHAR", pa.string()),
]

# Tables the writer appends to in batches, with their columns.
BATCH_TABLES: dict[str, list[tuple[str, str, pa.DataType]]] = {
    "spans": _SPAN_COLUMNS,
    "open_spans": _SPAN_COLUMNS,
    "span_events": _EVENT_COLUMNS,
    "span_links": _LINK_COLUMNS,
    "metrics": _METRIC_COLUMNS,
    "logs": _LOG_COLUMNS,
}

COLUMNS: dict[str, tuple[str, ...]] = {
    table: tuple(name for name, _, _ in cols) for table, cols in BATCH_TABLES.items()
}
ARROW_SCHEMAS: dict[str, pa.Schema] = {
    table: pa.schema([(name, arrow) for name, _, arrow in cols])
    for table, cols in BATCH_TABLES.items()
}

RUN_COLUMNS = (
    "run_id", "source", "parent_run_id", "scenario", "variants", "seed", "config",
    "metadata", "created_ns", "first_seen_ns", "last_seen_ns",
)


def _create_table(name: str, cols: list[tuple[str, str, pa.DataType]]) -> str:
    body = ",\n    ".join(f"{col} {sql}" for col, sql, _ in cols)
    return f"CREATE TABLE IF NOT EXISTS {name} (\n    {body}\n)"


DDL: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    *(_create_table(name, cols) for name, cols in BATCH_TABLES.items()),
    """CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    source VARCHAR NOT NULL,          -- live | import | replay
    parent_run_id VARCHAR,            -- the captured run a replay re-executed
    scenario VARCHAR,
    variants VARCHAR,                    -- list of variant switches that were on
    seed BIGINT,
    config VARCHAR,                      -- timeouts, thresholds, budgets the run used
    metadata VARCHAR,
    created_ns BIGINT,
    first_seen_ns BIGINT,
    last_seen_ns BIGINT
)""",
)
