"""The copied attributes (fit.COPIED): typed columns of spans that hold what the views read from
the attributes JSON. Whatever a span carries, the column written at ingest holds what the SQL
rules (schema.copy_sql, which migrate an older file and compute them for a read-only one) make
of the JSON stored beside it; a store written before the columns existed is migrated when
opened for writing, read through computed columns when opened read-only, and copied from into
another store, and its views read the same rows every way.
"""

from __future__ import annotations

import enum
import math
import shutil
from datetime import datetime
from decimal import Decimal

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutscope.store import RowBatch, RunStore
from rolloutscope.store.fit import COPIED
from rolloutscope.store.lake_ops import copy_runs
from rolloutscope.store.schema import COLUMNS, SCHEMA_VERSION, copy_sql
from rolloutscope.vocabulary import Attr
from tests.synthetic_run import synthetic_run

COPIED_KEYS = sorted({key for copy in COPIED for key in copy.keys})
COPIED_COLUMNS = [copy.column for copy in COPIED]


class Outcome(enum.StrEnum):
    FAILED = "failed"


class Status(enum.IntEnum):
    BAD_GATEWAY = 502


# every kind of value an attribute arrives as (the exporter's SDK values, the OTLP decoder's)
values = st.one_of(
    st.none(), st.text(max_size=8), st.booleans(), st.binary(max_size=3),
    st.sampled_from(["200", "+0404", "-7", "2147483647", "2147483648", "-2147483649", " 200",
                     "2e2", "200.0", "", "+", "\u0663", "0" * 30 + "5", "10.0.0.1", "ok"]),
    st.integers(-2**63, 2**64 - 1), st.integers(-2**31 - 2, 2**31 + 2), st.integers(0, 600),
    st.floats(), st.sampled_from([math.nan, math.inf, 200.0]),
    st.lists(st.integers(0, 9), max_size=2), st.dictionaries(st.just("k"), st.integers(0, 9)),
    st.sampled_from([Outcome.FAILED, Status.BAD_GATEWAY]),
    # no JSON kind: the JSON holds them as orjson or str() renders them (text)
    st.sampled_from([Decimal("404"), Decimal("NaN"), np.int64(503), np.int32(-1),
                     datetime(2026, 1, 2, 3, 4, 5), Decimal("1e3")]))
attribute_maps = st.dictionaries(st.sampled_from([*COPIED_KEYS, "other"]), values, max_size=6)


def _write(store: RunStore, maps: list[dict], run_id: str = "r") -> None:
    batch = RowBatch()
    for i, attrs in enumerate(maps):
        batch.add_span(run_id=run_id, trace_id=f"{i:032x}", span_id=f"{i + 1:016x}",
                       parent_span_id=None, name="s", kind="CLIENT", service=None,
                       start_ns=i + 1, end_ns=i + 2, status_code="UNSET", status_message=None,
                       attributes=attrs, resource_json=None, scope=None)
    store.writer().write(batch, timeout=60)


@pytest.fixture(scope="module")
def one_store(tmp_path_factory):
    with RunStore(tmp_path_factory.mktemp("copies") / "run.duckdb") as store:
        yield store, iter(range(10**9))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(attribute_maps, min_size=1, max_size=30))
def test_each_copied_column_holds_what_its_sql_makes_of_the_stored_json(one_store,
                                                                       maps) -> None:
    store, runs = one_store
    run_id = f"r{next(runs)}"  # each example its own run
    _write(store, maps, run_id)
    stored = ", ".join(COPIED_COLUMNS)
    computed = ", ".join(copy_sql(copy) for copy in COPIED)
    rows = store.query(f"SELECT attributes, {stored}, {computed} FROM spans WHERE run_id = ? "
                       f"ORDER BY start_ns", [run_id])
    assert len(rows) == len(maps)
    n = len(COPIED)
    for attrs, (json_text, *columns) in zip(maps, rows, strict=True):
        assert columns[:n] == columns[n:], (attrs, json_text)


def test_the_columns_read_what_their_attributes_say(tmp_path) -> None:
    maps = [
        {Attr.DEADLINE_KIND: "rollout", Attr.DEADLINE_OUTCOME: "fired"},
        {Attr.ROLLOUT_OUTCOME: Outcome.FAILED, Attr.FAILURE_CLASS: "infra",
         Attr.FAILURE_REASON: "RolloutTimeout"},
        # the newer HTTP conventions win over the older ones; a null is no value
        {Attr.HTTP_STATUS: 503, Attr.HTTP_STATUS_OLD: 200, Attr.URL_FULL: None,
         Attr.HTTP_URL_OLD: "http://a:1/v1/responses", Attr.ERROR_TYPE: "timeout",
         Attr.SERVER_ADDRESS: "a", Attr.SERVER_PORT: 1},
        {Attr.HTTP_STATUS_OLD: "404", Attr.HTTP_URL_OLD: "http://b/run", Attr.HTTP_HOST_OLD: "b:2",
         Attr.SERVER_ADDRESS: "ignored", Attr.SERVER_PORT: 9},
        # a value the column cannot hold stays in the JSON only
        {Attr.HTTP_STATUS: "200.0", Attr.HTTP_STATUS_OLD: 200, Attr.DEADLINE_KIND: 7,
         Attr.SERVER_ADDRESS: "c"},
    ]
    with RunStore(tmp_path / "run.duckdb") as store:
        _write(store, maps)
        rows = store.query(f"SELECT {', '.join(COPIED_COLUMNS)} FROM spans ORDER BY start_ns")
    got = [dict(zip(COPIED_COLUMNS, row, strict=True)) for row in rows]
    assert [{k: v for k, v in row.items() if v is not None} for row in got] == [
        {"deadline_kind": "rollout", "deadline_outcome": "fired"},
        {"rollout_outcome": "failed", "failure_class": "infra", "failure_reason": "RolloutTimeout"},
        {"http_status": 503, "url": "http://a:1/v1/responses", "server_authority": "a:1"},
        {"http_status": 404, "url": "http://b/run", "server_authority": "b:2"},
        {},
    ]


# -- stores written before the columns existed -------------------------------------------------
VIEWS = ("incidents", "rollout_attempts", "deadlines", "http_requests", "gym_attempts",
         "checkpoint_ops", "model_calls", "trace_roots")


def as_version_1(path) -> None:
    """Make ``path`` what the previous version wrote: its spans without the copied columns."""
    con = duckdb.connect(str(path))
    for table in ("spans", "open_spans"):
        for column in COPIED_COLUMNS:
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.execute("UPDATE store_meta SET value = '1' WHERE key = 'schema_version'")
    con.execute("CHECKPOINT")
    con.close()


def _rows(store: RunStore, view: str) -> list[tuple]:
    return store.query(f"SELECT * FROM {view} ORDER BY ALL")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A synthetic run as this version writes it, the rows of its views, and a version 1 copy
    of it."""
    folder = tmp_path_factory.mktemp("versions")
    current = synthetic_run(folder / "current.duckdb", spans=30_000)
    with RunStore(current, read_only=True) as store:
        expected = {view: _rows(store, view) for view in VIEWS}
    old = folder / "old.duckdb"
    shutil.copy(current, old)
    as_version_1(old)
    return current, old, expected


def test_a_version_1_file_opened_read_only_reads_as_this_version_writes(written) -> None:
    _, old, expected = written
    assert expected["incidents"], "the synthetic run has incidents to compare"
    with RunStore(old, read_only=True) as store:
        assert store.query("SELECT value FROM store_meta WHERE key = 'schema_version'") == [
            ("1",)]
        for view in VIEWS:
            assert _rows(store, view) == expected[view], view


def test_a_version_1_file_opened_for_writing_is_migrated(written, tmp_path) -> None:
    current, old, expected = written
    path = tmp_path / "migrated.duckdb"
    shutil.copy(old, path)
    with RunStore(path) as store:
        assert store.query("SELECT value FROM store_meta WHERE key = 'schema_version'") == [
            (str(SCHEMA_VERSION),)]
        for view in VIEWS:
            assert _rows(store, view) == expected[view], view
    # the columns are the ones this version writes, in its order, with its values
    con = duckdb.connect(str(path), read_only=True)
    assert tuple(r[0] for r in con.execute("DESCRIBE spans").fetchall()) == COLUMNS["spans"]
    con.execute(f"ATTACH '{current}' AS current (READ_ONLY)")
    cols = ", ".join(COLUMNS["spans"])
    assert con.execute(f"SELECT count(*) FROM (SELECT {cols} FROM spans EXCEPT ALL "
                       f"SELECT {cols} FROM current.spans)").fetchall() == [(0,)]
    con.close()


def test_runs_copied_out_of_a_version_1_file_get_the_columns(written, tmp_path) -> None:
    current, old, expected = written
    dest = tmp_path / "dest.duckdb"
    assert copy_runs(old, dest) == ["synthetic"]
    count = "SELECT count(*), count(DISTINCT url) FROM spans WHERE http_status IS NOT NULL"
    with RunStore(dest, read_only=True) as store, RunStore(current, read_only=True) as ref:
        assert _rows(store, "incidents") == expected["incidents"]
        assert store.query(count) == ref.query(count)
