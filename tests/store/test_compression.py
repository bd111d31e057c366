"""A file store's text columns are compressed the way ``schema.py`` chooses, not as DuckDB's
analysis at each checkpoint would pick: the spans here are built so that the analysis would pick
the other method for every column checked (distinct names, one repeated attributes JSON), so
the choice is what decides. The choice survives the store being closed and opened again."""

from __future__ import annotations

import duckdb

from rolloutscope.store import RowBatch, RunStore
from rolloutscope.store.lake import lake_ddl
from rolloutscope.store.schema import DISTINCT_TEXT, REPEATED_TEXT

N = 20_000


def _spans(first: int, n: int) -> RowBatch:
    batch = RowBatch()
    for i in range(first, first + n):
        batch.add_span(run_id="r", trace_id=f"{i * 7919:032x}", span_id=f"{i * 104729:016x}",
                       parent_span_id=None, name=f"step-{i * 31337:x}", kind="INTERNAL",
                       service=f"service-{i}", start_ns=i, end_ns=i + 1, status_code="UNSET",
                       status_message=None, attributes={"same": "for every span"},
                       resource_json=None, scope=None)
    return batch


def _methods(path) -> dict[str, set[str]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute("SELECT column_name, compression FROM pragma_storage_info('spans') "
                           "WHERE segment_type = 'VARCHAR'").fetchall()
    finally:
        con.close()
    out: dict[str, set[str]] = {}
    for column, method in rows:
        out.setdefault(column, set()).add(method)
    return out


def _check(path) -> None:
    methods = _methods(path)
    for column in ("trace_id", "span_id", "attributes"):
        assert column in DISTINCT_TEXT
        assert methods[column] == {"FSST"}, (column, methods[column])
    for column in ("name", "service"):
        assert column in REPEATED_TEXT
        assert methods[column] == {"Dictionary"}, (column, methods[column])


def test_a_file_store_compresses_its_text_columns_as_chosen(tmp_path):
    path = tmp_path / "run.duckdb"
    with RunStore(path) as store:
        writer = store.writer()
        writer.write(_spans(0, N // 2))
    _check(path)
    # opened again, written again: the choice is the table's, kept in the file
    with RunStore(path) as store:
        writer = store.writer()
        writer.write(_spans(N // 2, N // 2))
    _check(path)
    with RunStore(path, read_only=True) as store:
        with store.cursor() as cur:
            assert cur.execute("SELECT count(DISTINCT name), count(*) FROM spans"
                               ).fetchall() == [(N, N)]


def test_a_lake_leaves_compression_to_ducklake():
    assert not any("COMPRESSION" in stmt for stmt in lake_ddl())


def test_a_file_in_a_newer_storage_format_leaves_compression_to_duckdb(tmp_path):
    # DuckDB 1.3's format (written only when asked) has DICT_FSST in place of dictionary and
    # FSST, and naming those in a table's DDL is an error there
    path = tmp_path / "run.duckdb"
    duckdb.connect(str(path), config={"storage_compatibility_version": "v1.3.0"}).close()
    with RunStore(path) as store:
        store.writer().write(_spans(0, 2_000))
    assert _methods(path)["trace_id"] == {"DICT_FSST"}
    with RunStore(path, read_only=True) as store:
        with store.cursor() as cur:
            assert cur.execute("SELECT count(*) FROM spans").fetchall() == [(2_000,)]
