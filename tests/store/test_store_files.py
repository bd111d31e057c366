"""The run store as a file: versions, read-only opens, one writer, and what bad opens say."""

from __future__ import annotations

import subprocess
import sys
import threading

import duckdb
import pytest

from rolloutscope.store import (
    NotARunStoreError,
    QueueFullError,
    ReadOnlyStoreError,
    RowBatch,
    RunStore,
    SchemaVersionError,
    StoreBusyError,
    StoreError,
)
from rolloutscope.store.schema import COLUMNS, SCHEMA_VERSION


@pytest.fixture
def store_path(tmp_path):
    """This module is about the DuckDB file itself (lakes: tests/lake/)."""
    return tmp_path / "run.duckdb"


def _span_batch(n: int, *, run_id: str = "r", prefix: str = "0") -> RowBatch:
    """n spans with ids unique for a distinct prefix (hex digits)."""
    batch = RowBatch()
    for i in range(n):
        batch.add_span(run_id=run_id, trace_id=f"{i:032x}", span_id=f"{prefix}{i:x}".rjust(16, "0"),
                       parent_span_id=None, name="rl.train_step", kind="INTERNAL",
                       service="svc", start_ns=i, end_ns=i + 1, status_code="UNSET",
                       status_message=None, attributes={"i": i}, resource_json=None, scope=None)
    return batch


def test_a_directory_path_holds_run_duckdb(tmp_path):
    with RunStore(tmp_path) as store:
        assert store.path == tmp_path / "run.duckdb"
    assert (tmp_path / "run.duckdb").exists()


def test_the_schema_version_is_recorded_in_the_file(store_path):
    RunStore(store_path).close()
    con = duckdb.connect(str(store_path), read_only=True)
    assert con.execute("SELECT value FROM store_meta WHERE key='schema_version'").fetchall() == [
        (str(SCHEMA_VERSION),)]
    con.close()


def test_a_file_from_a_newer_version_is_refused_with_both_versions_named(store_path):
    RunStore(store_path).close()
    con = duckdb.connect(str(store_path))
    con.execute("UPDATE store_meta SET value = ? WHERE key = 'schema_version'",
                [str(SCHEMA_VERSION + 1)])
    con.close()
    for read_only in (False, True):
        with pytest.raises(SchemaVersionError) as err:
            RunStore(store_path, read_only=read_only)
        assert f"version {SCHEMA_VERSION + 1}" in str(err.value)
        assert f"up to {SCHEMA_VERSION}" in str(err.value)


def test_a_foreign_duckdb_file_is_not_taken_for_a_run(store_path):
    con = duckdb.connect(str(store_path))
    con.execute("CREATE TABLE something (x INT)")
    con.close()
    with pytest.raises(NotARunStoreError, match="not a rolloutscope run store"):
        RunStore(store_path)
    with pytest.raises(NotARunStoreError):
        RunStore(store_path, read_only=True)


def test_opening_a_missing_file_read_only_names_it(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        RunStore(tmp_path / "nope.duckdb", read_only=True)


def test_a_read_only_store_refuses_writes(store_path):
    RunStore(store_path).close()
    with RunStore(store_path, read_only=True) as ro:
        with pytest.raises(ReadOnlyStoreError):
            ro.writer()
        with pytest.raises(ReadOnlyStoreError):
            ro.register_run("x")


def test_a_second_process_cannot_open_a_file_being_written(store_path):
    with RunStore(store_path):
        code = ("import sys\n"
                "from rolloutscope.store import RunStore, StoreBusyError\n"
                "try:\n"
                f"    RunStore({str(store_path)!r}, read_only=True)\n"
                "except StoreBusyError as e:\n"
                "    print('busy:', e); sys.exit(3)\n")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert "rolloutscope serve" in proc.stdout
    assert StoreBusyError  # the class the child raised is the store's own


def test_concurrent_writers_from_several_threads_lose_nothing(store_path):
    threads, per_thread, batch_size = 8, 40, 50
    with RunStore(store_path) as store:
        writer = store.writer(max_rows=500, max_delay_ms=5)
        errors: list[BaseException] = []

        def produce(t: int) -> None:
            try:
                for b in range(per_thread):
                    writer.submit(_span_batch(batch_size, run_id=f"run-{t}",
                                              prefix=f"{t:x}{b:03x}{0:04x}"), block=True)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert writer.flush(30)
        assert not errors
        counts = dict(store.query("SELECT run_id, count(*) FROM spans GROUP BY run_id"))
        assert counts == {f"run-{t}": per_thread * batch_size for t in range(threads)}
        assert store.query("SELECT count(DISTINCT span_id) FROM spans") == [
            (threads * per_thread * batch_size,)]
        assert writer.stats.committed_rows == threads * per_thread * batch_size
        assert writer.stats.commits < threads * per_thread  # group commit batched them


def test_a_full_queue_rejects_the_batch_and_keeps_what_was_accepted(store_path):
    with RunStore(store_path) as store:
        # the writer holds the first batch 3 s before committing it: the second submit finds
        # it queued even on a machine busy enough to pause this thread for a while
        writer = store.writer(max_queued_rows=100, max_delay_ms=3000, max_rows=10_000)
        accepted = writer.submit(_span_batch(80, prefix="a0000"))
        with pytest.raises(QueueFullError) as err:
            writer.submit(_span_batch(80, prefix="b0000"))
        assert err.value.rows == 80 and err.value.limit == 100
        assert accepted.wait(30)
        assert store.query("SELECT count(*) FROM spans") == [(80,)]
        assert writer.stats.rejected_rows == 80


def _unstorable_batch() -> RowBatch:
    """A metrics row that went round ``RowBatch``'s checks (``add_row`` refuses it, see
    tests/store/test_column_fit.py): what a check that missed something would let through."""
    bad = RowBatch()
    row = dict.fromkeys(COLUMNS["metrics"])
    row.update(run_id="r", name="m", ts_ns="not-a-number")
    bad.tables["metrics"] = [tuple(row.values())]
    bad.rows = 1
    return bad


def test_a_failed_commit_is_reported_to_its_waiter_and_the_writer_carries_on(store_path):
    with RunStore(store_path) as store:
        writer = store.writer(max_delay_ms=1)
        bad = _unstorable_batch()
        with pytest.raises(StoreError):
            writer.submit(bad).wait(10)
        assert writer.submit(_span_batch(3)).wait(10)
        assert store.query("SELECT count(*) FROM spans") == [(3,)]
        assert writer.stats.failed_rows == 1


def test_registered_runs_keep_their_config_for_detectors(store_path):
    with RunStore(store_path) as store:
        store.register_run("r1", source="replay", scenario="snapshot-outlasts-deadline",
                           variants=["pause-deadlines-during-snapshot"], seed=7,
                           config={"rollout_timeout_s": 180, "prepare_timeout_s": 300})
        assert store.run_config("r1") == {"rollout_timeout_s": 180, "prepare_timeout_s": 300}
        row = store.query_df("SELECT * FROM runs").iloc[0]
        assert (row.source, row.scenario, row.seed) == ("replay", "snapshot-outlasts-deadline", 7)
        with pytest.raises(ValueError):
            store.register_run("r2", source="bogus")


def test_unknown_columns_are_refused_by_name():
    with pytest.raises(ValueError, match="no_such_column"):
        RowBatch().add_row("metrics", no_such_column=1)


def test_a_file_with_older_views_is_read_through_the_current_ones(store_path):
    RunStore(store_path).close()
    con = duckdb.connect(str(store_path))
    con.execute("DROP VIEW incidents")  # as if written before that view existed
    con.execute("UPDATE store_meta SET value = 'older' WHERE key = 'views_digest'")
    con.close()
    with RunStore(store_path, read_only=True) as ro:
        seen: list[int] = []

        def read() -> None:
            seen.append(len(ro.view("incidents").columns))

        read()
        worker = threading.Thread(target=read)  # temporary views live per connection
        worker.start()
        worker.join()
        assert seen == [10, 10]


def test_a_marker_and_its_span_in_one_commit_leave_no_open_interval(store_path):
    with RunStore(store_path) as store:
        batch = RowBatch()
        common = dict(run_id="r", trace_id="a" * 32, parent_span_id=None, name="rl.deadline",
                      kind="INTERNAL", service="svc", start_ns=1, status_code="UNSET",
                      status_message=None, resource_json=None, scope=None)
        batch.add_span(span_id="1" * 16, end_ns=1,
                       attributes={"rolloutscope.open_marker_for": "2" * 16}, **common)
        batch.add_span(span_id="2" * 16, end_ns=5, attributes={}, **common)
        store.writer().write(batch)
        assert store.query("SELECT count(*) FROM open_spans") == [(0,)]
        assert store.query("SELECT span_id, end_ns, is_open FROM all_spans") == [
            ("2" * 16, 5, False)]


def test_a_span_that_ends_closes_only_its_own_runs_open_interval(store_path):
    """A capture and its replay share span ids (the engine derives them from the seed): the
    replay ending a span must not close the capture's interval of the same id."""
    with RunStore(store_path) as store:
        common = dict(trace_id="a" * 32, parent_span_id=None, name="rl.gen_fleet.shard_state",
                      kind="INTERNAL", service="svc", start_ns=1, status_code="UNSET",
                      status_message=None, resource_json=None, scope=None)
        opened = RowBatch()
        for run_id in ("capture", "replay"):
            opened.add_span(run_id=run_id, span_id="1" * 16, end_ns=1,
                            attributes={"rolloutscope.open_marker_for": "2" * 16}, **common)
        store.writer().write(opened)
        assert store.query("SELECT run_id FROM open_spans ORDER BY run_id") == [
            ("capture",), ("replay",)]
        ended = RowBatch()
        ended.add_span(run_id="replay", span_id="2" * 16, end_ns=5, attributes={}, **common)
        store.writer().write(ended)
        assert store.query("SELECT run_id FROM open_spans") == [("capture",)]
        assert store.query("SELECT run_id, is_open FROM all_spans ORDER BY run_id") == [
            ("capture", True), ("replay", False)]
    with RunStore(store_path) as store:  # closing drops markers of ended spans: of its run only
        assert store.query("SELECT run_id FROM open_spans") == [("capture",)]


def test_every_connection_and_cursor_buffers_whole_results(tmp_path):
    """A store's connection and its cursors hold a query's result for the reader in a large
    buffer (store.STREAM_BUFFER_SQL): with DuckDB's 976.5 KiB default, reading the incidents of
    a 10^8-span run to the client parked every thread for good."""
    import duckdb as _duckdb

    from rolloutscope.store.store import STREAM_BUFFER_SQL

    want = STREAM_BUFFER_SQL.split("'")[1]
    probe = _duckdb.connect()
    probe.execute(STREAM_BUFFER_SQL)
    expected = probe.execute("SELECT current_setting('streaming_buffer_size')").fetchall()[0][0]
    probe.close()
    assert expected != "976.5 KiB", (want, expected)
    path = tmp_path / "run.duckdb"
    for read_only in (False, True):
        with RunStore(path, read_only=read_only) as store:
            assert store.query("SELECT current_setting('streaming_buffer_size')")[0][0] \
                == expected
            cur = store.new_cursor()
            assert cur.execute("SELECT current_setting('streaming_buffer_size')").fetchall() \
                == [(expected,)]
            cur.close()
