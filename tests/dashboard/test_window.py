"""Window mode (docs/dashboard.md#window-mode): a run larger than the dashboard's span threshold
has its interval views read for a stretch of time. On a synthetic run with the threshold set
low: the frames hold exactly the rows of the window (against a direct query of the views),
moving the window reads the new stretch's rows, sessions share a window's frames, the tabs say
which stretch they show, the whole-run picture still covers the run, and a run under the
threshold is read whole as before."""

from __future__ import annotations

import html
import re
import threading

import pandas as pd
import pytest

from rolloutscope.dashboard import run_picture
from rolloutscope.dashboard import shared as sh
from rolloutscope.dashboard.datastore import VIEWS, DataStore
from rolloutscope.dashboard.tabs import Checkpoints, Overview, Rollouts, window_text
from rolloutscope.dashboard.time_views import Fleet, Timeline
from rolloutscope.store import RunStore
from tests.synthetic_run import synthetic_run

WINDOWED = {name: spec.times for name, spec in VIEWS.items() if spec.times}
S = 10**9


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return synthetic_run(tmp_path_factory.mktemp("window") / "run.duckdb", spans=20_000)


@pytest.fixture(scope="module")
def store(path):
    with RunStore(path, read_only=True) as s:
        yield s


def reads(window_spans: int = 1_000, minutes: float = 15.0) -> sh.SharedReads:
    return sh.SharedReads(sh.DashboardLimits(window_spans=window_spans, window_minutes=minutes))


def expected(store: RunStore, run: str, name: str, lo: int, hi: int | None) -> pd.DataFrame:
    """The rows of view ``name`` overlapping [lo, hi), read from the view itself."""
    start, end = WINDOWED[name]
    sql = f"SELECT * FROM {name} WHERE run_id = ? AND ({end} IS NULL OR {end} >= ?)"
    params = [run, lo]
    if hi is not None:
        sql += f" AND {start} < ?"
        params.append(hi)
    return store.query_df(sql, params)


def keys(df: pd.DataFrame, name: str) -> list[tuple]:
    key = VIEWS[name].key
    return sorted(tuple(str(v) for v in row) for row in df[list(key)].itertuples(index=False))


def assert_window_rows(data: DataStore, store: RunStore) -> int:
    """Every interval frame holds the rows of the window, no more and no fewer; their count."""
    lo, hi = data.window
    total = 0
    for name in WINDOWED:
        if not len(data.frames[name]) and not data._view_present(name):
            continue
        want = expected(store, data.run_id, name, lo, hi)
        assert keys(data.frames[name], name) == keys(want, name), name
        total += len(want)
    return total


def test_a_large_run_opens_on_its_last_minutes(store):
    data = DataStore(store, shared=reads())
    first, last = store.query("SELECT first_seen_ns, last_seen_ns FROM runs WHERE run_id = ?",
                              [data.run_id])[0]
    assert data.large and data.window == (last - 15 * 60 * S, None)
    n = assert_window_rows(data, store)
    whole = sum(len(expected(store, data.run_id, name, first, None)) for name in WINDOWED)
    assert 0 < n < whole / 2, (n, whole)
    # the run's time is still the run's, not the window's
    assert data.origin_ns() == first and data.last_seen_ns() == last
    assert data.window_seconds() == ((last - first) / S - 900, (last - first) / S)


def test_moving_the_window_reads_the_new_stretch(store):
    data = DataStore(store, shared=reads())
    old = data.frames["rollout_attempts"]
    data.show_range((600.0, 700.0))  # an incident picked, a link, a stretch of the picture
    lo, hi = data.window
    t0 = data.origin_ns()
    # widened to the window's length around the pick
    assert (lo, hi) == (t0 + 200 * S, t0 + 1100 * S)
    assert_window_rows(data, store)
    assert set(data.frames["rollout_attempts"].span_id) != set(old.span_id)
    # a zoom inside the window reads nothing
    frame = data.frames["rollout_attempts"]
    data.show_range((650.0, 660.0))
    assert data.window == (lo, hi) and data.frames["rollout_attempts"] is frame
    # the whole run, up to the head (cut to its last two hours: this one is shorter)
    data.show_range(data.whole_run())
    assert data.window == (max(data.last_seen_ns() - 120 * 60 * S, t0), None)
    assert_window_rows(data, store)
    # a stretch longer than the most a window holds is cut to its end
    data = DataStore(store, shared=reads())
    data.window_max_s = 1000.0
    data.show_range((1000.0, 3000.0))
    assert data.window == (t0 + 2000 * S, t0 + 3000 * S)
    assert_window_rows(data, store)


def test_picking_an_incident_reads_its_stretch_from_its_start(store):
    data = DataStore(store, shared=reads())
    data.window_max_s = 1000.0
    inc = data.incidents()
    oldest = inc.iloc[-1]  # still open: its stretch runs to the run's end
    assert oldest.start_ns < data.window[0]
    data.incident = str(oldest.incident_id)
    lo, hi = data.window
    assert lo <= oldest.start_ns < hi and hi - lo == 1000 * S
    assert_window_rows(data, store)
    drawn = data.frames["rollout_attempts"]
    assert len(drawn) and drawn.start_ns.min() < oldest.start_ns


def test_sessions_share_the_frames_of_a_window(store):
    shared = reads()
    a, b = DataStore(store, shared=shared), DataStore(store, shared=shared)
    assert b.frames["rollout_attempts"] is a.frames["rollout_attempts"]
    a.show_range((600.0, 700.0))
    assert b.frames["rollout_attempts"] is not a.frames["rollout_attempts"]
    b.show_range((600.0, 700.0))
    assert b.window == a.window and b.frames["rollout_attempts"] is a.frames["rollout_attempts"]


def test_the_tabs_say_which_stretch_they_show_and_draw_it(store):
    data = DataStore(store, shared=reads())
    text = window_text(data)
    hours = (data.last_seen_ns() - data.origin_ns()) / S / 3600
    assert f"of a {hours:,.1f} h run" in text and "Pick another stretch on the Overview" in text
    timeline, fleet = Timeline(data), Fleet(data)
    assert timeline.xlim() == data.window_seconds() == fleet.xlim(data.shown_stretch())
    for view in (timeline, fleet, Rollouts(data), Checkpoints(data), Overview(data)):
        pane = view.__panel__()
        notes = [o for o in pane.objects if "rs-window" in str(getattr(o, "object", ""))]
        assert notes and notes[0].visible, type(view).__name__
    lanes = timeline.lane_figure()
    assert lanes.xlim == data.window_seconds()


def test_a_stretch_picked_on_the_whole_run_picture_moves_the_window(store):
    data = DataStore(store, shared=reads())
    view = Overview(data)
    buckets, width = data.run_buckets()
    # the picture still covers the whole run: the same as a session reading it whole draws
    whole = DataStore(store, shared=reads(window_spans=10**9))
    assert not whole.large
    expected_buckets, expected_width = whole.run_buckets()
    assert width == expected_width and len(buckets) <= run_picture.MAX_BUCKETS
    pd.testing.assert_frame_equal(buckets, expected_buckets)
    assert buckets.bucket_ns.min() - data.origin_ns() < width * S
    assert view.pick is not None
    view.pick.event(boundsx=(1000.0, 2500.0))
    t0 = data.origin_ns()
    assert data.window == (t0 + 1000 * S, t0 + 2500 * S)
    assert data.time_range == (1000.0, 2500.0)
    assert_window_rows(data, store)


def test_a_run_under_the_threshold_is_read_whole(store):
    shared = reads(window_spans=10**9)
    data = DataStore(store, shared=shared)
    assert not data.large and data.window is None and window_text(data) == ""
    for name in ("rollout_attempts", "deadlines", "shard_states"):
        assert len(data.frames[name]) == len(store.view(name, run_id=data.run_id)), name
    data.show_range((600.0, 700.0))
    assert data.window is None
    assert Overview(data).pick is None


def test_live_the_window_follows_the_head_and_ticks_read_within_it(tmp_path):
    from rolloutscope.collectors.exporter import instrument
    from rolloutscope.vocabulary import Attr, SpanName
    from tests.store.conftest import SpanKit

    inst = instrument(tmp_path / "live.duckdb", service_name="tests", run_id="live")
    try:
        kit = SpanKit(inst)

        def attempt(rollout: str, start: float, end: float | None):
            attrs = {Attr.ROLLOUT_ID: rollout, Attr.RL_ATTEMPT: 0, Attr.PROMPT_IDX: 0}
            if end is None:
                return kit.open(SpanName.RL_ATTEMPT, start, attrs)
            return kit.span(SpanName.RL_ATTEMPT, start, end, attrs)

        attempt("a", 0, 10)
        attempt("b", 5, None)  # open: in every window
        attempt("c", 2000, 2010)
        kit.flush()
        data = DataStore(inst.store, live=True, shared=reads(window_spans=0, minutes=1))
        shown = lambda: sorted(data.frames["rollout_attempts"].rollout_id)  # noqa: E731
        assert data.large and data.window[1] is None
        assert shown() == ["b", "c"]
        attempt("d", 2030, 2040)
        kit.flush()
        data.tick()  # incremental: the rows since the last read, within the window
        assert shown() == ["b", "c", "d"]
        attempt("e", 3000, 3010)
        kit.flush()
        data.refresh(full=True)  # a full reload moves the window to the head
        first = data.origin_ns()
        assert data.window == (data.last_seen_ns() - 60 * S, None)
        assert data.window[0] > first + 2040 * S
        assert shown() == ["b", "e"]
    finally:
        inst.shutdown()


def test_a_large_live_run_opens_without_waiting_for_its_incidents(path, monkeypatch):
    """The detectors of a live 10^8-span run take seconds: its first session opens on the
    window's rows, says it is reading the incidents, and shows them on the tick after."""
    import rolloutscope.dashboard.datastore as ds

    with RunStore(path, read_only=True) as s:
        want = len(s.view("incidents", run_id="synthetic"))
        assert want > 0
        gate = threading.Event()
        read = ds.DataStore._read_tokened

        def slow_detectors(self, spec, since):
            if spec.name == "incidents":
                assert gate.wait(60)  # the detectors still running
            return read(self, spec, since)

        monkeypatch.setattr(ds.DataStore, "_read_tokened", slow_detectors)
        data = DataStore(s, live=True, shared=reads(window_spans=0))
        assert data.large and len(data.frames["rollout_attempts"]) > 0
        assert len(data.frames["incidents"]) == 0
        assert any("Reading the incidents" in p for p in data.problems), data.problems
        data.tick()
        assert any("Reading the incidents" in p for p in data.problems), data.problems
        version = data.frame_versions["incidents"]
        gate.set()
        data._whole.result(60)
        data.tick()
        assert len(data.frames["incidents"]) == want
        assert data.frame_versions["incidents"] == version + 1
        assert not any("Reading the incidents" in p for p in data.problems)


# -- every read bounded by the window: completions, the capped views, the Steps tab ---------------

def test_the_staleness_of_a_large_run_is_its_window_s(store):
    """rollout_staleness holds a row per try (7.2M at 10^8 spans): the In flight tab reads those
    that end in the window and the open ones, and says so."""
    from rolloutscope.dashboard.in_flight import InFlight, read_staleness

    data = DataStore(store, shared=reads())
    lo, _ = data.window
    got = read_staleness(data)
    every = store.query_df("SELECT * FROM rollout_staleness WHERE run_id = 'synthetic'")
    want = every[every.end_ns.isna() | (every.end_ns >= lo)]
    assert 0 < len(got) == len(want) < len(every)
    assert sorted(got.span_id) == sorted(want.span_id)
    view = InFlight(data)
    view.draw_staleness()
    assert "window" in view._stale_note.object
    # the lane's time axis is the window's, not the run's (its points would sit at its edge)
    t0 = data.origin_ns()
    assert view._lane.x_range.start == pytest.approx((lo - t0) / 1e9)
    assert view._lane.x_range.end <= (data.last_seen_ns() - t0) / 1e9 + 1e-6
    # and its seconds are numbers (a 250 h run is at 900,000 s, Bokeh's default's 9.000e+5)
    assert [a.formatter.format for a in view._lane.xaxis] == ["0,0.[00]"]

def recorded(monkeypatch) -> list[str]:
    """The SQL of every read the DataStores make from here on."""
    seen: list[str] = []
    original = DataStore._query_of

    def query_of(self, sql, params, what):
        seen.append(sql)
        return original(self, sql, params, what)

    monkeypatch.setattr(DataStore, "_query_of", query_of)
    return seen


def test_completions_are_read_from_the_kept_rows_for_the_window(store, monkeypatch):
    seen = recorded(monkeypatch)
    data = DataStore(store, shared=reads())
    lo, hi = data.window
    want = expected(store, data.run_id, "completions", lo, hi)
    got = data.frames["completions"]
    assert keys(got, "completions") == keys(want, "completions")
    # an unacknowledged completion from before the window is evidence: it stays
    before = got[got.completed_ns < lo]
    assert len(before) and before.ack_ns.isna().all()
    # acknowledged ones that ended before the window are not read
    every = store.view("completions", run_id=data.run_id)
    assert ((every.completed_ns < lo) & (every.ack_ns < lo)).any()
    assert len(got) < len(every)
    # read from the maintained rows (the macro with no since groups every completion)
    reads_of = [s for s in seen if "completions" in s and "LIMIT 0" not in s]
    assert reads_of and all(store.relation("completions") in s and "_since" not in s
                            for s in reads_of), reads_of
    # a window that ends before the head: completed before hi only
    data.show_range((3000.0, 3500.0))
    lo, hi = data.window
    assert hi is not None
    want = expected(store, data.run_id, "completions", lo, hi)
    assert keys(data.frames["completions"], "completions") == keys(want, "completions")
    assert (data.frames["completions"].completed_ns < hi).all()


def test_a_live_tick_still_reads_completions_through_its_since_macro(store, monkeypatch):
    data = DataStore(store, shared=reads())
    seen = recorded(monkeypatch)
    data.refresh()  # a tick: the rows an event since the watermark reached
    assert any("completions_since(" in s for s in seen)
    lo, hi = data.window
    assert keys(data.frames["completions"], "completions") == keys(
        expected(store, data.run_id, "completions", lo, hi), "completions")


def capped(monkeypatch, name: str, cap: int, anchor: tuple[str, ...] | None = None) -> None:
    import dataclasses

    spec = VIEWS[name]
    monkeypatch.setitem(VIEWS, name, dataclasses.replace(
        spec, cap=cap, anchor=spec.anchor if anchor is None else anchor))


def latest(store: RunStore, run: str, name: str, lo: int | None, hi: int | None) -> pd.DataFrame:
    """The newest ``VIEWS[name].cap`` rows of view ``name`` that start in [lo, hi), from the
    view itself."""
    spec = VIEWS[name]
    sql, params = f"SELECT * FROM {name} WHERE run_id = ?", [run]
    if lo is not None:
        sql += f" AND {spec.at} >= ?"
        params.append(lo)
    if hi is not None:
        sql += f" AND {spec.at} < ?"
        params.append(hi)
    return store.query_df(f"{sql} ORDER BY {spec.latest} LIMIT {spec.cap}", params)


@pytest.mark.parametrize("name,cap", [("model_calls", 300), ("gym_rollouts", 60)])
def test_a_capped_view_holds_its_latest_rows_of_the_window_floored_from_the_kept_counts(
        store, monkeypatch, name, cap):
    from rolloutscope.dashboard.datastore import CAP_MARGIN_NS

    capped(monkeypatch, name, cap)
    seen = recorded(monkeypatch)
    data = DataStore(store, shared=reads())
    lo, hi = data.window
    spec = VIEWS[name]
    # the floor from the kept per-minute counts: at or below the cap-th newest anchor span,
    # within a minute of it, and no read scans the spans for it
    floor = data._anchor_floor(spec, None)
    anchors = store.query_df(
        "SELECT start_ns FROM all_spans WHERE run_id = ? AND name IN "
        f"(SELECT unnest(?::VARCHAR[])) ORDER BY start_ns DESC LIMIT {cap}",
        [data.run_id, list(spec.anchor)]).start_ns
    assert len(anchors) == cap
    assert floor is not None and anchors.min() - 60 * S < floor <= anchors.min()
    assert not any("all_spans" in s and "OFFSET" in s for s in seen)
    # the frame: the view's newest rows that start from the window's lo less the margin on
    want = latest(store, data.run_id, name, lo - CAP_MARGIN_NS, hi)
    assert len(want) == cap  # the cap binds: the floor had to be right
    assert keys(data.frames[name], name) == keys(want, name)
    assert data.capped_text(name).startswith(f"{name}: the latest {cap:,} rows that start")
    # the Rollouts tab says so above the Gym tables
    assert html.escape(data.capped_text(name)) in Rollouts(data)._gym_part[0].object
    # moved into the middle of the run: the rows the session opened on (read for a stretch in
    # the past, the view's macro would compute every row from there to the head), the very
    # same shared read, and it says so
    opened = data.frames[name]
    data.show_range((2000.0, 2600.0))
    assert data.window[1] is not None
    assert data.frames[name] is opened
    assert "not this stretch's" in data.capped_text(name)
    # read whole (a small run): the run's newest rows, as before
    whole = DataStore(store, shared=reads(window_spans=10**9))
    assert keys(whole.frames[name], name) == keys(
        latest(store, whole.run_id, name, None, None), name)
    assert whole.capped_text(name) == f"{name}: the latest {cap:,} rows of the run; " \
        "the store holds more"


def test_a_capped_view_with_no_anchor_span_reads_the_window_without_a_scan(store, monkeypatch):
    from rolloutscope.dashboard.datastore import CAP_MARGIN_NS

    capped(monkeypatch, "model_calls", 10**6, anchor=("no.such.span",))
    seen = recorded(monkeypatch)
    data = DataStore(store, shared=reads())
    assert data._anchor_floor(VIEWS["model_calls"], None) is None
    lo, hi = data.window
    want = latest(store, data.run_id, "model_calls", lo - CAP_MARGIN_NS, hi)
    assert keys(data.frames["model_calls"], "model_calls") == keys(want, "model_calls")
    assert not any("FROM all_spans" in s for s in seen), seen
    whole = DataStore(store, shared=reads(window_spans=10**9))
    assert len(whole.frames["model_calls"]) == len(store.view("model_calls",
                                                              run_id=whole.run_id))


@pytest.fixture(scope="module")
def steps_store(tmp_path_factory):
    from rolloutscope.replay.run_scenario import replay_into_store
    from rolloutscope.replay.scenarios import get

    p = tmp_path_factory.mktemp("window-steps") / "steps.duckdb"
    with RunStore(p) as s:
        replay_into_store(get("healthy-baseline"), s, run_id="steps")
    with RunStore(p, read_only=True) as s:
        yield s


def test_picking_a_train_step_moves_the_window_onto_it(steps_store):
    from rolloutscope.dashboard.steps_view import Steps

    store = steps_store
    data = DataStore(store, shared=reads(window_spans=0, minutes=1))
    view = Steps(data)
    steps = store.query_df("SELECT step, start_ns, end_ns FROM step_ledger WHERE run_id = ? "
                           "ORDER BY step", [data.run_id])
    assert len(steps) >= 3 and data.large
    first = steps.iloc[0]  # far from the head the window opens on
    assert data.window[0] > first.end_ns
    view._table.selection = [0]  # the row of step 1
    lo, hi = data.window
    assert lo <= first.start_ns and first.end_ns <= hi
    assert data.time_range == pytest.approx(((first.start_ns - data.origin_ns()) / S,
                                             (first.end_ns - data.origin_ns()) / S), abs=1e-3)
    n = assert_window_rows(data, store)
    assert n and len(data.frames["rollout_attempts"])
    # a step shorter than the window: the window widened around it
    short = steps.iloc[1]
    view.pick_step(int(short.step))
    lo, hi = data.window
    assert lo <= short.start_ns and short.end_ns <= (hi or data.last_seen_ns())
    assert_window_rows(data, store)
    # a run read whole: the time plots move, nothing is re-read
    whole = DataStore(store, shared=reads(window_spans=10**9))
    Steps(whole).pick_step(int(first.step))
    assert whole.window is None and whole.time_range is not None


def test_opening_a_large_run_reads_no_span_table(store, monkeypatch):
    """Every read a session makes on open goes through the kept rows and counts: none names the
    span tables (the span count and the capped views' floors included), but the run ids
    (``RunStore.run_ids``: the spans' own run ids, which a file edited behind the store's back
    can hold apart from its kept counts; tests/dashboard/test_gym_browser.py)."""
    seen = recorded(monkeypatch)
    original = RunStore.query

    def query(self, sql, params=None, *args, **kw):
        seen.append(sql)
        return original(self, sql, params, *args, **kw)

    monkeypatch.setattr(RunStore, "query", query)
    data = DataStore(store, shared=reads())
    assert data.large and seen
    scans = [s for s in seen if re.search(r"\bFROM (main\.)?(all_)?spans\b", s)
             and "SELECT DISTINCT run_id FROM spans" not in s]
    assert not scans, scans
