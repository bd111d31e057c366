"""A file's writer checkpoints it at the first commit that fills a row group of spans once the
WAL holds ``CHECKPOINT_AFTER``, so that the next checkpoint does not decompress and compress a
partly filled row group again; a commit that fills none, or a small WAL, leaves it to later, and
a lake is never checkpointed by its writer."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from rolloutscope.store import RowBatch, RunStore
from rolloutscope.store import writer as writer_module
from rolloutscope.store.schema import ARROW_SCHEMAS


def _spans(first: int, n: int) -> RowBatch:
    schema = ARROW_SCHEMAS["spans"]
    ids = range(first, first + n)
    columns = {field.name: pa.nulls(n, field.type) for field in schema}
    columns.update(
        run_id=pa.array(["r"] * n), trace_id=pa.array([f"{i:032x}" for i in ids]),
        span_id=pa.array([f"{i:016x}" for i in ids]), name=pa.array(["rl.train_step"] * n),
        start_ns=pa.array(list(ids), pa.int64()), end_ns=pa.array([i + 1 for i in ids],
                                                                   pa.int64()))
    batch = RowBatch()
    batch.add_arrow("spans", pa.table(columns, schema=schema))
    return batch


def _commit(store: RunStore, batch: RowBatch) -> None:
    """Commit ``batch``, then an empty one: the writer checkpoints after it answers a commit,
    and once it has taken up the next, what it did after the last is done."""
    writer = store.writer()
    assert writer.submit(batch).wait(60)
    assert writer.submit(RowBatch()).wait(60)


def _wal(store: RunStore) -> int:
    wal = store.path.with_name(store.path.name + ".wal")
    return wal.stat().st_size if wal.exists() else 0


def test_a_commit_that_fills_a_row_group_checkpoints_once_the_wal_is_big_enough(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setattr(writer_module, "ROW_GROUP_ROWS", 1_000)
    monkeypatch.setattr(writer_module, "CHECKPOINT_AFTER", 1)
    store = RunStore(tmp_path / "run.duckdb")
    writer = store.writer()
    _commit(store, _spans(0, 600))
    assert writer.stats.checkpoints == 0 and _wal(store) > 0  # no row group filled yet
    _commit(store, _spans(600, 300))
    assert writer.stats.checkpoints == 0 and _wal(store) > 0
    _commit(store, _spans(900, 300))  # 1,200 rows: the first row group is full
    assert writer.stats.checkpoints == 1 and _wal(store) == 0
    _commit(store, _spans(1_200, 300))  # fills nothing: the WAL waits
    assert writer.stats.checkpoints == 1 and _wal(store) > 0
    store.close()


def test_a_small_wal_is_left_to_a_later_commit_that_fills_a_row_group(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "ROW_GROUP_ROWS", 1_000)
    store = RunStore(tmp_path / "run.duckdb")
    writer = store.writer()
    monkeypatch.setattr(writer_module, "CHECKPOINT_AFTER", 1 << 40)
    _commit(store, _spans(0, 1_200))  # fills a row group, but the WAL is small
    assert writer.stats.checkpoints == 0 and _wal(store) > 0
    monkeypatch.setattr(writer_module, "CHECKPOINT_AFTER", 1)
    _commit(store, _spans(1_200, 300))  # big enough now, but this commit fills none
    assert writer.stats.checkpoints == 0
    _commit(store, _spans(1_500, 600))  # 2,100 rows: the second one is full
    assert writer.stats.checkpoints == 1 and _wal(store) == 0
    store.close()


def test_the_rows_a_file_held_before_count_toward_its_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "ROW_GROUP_ROWS", 1_000)
    monkeypatch.setattr(writer_module, "CHECKPOINT_AFTER", 1)
    store = RunStore(tmp_path / "run.duckdb")
    _commit(store, _spans(0, 900))
    store.close()
    store = RunStore(tmp_path / "run.duckdb")
    writer = store.writer()
    _commit(store, _spans(900, 200))  # 1,100 rows in the file
    assert writer.stats.checkpoints == 1
    assert store.query("SELECT count(*) FROM spans") == [(1_100,)]
    store.close()


def test_the_row_group_size_is_duckdbs(tmp_path):
    con = duckdb.connect(str(tmp_path / "rg.duckdb"))
    con.execute("CREATE TABLE t AS SELECT range AS i FROM range(300000)")
    con.execute("CHECKPOINT")
    groups = con.execute("SELECT row_group_id, sum(count) FROM pragma_storage_info('t') "
                         "WHERE column_name = 'i' AND segment_type = 'BIGINT' "
                         "GROUP BY row_group_id ORDER BY row_group_id").fetchall()
    con.close()
    assert [rows for _, rows in groups] == [writer_module.ROW_GROUP_ROWS] * 2 + [
        300_000 - 2 * writer_module.ROW_GROUP_ROWS]


def test_a_lakes_writer_leaves_checkpoints_to_the_lake(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "ROW_GROUP_ROWS", 100)
    monkeypatch.setattr(writer_module, "CHECKPOINT_AFTER", 1)
    with RunStore(f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}") as store:
        writer = store.writer()
        _commit(store, _spans(0, 250))
        assert writer.stats.checkpoints == 0
        assert store.query("SELECT count(*) FROM spans") == [(250,)]
