"""The run store's schema: every table's DDL and column order, in one place.

A run store is one DuckDB file. Raw tables hold what arrived (spans, span events, links, metrics,
logs) plus one row per run with the config it used; the model views in ``views/`` are the
contract every reader uses. Times are epoch nanoseconds. Hot attributes are promoted to real
columns, and the ones the views filter and join on are copied to typed columns (``fit.COPIED``);
all attributes (promoted and copied ones included) stay in the ``attributes`` JSON so nothing is
lost in translation. JSON columns are VARCHAR holding JSON text: DuckDB's JSON functions read
them the same, and appending skips a validation pass that cost ~6 µs a span.

``open_spans`` holds start markers of intervals that have not ended yet (a parked rollout, a
shard's current state, a live deadline). The writer deletes a marker when its span's end
arrives, so ``all_spans`` (finished ∪ open, ``end_ns`` NULL for open) is what live views read.
"""

from __future__ import annotations

from functools import cache

from rolloutscope.store.fit import COPIED, COPIED_KEYS, Copy

# each column's Arrow type, by the name of its pyarrow factory: pyarrow is imported only by
# what builds batches (``arrow_schemas``), not by every command that opens a store
_ARROW = {"VARCHAR": "string", "INTEGER": "int32", "BIGINT": "int64", "DOUBLE": "float64"}

SCHEMA_VERSION = 2  # 2: spans and open_spans have the copied attributes' columns (fit.COPIED)

# Column name -> (DuckDB type, Arrow type). Order is the physical order of the table.
_SPAN_COLUMNS: list[tuple[str, str, str]] = [
    ("run_id", "VARCHAR", "string"),
    ("trace_id", "VARCHAR", "string"),
    ("span_id", "VARCHAR", "string"),
    ("parent_span_id", "VARCHAR", "string"),
    ("name", "VARCHAR", "string"),
    ("kind", "VARCHAR", "string"),
    ("service", "VARCHAR", "string"),
    ("start_ns", "BIGINT", "int64"),
    ("end_ns", "BIGINT", "int64"),
    ("status_code", "VARCHAR", "string"),
    ("status_message", "VARCHAR", "string"),
    ("rollout_id", "VARCHAR", "string"),
    ("attempt", "INTEGER", "int32"),
    ("prompt_idx", "BIGINT", "int64"),
    ("checkpoint_id", "VARCHAR", "string"),
    ("participant_kind", "VARCHAR", "string"),
    ("shard_idx", "INTEGER", "int32"),
    ("attributes", "VARCHAR", "string"),
    ("resource", "VARCHAR", "string"),
    ("scope", "VARCHAR", "string"),
    # the copied attributes (version 2), last: a migrated table adds them at its end
    *((copy.column, copy.sql, _ARROW[copy.sql]) for copy in COPIED),
]

_EVENT_COLUMNS: list[tuple[str, str, str]] = [
    ("run_id", "VARCHAR", "string"),
    ("trace_id", "VARCHAR", "string"),
    ("span_id", "VARCHAR", "string"),
    ("span_name", "VARCHAR", "string"),
    ("name", "VARCHAR", "string"),
    ("ts_ns", "BIGINT", "int64"),
    ("rollout_id", "VARCHAR", "string"),
    ("attempt", "INTEGER", "int32"),
    ("prompt_idx", "BIGINT", "int64"),
    ("checkpoint_id", "VARCHAR", "string"),
    ("shard_idx", "INTEGER", "int32"),
    ("attributes", "VARCHAR", "string"),
]

_LINK_COLUMNS: list[tuple[str, str, str]] = [
    ("run_id", "VARCHAR", "string"),
    ("trace_id", "VARCHAR", "string"),
    ("span_id", "VARCHAR", "string"),
    ("linked_trace_id", "VARCHAR", "string"),
    ("linked_span_id", "VARCHAR", "string"),
    ("attributes", "VARCHAR", "string"),
]

_METRIC_COLUMNS: list[tuple[str, str, str]] = [
    ("run_id", "VARCHAR", "string"),
    ("service", "VARCHAR", "string"),
    ("name", "VARCHAR", "string"),
    ("kind", "VARCHAR", "string"),  # gauge | sum | histogram | scalar (imported)
    ("ts_ns", "BIGINT", "int64"),
    ("step", "BIGINT", "int64"),
    ("value", "DOUBLE", "float64"),
    ("count", "BIGINT", "int64"),
    ("sum", "DOUBLE", "float64"),
    ("min", "DOUBLE", "float64"),
    ("max", "DOUBLE", "float64"),
    ("unit", "VARCHAR", "string"),
    ("attributes", "VARCHAR", "string"),
    ("resource", "VARCHAR", "string"),
]

_LOG_COLUMNS: list[tuple[str, str, str]] = [
    ("run_id", "VARCHAR", "string"),
    ("service", "VARCHAR", "string"),
    ("ts_ns", "BIGINT", "int64"),
    ("severity", "VARCHAR", "string"),
    ("body", "VARCHAR", "string"),
    ("trace_id", "VARCHAR", "string"),
    ("span_id", "VARCHAR", "string"),
    ("attributes", "VARCHAR", "string"),
    ("resource", "VARCHAR", "string"),
]

# Tables the writer appends to in batches, with their columns.
BATCH_TABLES: dict[str, list[tuple[str, str, str]]] = {
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


@cache
def arrow_schemas() -> dict:
    """Each batch table's Arrow schema (``pyarrow.Schema``), in the table's column order."""
    import pyarrow as pa

    return {table: pa.schema([(name, getattr(pa, arrow)()) for name, _, arrow in cols])
            for table, cols in BATCH_TABLES.items()}


def __getattr__(name: str):
    if name == "ARROW_SCHEMAS":  # the schemas, built on first use
        return arrow_schemas()
    raise AttributeError(name)

RUN_COLUMNS = (
    "run_id", "source", "parent_run_id", "scenario", "variants", "seed", "config",
    "metadata", "created_ns", "first_seen_ns", "last_seen_ns",
)


def _create_table(name: str, cols: list[tuple[str, str, str]]) -> str:
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


# -- the copied attributes in SQL --------------------------------------------------------------
# fit.py's rules over the attributes JSON: they fill the columns of a store written before the
# columns existed (below), and benchmarks/synthetic.py writes its spans' columns with them
def _has_key(key: str, source: str) -> str:
    # a text test before any JSON is parsed: the attributes JSON writes a key as "key"
    return f"contains({source}, '\"{key}\"')"


def _text_sql(key: str, source: str) -> str:
    return f"CASE WHEN json_type({source}, '{key}') = 'VARCHAR' THEN {source}->>'{key}' END"


def _int_sql(key: str, source: str) -> str:
    value = f"({source}->>'{key}')"
    return (f"CASE json_type({source}, '{key}') "
            f"WHEN 'BIGINT' THEN TRY_CAST({value} AS INTEGER) "
            f"WHEN 'UBIGINT' THEN TRY_CAST({value} AS INTEGER) "
            f"WHEN 'VARCHAR' THEN CASE WHEN regexp_full_match({value}, '[+-]?[0-9]+') "
            f"THEN TRY_CAST({value} AS INTEGER) END END")


def _present(key: str, source: str) -> str:
    return f"coalesce(json_type({source}, '{key}'), 'NULL') <> 'NULL'"


def copy_sql(copy: Copy, source: str = "attributes") -> str:
    """The SQL expression that computes ``copy``'s column from the attributes JSON
    (``source``): ``fit.copy_text``, ``copy_int`` and ``copy_authority`` in SQL."""
    keys = copy.keys
    if copy.column == "server_authority":
        host, address, port = keys
        joined = (f"CASE WHEN json_type({source}, '{address}') = 'VARCHAR' "
                  f"AND json_type({source}, '{port}') IN ('BIGINT', 'UBIGINT', 'VARCHAR') "
                  f"THEN ({source}->>'{address}') || ':' || ({source}->>'{port}') END")
        expr = f"CASE WHEN {_present(host, source)} THEN {_text_sql(host, source)} " \
               f"ELSE {joined} END"
    else:
        one = _int_sql if copy.sql == "INTEGER" else _text_sql
        expr = one(keys[-1], source)
        for key in reversed(keys[:-1]):
            expr = f"CASE WHEN {_present(key, source)} THEN {one(key, source)} ELSE {expr} END"
    present = " OR ".join(_has_key(key, source) for key in keys)
    return f"CASE WHEN {present} THEN {expr} END"


# -- older stores ------------------------------------------------------------------------------
# A store of version 1 has spans without the copied attributes' columns. Opened for writing, it
# is migrated: the columns are added and filled by ``copy_sql``. Opened read-only, it keeps its
# tables, and temporary views of the same names (``legacy_views``) add the columns, computed as
# it is read.
COPIED_TABLES = ("spans", "open_spans")


def migration(found: int) -> tuple[str, ...]:
    """The statements that bring a file (or lake) of version ``found`` to ``SCHEMA_VERSION``."""
    if found >= 2:
        return ()
    out = []
    any_key = " OR ".join(_has_key(key, "attributes") for key in sorted(COPIED_KEYS))
    for table in COPIED_TABLES:
        out.extend(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {copy.column} {copy.sql}"
                   for copy in COPIED)
        sets = ",\n    ".join(f"{copy.column} = {copy_sql(copy)}" for copy in COPIED)
        out.append(f"UPDATE {table} SET\n    {sets}\nWHERE {any_key}")
    return tuple(out)


def select_list(table: str, found: int) -> str:
    """The columns of ``table`` as a store of version ``found`` gives them (the copied
    attributes computed where it lacks them), for ``INSERT INTO table SELECT <this> FROM``."""
    if found >= 2 or table not in COPIED_TABLES:
        return ", ".join(COLUMNS[table])
    copied = {copy.column: copy_sql(copy) for copy in COPIED}
    return ", ".join(f"{copied[col]} AS {col}" if col in copied else col
                     for col in COLUMNS[table])


def legacy_views(found: int, catalog: str) -> tuple[str, ...]:
    """Temporary views named as the tables of ``catalog`` (a file or lake of version
    ``found``, opened read-only) that add the columns it lacks."""
    if found >= 2:
        return ()
    quoted = '"' + catalog.replace('"', '""') + '"'
    cols = ",\n       ".join(f"{copy_sql(copy)} AS {copy.column}" for copy in COPIED)
    return tuple(f"CREATE OR REPLACE TEMP VIEW {table} AS\nSELECT *,\n       {cols}\n"
                 f"FROM {quoted}.main.{table}" for table in COPIED_TABLES)
