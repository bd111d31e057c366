"""DuckDB's threads follow the readers: a file's writer alone commits on one thread, a reader's
cursor runs on the threads the store was opened with, and the writer lowers them again only once
no reader has held a cursor for ``WRITER_ALONE_AFTER_S``; a lake's stay as opened. The changes
never disturb a commit or a query running beside them, and the writer's Arrow C stream inserts
store every value as sent."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from rolloutscope.store import RowBatch, RunStore
from rolloutscope.store import store as store_module
from rolloutscope.store.schema import ARROW_SCHEMAS


def _spans(first: int, n: int) -> RowBatch:
    batch = RowBatch()
    for i in range(first, first + n):
        batch.add_span(run_id="r", trace_id=f"{i:032x}", span_id=f"{i:016x}",
                       parent_span_id=None, name="rl.train_step", kind="INTERNAL",
                       service="svc", start_ns=i, end_ns=i + 1, status_code="UNSET",
                       status_message=None, attributes={"i": i}, resource_json=None, scope=None)
    return batch


def _threads(store: RunStore) -> int:
    # on the owned connection: a cursor() would count as a reader and raise them
    return store.raw_connection().execute("SELECT current_setting('threads')").fetchall()[0][0]


def _statements(monkeypatch) -> list[str]:
    """Every statement the store's thread setting runs from now on, in order."""
    ran: list[str] = []
    execute = store_module._Threads._execute
    monkeypatch.setattr(store_module._Threads, "_execute",
                        lambda self, con, sql: ran.append(sql) or execute(self, con, sql))
    return ran


class _Clock:
    """The store's clock, moved by hand: what the grace period allows does not depend on how
    fast a loaded machine runs the test."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.time_ns = time.time_ns

    def monotonic(self) -> float:
        return self.now


def test_the_writer_alone_commits_on_one_thread_and_a_reader_gets_them_back(
        store_path, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(store_module, "time", clock)
    grace = store_module.WRITER_ALONE_AFTER_S
    with RunStore(store_path, threads=2) as store:
        assert _threads(store) == 2
        writer = store.writer()  # which reads the store's default run: a reader
        writer.write(_spans(0, 10))
        assert _threads(store) == 2
        clock.now += grace + 0.01
        writer.write(_spans(10, 10))
        assert _threads(store) == 1
        with store.cursor() as cur:
            assert cur.execute("SELECT current_setting('threads')").fetchall()[0][0] == 2
            clock.now += 10 * grace  # however long the reader holds its cursor
            writer.write(_spans(20, 10))  # a commit while a reader is in leaves them
            assert _threads(store) == 2
        clock.now += grace - 0.01
        writer.write(_spans(30, 10))  # and so does one within the grace after it
        assert _threads(store) == 2
        clock.now += 0.02
        writer.write(_spans(40, 10))
        assert _threads(store) == 1
        with store.reading():  # work on a cursor of its own (maintenance) counts as a reader
            assert _threads(store) == 2
        assert store.query("SELECT count(*) FROM spans") == [(50,)]


def test_a_store_opened_with_one_thread_or_without_a_writer_never_changes_them(
        store_path, monkeypatch):
    monkeypatch.setattr(store_module, "WRITER_ALONE_AFTER_S", 0.0)
    with RunStore(store_path, threads=1) as store:
        store.writer().write(_spans(0, 5))
        with store.cursor() as cur:
            assert cur.execute("SELECT current_setting('threads')").fetchall()[0][0] == 1
        store.writer().write(_spans(5, 5))
        assert _threads(store) == 1
    with RunStore(store_path, read_only=True, threads=2) as store:
        assert store.query("SELECT count(*) FROM spans") == [(10,)]
        assert _threads(store) == 2


def test_a_lakes_writer_never_changes_them(tmp_path, monkeypatch):
    # DuckLake's catalog queries run inside DuckDB's worker tasks, and lowering the threads
    # joins those workers while holding the lock each such query ends by taking: a hang (or an
    # abort) in a collector whose upkeep or readers ran beside the writer (_Threads)
    monkeypatch.setattr(store_module, "WRITER_ALONE_AFTER_S", 0.0)
    asked = _statements(monkeypatch)
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    with RunStore(lake, threads=2) as store:
        writer = store.writer()
        for k in range(3):
            writer.write(_spans(k * 5, 5))
            assert _threads(store) == 2
            assert store.query("SELECT count(*) FROM spans") == [(5 * (k + 1),)]
    assert asked == []


def _break(store: RunStore) -> None:
    """Every statement on the store's threads cursor now raises."""
    broken = store.raw_connection().cursor()
    broken.close()
    store._threads._cur = broken


def test_a_thread_setting_duckdb_refuses_fails_no_commit_and_no_read(
        store_path, monkeypatch, caplog):
    monkeypatch.setattr(store_module, "WRITER_ALONE_AFTER_S", 0.0)
    with RunStore(store_path, threads=2) as store, \
            caplog.at_level("WARNING", logger="rolloutscope.store.store"):
        writer = store.writer()
        writer.write(_spans(0, 5))
        assert _threads(store) == 1
        _break(store)  # a refused raise: the read runs on one thread, the next one retries
        assert store.query("SELECT count(*) FROM spans") == [(5,)]
        assert _threads(store) == 1
        with store.cursor() as cur:
            assert cur.execute("SELECT current_setting('threads')").fetchall()[0][0] == 2
        writer.write(_spans(5, 5))
        assert _threads(store) == 1  # and the writer still lowers them
        store.query("SELECT 1")
        _break(store)  # a refused lowering: the commit goes on, and the writer stops trying
        writer.write(_spans(10, 5))
        assert _threads(store) == 2
        writer.write(_spans(15, 5))
        assert _threads(store) == 2
        assert store.query("SELECT count(*) FROM spans") == [(20,)]
    assert "DuckDB's threads could not be changed (SET threads = 2)" in caplog.text
    assert caplog.text.count("could not be changed") == 1  # logged once


def test_changing_threads_under_concurrent_commits_and_queries_loses_nothing(
        store_path, monkeypatch):
    # no grace period: every commit that finds no reader lowers the threads and every reader
    # raises them, as often as the threads below can make it happen
    monkeypatch.setattr(store_module, "WRITER_ALONE_AFTER_S", 0.0)
    errors: list[BaseException] = []
    seen: list[list[int]] = [[], []]
    changes = _statements(monkeypatch)
    stop = threading.Event()
    with RunStore(store_path, threads=2) as store:
        writer = store.writer(max_delay_ms=1)

        def read(mine: list[int]) -> None:
            try:
                while not stop.is_set():
                    mine.append(store.query("SELECT count(*) FROM spans "
                                            "WHERE start_ns % 7 <> 8")[0][0])
                    time.sleep(0.001)
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)

        readers = [threading.Thread(target=read, args=(mine,)) for mine in seen]
        for t in readers:
            t.start()
        try:
            for k in range(150):
                writer.write(_spans(k * 200, 200), timeout=30)
        finally:
            stop.set()
            for t in readers:
                t.join(30)
        assert not errors, errors
        for mine in seen:  # each reader saw whole commits, never fewer rows than before
            assert mine and mine == sorted(mine)
            assert all(n % 200 == 0 for n in mine)
        assert store.query("SELECT count(*), count(DISTINCT span_id) FROM spans") == [
            (30_000, 30_000)]
    # the threads did change under them, both ways (a 2-core machine's worst case gives dozens)
    assert changes.count("SET threads = 1") >= 3 and changes.count("SET threads = 2") >= 3


def test_the_writers_arrow_stream_insert_stores_every_value_as_sent(store_path):
    schema = ARROW_SCHEMAS["spans"]
    values = {
        pa.string(): ["", "ünïcode ✓", None, "x" * 5000],
        pa.int64(): [-(2**63), 2**63 - 1, None, 0],
        pa.int32(): [-(2**31), 2**31 - 1, None, 7],
    }
    columns = {f.name: values[f.type] for f in schema}
    columns["run_id"] = ["a", "b", "c", "d"]
    columns["span_id"] = [f"{i:016x}" for i in range(4)]
    columns["trace_id"] = [f"{i:032x}" for i in range(4)]
    columns["start_ns"] = [1, 2, 3, 4]
    sent = pa.table(columns, schema=schema)
    with RunStore(store_path) as store:
        # commits only when flushed: what a commit holds does not depend on timing
        writer = store.writer(max_delay_ms=600_000)
        batch = RowBatch()
        batch.add_arrow("spans", sent)
        writer.submit(batch)
        assert writer.flush(30)
        with store.cursor() as cur:
            stored = cur.execute("SELECT * FROM spans ORDER BY start_ns").to_arrow_table()
        assert stored.cast(schema).equals(sent)
        # one commit of several requests: their tables concatenated, as chunks, and sliced
        before = writer.stats.commits
        commits = []
        for k in range(3):
            part = RowBatch()
            part.add_arrow("spans", sent.set_column(
                schema.get_field_index("start_ns"), "start_ns",
                pa.array([100 * (k + 1) + i for i in range(4)], pa.int64())))
            commits.append(writer.submit(part))
        assert writer.flush(30)
        assert all(c.error is None for c in commits)
        assert writer.stats.commits == before + 1
        with store.cursor() as cur:
            grouped = cur.execute("SELECT * FROM spans WHERE start_ns >= 100 "
                                  "ORDER BY start_ns").to_arrow_table()
    assert grouped.num_rows == 12
    assert grouped.drop_columns(["start_ns"]).cast(schema.remove(
        schema.get_field_index("start_ns"))).equals(pa.concat_tables(
            [sent.drop_columns(["start_ns"])] * 3))


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "threads.duckdb"
