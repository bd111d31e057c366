"""A view's ``<view>_of(run, floor_ns)`` macro reads what the view filtered on the run and the
floor reads, row for row, only faster: on a synthetic run whose released-Gym share carries model
calls with backend tries and calls outside any Gym span, holding a second run beside it, and on
the real Gym 0.7.0 capture posted to a collector. The dashboard's capped reads go through it.

A view's ``<view>_since(run, since_ns)`` macro reads the view's rows of the run that an event at
or after since_ns reached, each row as the view has it: every row whose times reach since_ns,
and no row of another run or of an execution with no event since. A live tick reads it."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from rolloutscope.dashboard import datastore
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.store import RunStore, views
from tests.gym_capture import collect_capture
from tests.synthetic_run import synthetic_run

from .test_view_rewrites import _norm

OTHER_RUN = "beside"


def _rows(store: RunStore, sql: str, params: list) -> Counter:
    return Counter(repr(_norm(r)) for r in store.query(sql, params))


def _floors(store: RunStore, view: str, run: str) -> list[int | None]:
    """No floor; floors at the view's start times' 0th, 10th, 50th, 90th and 100th
    percentiles (the last keeps a handful of rows); and floors between a model call and its
    backend tries, at the three tries that start longest after their call."""
    got = store.query(
        f"SELECT quantile_disc(start_ns, [0.0, 0.1, 0.5, 0.9, 1.0]) FROM {view} "
        "WHERE run_id = ?", [run])[0][0]
    inside = [r[0] for r in store.query(
        "SELECT h.start_ns FROM http_requests h JOIN all_spans c ON c.run_id = h.run_id "
        "AND c.trace_id = h.trace_id AND c.span_id = h.parent_span_id "
        "WHERE h.run_id = ? AND c.name LIKE 'gym.model.%' "
        "ORDER BY h.start_ns - c.start_ns DESC LIMIT 3", [run])]
    return [None, *(got or []), *inside]  # (no percentiles: a view with no row in the run)


def assert_readers_read_as_their_views(path: Path) -> int:
    """Every reader against its view, per run and floor; the rows compared, summed."""
    compared = 0
    with RunStore(path, read_only=True) as store:
        runs = store.run_ids()
        for view in sorted(views.readers()):
            for run in runs:
                for floor in _floors(store, view, run):
                    want = _rows(store, f"SELECT * FROM {view} WHERE run_id = ?"
                                 + (" AND start_ns >= ?" if floor is not None else ""),
                                 [run] + ([floor] if floor is not None else []))
                    got = _rows(store, f"SELECT * FROM {view}_of(?, ?)", [run, floor])
                    assert got == want, (view, run, floor, list((want - got).elements())[:2],
                                         list((got - want).elements())[:2])
                    compared += sum(want.values())
            # NULL for both: the whole view
            assert _rows(store, f"SELECT * FROM {view}_of(NULL, NULL)", []) == \
                _rows(store, f"SELECT * FROM {view}", [])
    return compared


@pytest.fixture(scope="module")
def synthetic_two_runs(tmp_path_factory) -> Path:
    path = synthetic_run(tmp_path_factory.mktemp("readers") / "synthetic.duckdb", spans=60_000)
    with RunStore(path) as store:
        (run,) = store.run_ids()
        # model calls no Gym span served (any OTel client's): copies of backend tries, each
        # under a parent that is no gym.model.* span
        store.query(
            "INSERT INTO spans SELECT * REPLACE (upper(left(md5(span_id), 16)) AS span_id, "
            "'0000000000000000' AS parent_span_id) FROM spans WHERE span_id IN "
            "(SELECT span_id FROM http_requests WHERE model_endpoint AND NOT internal "
            " ORDER BY span_id LIMIT 500)")
        # the same spans and events again, under a run of their own
        for table in ("spans", "open_spans", "span_events"):
            store.query(f"INSERT INTO {table} SELECT * REPLACE (? AS run_id) FROM {table} "
                        "WHERE run_id = ?", [OTHER_RUN, run])
    return path


def test_the_readers_are_the_model_call_views():
    # the Gym views a dashboard reads the latest rows of, and the two model_calls reads
    assert views.readers() == {"model_calls", "gym_rollouts", "llm_calls", "http_requests"}
    assert views.incremental() == {"completions"}


EVENT_TIMES = {"completions": ("completed_ns", "ack_ns")}  # the times an event sets, per view


def assert_incremental_reads_are_the_views_rows(path: Path) -> int:
    """Every ``_since`` macro against its view, per run and since (no since; the view's times'
    0th, 10th, 50th, 90th and 100th percentiles, and one past the run's last event); the rows
    compared."""
    compared = 0
    with RunStore(path, read_only=True) as store:
        runs = store.run_ids()
        for view in sorted(views.incremental()):
            first, second = EVENT_TIMES[view]
            for run in runs:
                whole = _rows(store, f"SELECT * FROM {view} WHERE run_id = ?", [run])
                assert _rows(store, f"SELECT * FROM {view}_since(?, NULL)", [run]) == whole
                times = store.query(
                    f"SELECT quantile_disc(t, [0.0, 0.1, 0.5, 0.9, 1.0]), (SELECT max(ts_ns) "
                    f"+ 1 FROM span_events WHERE run_id = ?) FROM "
                    f"(SELECT {first} AS t FROM {view} WHERE run_id = ? UNION ALL "
                    f" SELECT {second} FROM {view} WHERE run_id = ?) WHERE t IS NOT NULL",
                    [run, run, run])[0]
                for since in [*times[0], times[1]]:
                    got = _rows(store, f"SELECT * FROM {view}_since(?, ?)", [run, since])
                    reached = _rows(store, f"SELECT * FROM {view} WHERE run_id = ? AND "
                                    f"({first} >= ? OR {second} >= ?)", [run, since, since])
                    # each row as the view has it; every row an event since sets a time of
                    assert not got - whole, (view, run, since, list(got - whole)[:2])
                    assert not reached - got, (view, run, since, list(reached - got)[:2])
                    if since == times[1]:
                        assert not got
                    compared += sum(got.values())
            assert _rows(store, f"SELECT * FROM {view}_since(NULL, NULL)", []) == \
                _rows(store, f"SELECT * FROM {view}", [])
    return compared


def test_an_incremental_read_reads_the_rows_an_event_since_reached(synthetic_two_runs,
                                                                   tmp_path):
    path = tmp_path / "events.duckdb"
    path.write_bytes(synthetic_two_runs.read_bytes())
    with RunStore(path) as store:
        run = next(r for r in store.run_ids() if r != OTHER_RUN)
        unacked, late = store.query(
            "SELECT (SELECT count(*) FROM completions WHERE run_id = $1 AND ack_ns IS NULL), "
            "(SELECT max(ts_ns) FROM span_events WHERE run_id = $1)", {"1": run})[0]
        assert unacked > 0  # rows no later event reaches: an incremental read leaves them out
        # what a real sender may send besides: an execution with no attempt, a completion
        # announced twice (the first counts), an ACK repeated long after the first
        store.query(
            "INSERT INTO span_events SELECT * REPLACE (NULL AS attempt, span_id || 'n' AS "
            "span_id, rollout_id || '-none' AS rollout_id) FROM span_events WHERE run_id = $1 "
            "AND name LIKE 'gym.agent.%' USING SAMPLE 20 ROWS (reservoir, 3)", {"1": run})
        store.query(
            "INSERT INTO span_events SELECT * REPLACE (ts_ns + $2 AS ts_ns, span_id || 'd' AS "
            "span_id) FROM span_events WHERE run_id = $1 AND name IN ('gym.agent.completed', "
            "'gym.agent.acknowledged') USING SAMPLE 30 ROWS (reservoir, 5)",
            {"1": run, "2": late})
    assert assert_incremental_reads_are_the_views_rows(path) > 1_000


def test_a_reader_reads_its_view_per_run_and_floor_on_a_synthetic_run(synthetic_two_runs):
    with RunStore(synthetic_two_runs, read_only=True) as store:
        assert len(store.run_ids()) == 2
        # the branches the floors must not cut: tries under a call, calls no Gym span serves
        assert store.query("SELECT count(*) FROM model_calls WHERE tries > 0")[0][0] > 0
        assert store.query("SELECT count(*) FROM model_calls WHERE source = 'http'")[0][0] > 0
    assert assert_readers_read_as_their_views(synthetic_two_runs) > 10_000


def test_a_reader_reads_its_view_on_the_real_gym_capture(tmp_path):
    assert assert_readers_read_as_their_views(collect_capture(tmp_path / "gym.duckdb")) > 0


def test_a_capped_dashboard_read_through_the_reader_holds_the_views_rows(synthetic_two_runs,
                                                                        monkeypatch):
    """Caps small enough that the floor applies: the frames are the latest rows either way."""
    for name in ("gym_rollouts", "model_calls"):
        monkeypatch.setitem(datastore.VIEWS, name,
                            dataclasses.replace(datastore.VIEWS[name], cap=300))
    with RunStore(synthetic_two_runs, read_only=True) as store:
        for run in store.run_ids():
            frames = {}
            for through in (True, False):
                monkeypatch.setattr(DataStore, "macro_reads", through)
                data = DataStore(store, run_id=run)
                frames[through] = data
                for name in ("gym_rollouts", "model_calls"):
                    assert data._cap_floor(datastore.VIEWS[name]) is not None
                    assert len(data.frames[name]) == 300
                    assert set(data.frames[name].run_id) == {run}
            for name in ("gym_rollouts", "model_calls"):
                pd.testing.assert_frame_equal(frames[True].frames[name],
                                              frames[False].frames[name])


def test_a_view_file_may_define_only_its_own_reader(tmp_path):
    text = dict(views.definitions())["model_calls"]
    (tmp_path / "36_model_calls.sql").write_text(text)
    assert views.read_folder(tmp_path) == (("model_calls", text),)
    (tmp_path / "36_model_calls.sql").write_text(
        text.replace("MACRO model_calls_of", "MACRO calls_since"))
    with pytest.raises(RuntimeError, match="may define only the macros model_calls_of, "
                                           "model_calls_since, model_calls_window"):
        views.read_folder(tmp_path)


def test_a_temporary_install_makes_the_reader_temporary_too():
    temp = views.as_temporary(dict(views.definitions())["gym_rollouts"])
    assert "CREATE OR REPLACE TEMP MACRO gym_rollouts_of(" in temp
    assert "CREATE OR REPLACE TEMP VIEW gym_rollouts AS" in temp
    assert "CREATE OR REPLACE MACRO" not in temp


def test_a_live_tick_reads_the_completions_an_event_reached_and_holds_a_full_reads_rows(
        synthetic_two_runs, tmp_path):
    path = tmp_path / "live.duckdb"
    path.write_bytes(synthetic_two_runs.read_bytes())
    with RunStore(path) as store:
        run = next(r for r in store.run_ids() if r != OTHER_RUN)
        data = DataStore(store, run_id=run, live=True)
        before = data.frames["completions"]
        unacked = before[before.ack_ns.isna()]
        assert len(unacked) > 5
        later = data.last_seen_ns() + 10**9
        # ACKs for three unacknowledged completions, and a completion of a new execution
        store.query(
            "INSERT INTO span_events SELECT * REPLACE ('gym.agent.acknowledged' AS name, "
            "$2 AS ts_ns) FROM span_events WHERE run_id = $1 AND name = 'gym.agent.completed' "
            "AND (rollout_id, attempt) IN (SELECT (rollout_id, attempt) FROM completions "
            "WHERE run_id = $1 AND ack_ns IS NULL ORDER BY rollout_id LIMIT 3)",
            {"1": run, "2": later})
        store.query(
            "INSERT INTO span_events SELECT * REPLACE ('r-new' AS rollout_id, $2 AS ts_ns) "
            "FROM span_events WHERE run_id = $1 AND name = 'gym.agent.completed' LIMIT 1",
            {"1": run, "2": later})
        read = []
        query = data._query

        def recording(sql, params=None):
            out = query(sql, params)
            if "completions" in sql:
                read.append(len(out))
            return out

        data._query = recording
        data.refresh()
        assert read == [4]  # the rows an event reached, not every unacknowledged one again
        got = data.frames["completions"].sort_values(["rollout_id", "attempt"])
        want = DataStore(store, run_id=run).frames["completions"].sort_values(
            ["rollout_id", "attempt"])
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
        assert got.ack_ns.isna().sum() == len(unacked) - 3 + 1  # r-new is not acknowledged
        assert "r-new" in set(got.rollout_id)
