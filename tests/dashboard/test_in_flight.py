"""The In flight tab without a browser: the board's order across ticks, its table, and the tab
over the demo scenario's run (replayed into a real store), whose weight sync hangs with prompt
groups waiting and whose fleet serves version 1 while the trainer moves on."""

from __future__ import annotations

import pandas as pd
import pytest

from rolloutscope.dashboard.app import TAB_NAMES, build_app
from rolloutscope.dashboard.in_flight import BoardOrder, board_rows, lag_distribution, step_rows
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore

S = 10**9


def tick(*rows: tuple[str, int]) -> pd.DataFrame:
    """An in_flight read: (span id, start in s)."""
    return pd.DataFrame({"span_id": [r[0] for r in rows],
                         "start_ns": [r[1] * S for r in rows]})


def test_a_row_keeps_its_place_until_it_leaves_and_new_rows_join_at_the_bottom():
    order = BoardOrder()
    first = order.arrange(tick(("a", 3), ("b", 1), ("c", 2)))
    assert list(first.span_id) == ["b", "c", "a"]  # oldest first
    # c finished; d (which started before everything: a late marker) and e are new
    second = order.arrange(tick(("e", 9), ("a", 3), ("d", 0), ("b", 1)))
    assert list(second.span_id) == ["b", "a", "d", "e"]
    # a later read in another order changes nothing
    assert list(order.arrange(tick(("d", 0), ("e", 9), ("b", 1), ("a", 3))).span_id) == \
        ["b", "a", "d", "e"]
    # a rollout that left and comes back (its span id again) joins at the bottom
    assert list(order.arrange(tick(("c", 2), ("b", 1))).span_id) == ["b", "c"]


def test_the_board_counts_age_deadline_and_progress_from_now():
    rows = pd.DataFrame({
        "rollout_id": ["p1", "p2"], "attempt": pd.array([0, pd.NA], dtype="Int64"),
        "phase": ["generating", "queued"], "start_ns": [10 * S, 50 * S],
        "deadline_start_ns": pd.array([20 * S, pd.NA], dtype="Int64"),
        "budget_s": [60.0, None], "shard_idx": pd.array([2, pd.NA], dtype="Int64"),
        "server_name": [None, "agent"], "last_name": ["rl.router.request ended", "x"],
        "last_ns": [95 * S, 50 * S], "trace_id": ["t1", "t2"]})
    table = board_rows(rows, now_ns=100 * S)
    assert table["age (s)"].tolist() == [90.0, 50.0]
    # overdue by 20 s; the queued rollout has no deadline yet: blank, not NaN
    assert table["deadline left (s)"].tolist() == ["-20.0", ""]
    assert table["engine"].tolist() == ["shard 2", "agent"]
    assert table["since (s)"].tolist() == [5.0, 50.0]


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("in-flight") / "demo.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("demo"), store, run_id="demo")
    with RunStore(path, read_only=True) as store:
        yield store


def test_the_tab_shows_what_the_demo_left_in_flight_and_its_staleness(demo_store):
    app = build_app(demo_store, live=False)
    app[1].active = TAB_NAMES.index("In flight")
    view = app.dashboard.in_flight
    board = view._board.value
    # the demo ends on a hung weight sync: its prompt groups wait behind the sync's fence
    assert len(board) == 21, board
    assert set(board.phase) == {"queued behind weight_sync fence"}
    assert (board["age (s)"] > 0).all()
    assert board["age (s)"].is_monotonic_decreasing  # oldest first
    assert "21 rollout(s) in flight when the run's last span arrived" in \
        view._board_note.object
    steps = view._steps.value
    # the fleet synced once, to version 1: each step trains on data a step older than the last
    assert steps["train step"].tolist() == list(range(1, 12))
    assert steps["lag max"].tolist() == [0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9]
    assert steps["newest weights"].max() == 1
    dist = lag_distribution(view._staleness)
    assert dist["groups"].sum() == steps["groups"].sum() == 220
    assert "220 prompt group(s) trained" in view._stale_note.object
    assert step_rows(view._staleness).equals(steps)


def test_the_board_reads_the_same_through_a_collector(tmp_path):
    """What ``rolloutscope serve``'s own dashboard process reads (``RemoteRunStore``, the
    collector's query endpoint) is what the file holds, window and row bound included."""
    import shutil

    from rolloutscope.collectors.exporter import instrument
    from rolloutscope.dashboard.in_flight import commit_ordered, read_board
    from rolloutscope.store.remote import RemoteRunStore
    from tests.collectors.conftest import start_collector
    from tests.store.conftest import SpanKit, T0
    from tests.store.test_in_flight import send_run

    inst = instrument(tmp_path / "run.duckdb", service_name="tests", run_id="run-1")
    try:
        send_run(SpanKit(inst))
        assert inst.flush()
    finally:
        inst.shutdown()
    shutil.copy(tmp_path / "run.duckdb", tmp_path / "served.duckdb")
    collector = start_collector(tmp_path / "served.duckdb")
    try:
        with RunStore(tmp_path / "run.duckdb", read_only=True) as local, \
                RemoteRunStore(collector.http) as remote:
            assert commit_ordered(local) and commit_ordered(remote)
            for window_rows in (1, 200_000):
                now = T0 + 60 * S
                want, total = read_board(local, "run-1", now, window_rows=window_rows)
                got, remote_total = read_board(remote, "run-1", now, window_rows=window_rows)
                assert total == remote_total == 5
                pd.testing.assert_frame_equal(got, want)
    finally:
        assert collector.stop() == 0


def test_picking_a_row_opens_its_trace(demo_store):
    app = build_app(demo_store, live=False)
    app[1].active = TAB_NAMES.index("In flight")
    view = app.dashboard.in_flight
    trace = view._board.value.trace_id.iloc[3]
    view._board.selection = [3]
    assert view.data.trace_id == trace
    assert app[1].active == TAB_NAMES.index("Traces")
