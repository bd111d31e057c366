"""DataStore and views driven headless through their parameters, over real store files."""

from __future__ import annotations

import html

import time

import panel as pn
import pytest

from rolloutscope.cli import main
from rolloutscope.collectors.exporter import instrument
from rolloutscope.vocabulary import Attr, SpanName
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard.app import build_app, websocket_origins
from rolloutscope.store.rows import RowBatch
from rolloutscope.dashboard.datastore import INCIDENTS_EVERY, VIEWS, DataStore, ViewSpec
from rolloutscope.dashboard.scene import FLEET_KINDS, GAUGE_KINDS
from rolloutscope.dashboard.tabs import Fleet, IncidentDetail, Overview, Timeline
from tests.store.conftest import SpanKit

from .conftest import RUN, SCRIPT, serving_lines



@pytest.fixture
def data(p1_store) -> DataStore:
    return DataStore(p1_store)


class TestDataStore:
    def test_it_shows_the_store_run_and_its_incidents_newest_first(self, data):
        assert data.run_id == RUN
        kinds = data.incidents().kind.tolist()
        assert kinds[-1] == "deadline_fired_while_parked"  # the first thing that went wrong
        assert {"stranded_completion", "stall", "quarantine"} <= set(kinds)
        assert data.incidents().start_ns.is_monotonic_decreasing

    def test_indicators_count_view_rows(self, data):
        assert data.indicators() == {
            "committed": 11, "finished": 0, "gym_rollouts": 0, "model_calls": 0,
            "model_call_errors": 0, "in_flight": 1, "parked": 0, "redispatches": 1,
            "failed_tries": 2, "snapshots_ok": 1, "snapshots_failed": 1,
            "snapshots_open": 0, "serving": 3, "shards": 4,
            "incidents": len(data.frames["incidents"])}

    def test_the_config_that_matters_comes_from_run_thresholds(self, data):
        th = data.thresholds()
        assert (th["rollout_timeout_s"], th["prepare_timeout_s"], th["stall_timeout_s"]) == \
            (180.0, 300.0, 120.0)

    def test_rollout_lanes_default_to_the_rollouts_incidents_name(self, data):
        assert data.rollout_lanes() == (["r-7"], 1)
        data.rollout_filter = "failed"
        assert data.rollout_lanes() == (["r-7", "r-9"], 2)
        data.failure_class = "data"
        assert data.rollout_lanes() == (["r-9"], 1)
        data.rollout_filter, data.failure_class = "all", "any"
        ids, total = data.rollout_lanes(cap=5)
        assert (len(ids), total) == (5, 13)  # capped, and the note can say of how many

    def test_a_view_the_file_lacks_reads_as_an_empty_frame_with_its_columns(self, p1_store,
                                                                              monkeypatch):
        spec = ViewSpec("proposed_view", ("ts_ns",), ("ts_ns", "ts_ns"), ("run_id", "ts_ns"),
                        optional=True)
        monkeypatch.setitem(VIEWS, spec.name, spec)
        data = DataStore(p1_store)
        assert data.frames["proposed_view"].empty
        assert list(data.frames["proposed_view"].columns) == ["run_id", "ts_ns"]

    def test_router_serving_backends_come_from_the_serving_samples_view(self, tmp_path):
        inst = instrument(tmp_path / "serving.duckdb", service_name="tests", run_id="srv")
        try:
            kit = SpanKit(inst)
            kit.span(SpanName.SHARD_STATE, 0, 60, {Attr.SHARD_IDX: 0, Attr.FLEET_STATE: "healthy",
                                                   Attr.FLEET_TRIGGER: "initial"})
            kit.flush()
            batch = RowBatch()
            for t, router, fleet in ((10, 4, 4), (40, 3, 2)):
                for name, value in (("router/serving_backends", router),
                                    ("gen_fleet/serving_shards", fleet)):
                    batch.add_row("metrics", run_id="srv", service="tests", name=name,
                                  kind="gauge", ts_ns=kit_ns(t), value=float(value))
            inst.store.writer().write(batch)
            data = DataStore(inst.store, live=True)
            samples = data.frames["serving_samples"].sort_values("ts_ns")
            assert samples[["router_serving", "fleet_serving"]].values.tolist() == [
                [4.0, 4.0], [3.0, 2.0]]
            lines = serving_lines(Fleet(data).serving_figure())
            assert lines["router serving backends"].values.tolist() == [[10.0, 4.0], [40.0, 3.0]]
        finally:
            inst.shutdown()

    def test_incidents_are_not_re_read_while_the_run_does_not_grow(self, data):
        for _ in range(2 * INCIDENTS_EVERY):  # reads earlier ticks were due land first
            data.refresh()
            if data._whole is not None:
                data._whole.result(timeout=30)
        data.refresh()
        reads = []
        data.param.watch(lambda e: reads.append(e.new), "version")
        for _ in range(2 * INCIDENTS_EVERY):
            data.refresh()
        assert "incidents" not in data.last_refresh_by_view and reads == []

    def test_a_live_refresh_reads_new_rows_and_replaces_intervals_that_closed(self, tmp_path):
        inst = instrument(tmp_path / "live.duckdb", service_name="tests", run_id="live")
        try:
            kit = SpanKit(inst)
            kit.span(SpanName.RL_ATTEMPT, 0, 10, {Attr.ROLLOUT_ID: "a", Attr.RL_ATTEMPT: 0,
                                                  Attr.PROMPT_IDX: 0})
            running = kit.open(SpanName.RL_ATTEMPT, 5, {Attr.ROLLOUT_ID: "b",
                                                        Attr.RL_ATTEMPT: 0,
                                                        Attr.PROMPT_IDX: 1})
            kit.flush()
            data = DataStore(inst.store, live=True)
            assert sorted(data.frames["rollout_attempts"].outcome) == ["committed", "open"]
            version = data.version
            running.end(end_time=kit_ns(40))
            kit.span(SpanName.RL_ATTEMPT, 38, 45, {Attr.ROLLOUT_ID: "c", Attr.RL_ATTEMPT: 0,
                                                   Attr.PROMPT_IDX: 2})
            kit.flush()
            data.paused = True
            data.tick()
            assert data.version == version  # paused: nothing read
            data.paused = False
            data.tick()
            att = data.frames["rollout_attempts"].sort_values("rollout_id")
            assert att[["rollout_id", "outcome"]].values.tolist() == [
                ["a", "committed"], ["b", "committed"], ["c", "committed"]]
            assert data.version > version
        finally:
            inst.shutdown()

    def test_incidents_of_a_growing_run_are_read_off_the_tick_and_land_on_a_later_one(
            self, tmp_path):
        inst = instrument(tmp_path / "grow.duckdb", service_name="tests", run_id="grow")
        try:
            kit = SpanKit(inst)
            kit.span(SpanName.RL_TRAIN_STEP, 0, 1, {})
            kit.flush()
            data = DataStore(inst.store, live=True)
            assert data.frames["incidents"].empty
            inst.store.register_run("grow", config={"watchdog": {"stall_timeout_s": 600.0}})
            kit.span(SpanName.RL_TRAIN_STEP, 2000, 2001, {})  # 1999 s without progress
            kit.flush()
            deadline = time.monotonic() + 30
            while data.frames["incidents"].empty:  # each tick returns without waiting
                assert time.monotonic() < deadline, "the stall never reached the frames"
                data.refresh()
                if data._whole is not None:
                    data._whole.result(timeout=30)  # let the background read finish
            assert list(data.frames["incidents"].kind) == ["stall"]
        finally:
            inst.shutdown()


def kit_ns(seconds: float) -> int:
    from tests.store.conftest import S, T0
    return T0 + int(seconds * S)


class TestViews:
    def test_every_view_renders_to_a_bokeh_model(self, p1_store):
        app = build_app(p1_store, live=False)
        dash = app.dashboard
        for view in dash.views():
            assert pn.panel(view).get_root() is not None

    def test_selecting_an_incident_zooms_the_timeline_and_whole_run_resets_it(self, data):
        timeline = Timeline(data)
        plot, _, _ = timeline.plots()
        whole = (plot.object.x_range.start, plot.object.x_range.end)
        assert whole == (0.0, 800.0)
        p1 = data.incidents().query("kind == 'deadline_fired_while_parked'").incident_id.iloc[0]
        data.incident = p1
        assert (plot.object.x_range.start, plot.object.x_range.end) == pytest.approx(
            (142.8, 217.2))
        timeline._whole_run()
        assert (plot.object.x_range.start, plot.object.x_range.end) == whole

    def test_the_rollout_filter_changes_the_lanes_drawn(self, data):
        timeline = Timeline(data)
        plot, _, _ = timeline.plots()
        labels = lambda: set(plot.object.yaxis[0].major_label_overrides.values())  # noqa: E731
        assert {"r-7 try 0", "r-7 try 1"} <= labels() and "r-9 try 0" not in labels()
        data.rollout_filter = "failed"
        assert "r-9 try 0" in labels()

    def test_picking_an_incident_in_the_overview_list_selects_it(self, data):
        overview = Overview(data)
        table = overview._table
        assert table.value.kind.iloc[-1] == "deadline_fired_while_parked"
        table.selection = [len(table.value) - 1]
        assert data.selected_incident()["kind"] == "deadline_fired_while_parked"

    def test_the_incident_detail_shows_the_newest_critical_incident_until_one_is_picked(
            self, data):
        detail = IncidentDetail(data)
        inc = data.incidents()
        newest = inc[inc.severity == "critical"].iloc[0]
        assert detail.shown_incident()["incident_id"] == newest.incident_id
        assert "newest critical incident" in detail.story().object
        assert data.incident is None  # shown, not selected for the other views
        data.incident = inc.query("kind == 'quarantine'").incident_id.iloc[0]
        assert detail.shown_incident()["kind"] == "quarantine"
        assert "newest critical" not in detail.story().object

    def test_the_incident_tab_computes_gauges_and_serving_only_for_incidents_showing_them(
            self, data):
        """A hidden plot is drawn empty (its rows over every try are not computed); picking an
        incident that shows it redraws it with its rows on the figure already on screen."""
        inc = data.incidents()
        quiet = inc[~inc.kind.isin(GAUGE_KINDS | FLEET_KINDS)].incident_id.iloc[0]
        loud = inc[inc.kind.isin(GAUGE_KINDS)].incident_id.iloc[0]
        detail = IncidentDetail(data)
        detail.shown = True
        data.incident = quiet
        lanes, gauges, serving = (pane.object for pane in detail.plots())
        assert tf.layer(gauges, "in flight").empty and tf.layer(serving, "lines").empty
        data.incident = loud
        assert not tf.layer(gauges, "in flight").empty

    def test_the_incident_detail_tells_the_story_with_data_escaped(self, data):
        detail = IncidentDetail(data)
        data.incident = data.incidents().query("kind == 'quarantine'").incident_id.iloc[0]
        html_out = detail.story().object
        assert "Shard 3 goes suspect -&gt; dead on reported_failure" in html_out
        assert SCRIPT not in html_out and "&lt;script&gt;" in html_out

    def test_the_incident_detail_says_what_the_run_waited_on_while_it_lasted(self, data):
        detail = IncidentDetail(data)
        inc = data.incidents().query("kind == 'deadline_fired_while_parked'").iloc[0]
        data.incident = inc.incident_id
        html_out = detail.story().object
        waited = data.waiting_at(inc.to_dict())
        assert waited.at_ns == int(inc.end_ns) - 1  # just before it ended
        assert "Waiting on, at" in html_out
        assert html.escape(waited.answer) in html_out
        for g in waited.groups[:IncidentDetail.WHY_GROUPS]:
            assert html.escape(g.doing) in html_out

    def test_text_tables_render_cells_as_text(self, data):
        table = Fleet(data)._transitions
        assert table.formatters["error"] == {"type": "textarea"}
        assert table.formatters["trigger"] == {"type": "plaintext"}


class TestLiveRedraw:
    def test_a_hidden_view_does_not_redraw_on_a_tick_and_catches_up_when_shown(self, data):
        overview, fleet = Overview(data), Fleet(data)
        fleet.shown = False
        drawn = []
        fleet._transitions.param.watch(lambda e: drawn.append(len(e.new)), "value")
        data.frames["shard_states"] = data.frames["shard_states"].iloc[:-1]
        data.frame_versions["shard_states"] += 1
        data.version += 1
        assert overview.revision == data.version and fleet.revision < data.version
        assert drawn == []
        fleet.shown = True
        assert fleet.revision == data.version and drawn == [5]

    def test_an_element_whose_frames_did_not_change_is_not_redrawn(self, data):
        fleet = Fleet(data)
        drawn = []
        fleet._transitions.param.watch(lambda e: drawn.append(1), "value")
        data.frame_versions["rollout_attempts"] += 1
        data.version += 1
        assert fleet.revision == data.version and drawn == []

    def test_a_run_without_model_calls_has_the_note_on_the_page_and_no_backend_table(self,
                                                                                    data):
        fleet = Fleet(data)  # a table hidden in the page would freeze Panel 1.9's Tabulator
        assert data.frames["model_calls"].empty
        assert fleet._backend_part.objects == [fleet._no_backends]

    def test_the_app_draws_only_the_tab_on_screen(self, p1_store):
        app = build_app(p1_store, live=False)
        tabs = app[1]
        views = app.dashboard.views()
        assert [v.shown for v in views] == [True] + [False] * (len(views) - 1)
        tabs.active = 3
        assert [v.shown for v in views].index(True) == 3 and sum(v.shown for v in views) == 1


class TestServing:
    def test_loopback_is_allowed_under_both_spellings(self):
        assert websocket_origins("127.0.0.1", 5006) == ["127.0.0.1:5006", "localhost:5006"]
        assert websocket_origins("::1", 7) == ["127.0.0.1:7", "[::1]:7", "localhost:7"]

    def test_the_command_refuses_a_missing_file_in_one_line(self, tmp_path, capsys):
        assert main(["dashboard", str(tmp_path / "none.duckdb"), "--no-browser"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("rolloutscope dashboard:") and err.count("\n") == 1


@pytest.fixture(scope="module")
def gym_db(tmp_path_factory):
    """The real Gym 0.7.0 capture, posted to a real collector."""
    from tests.gym_capture import collect_capture

    return collect_capture(tmp_path_factory.mktemp("capped") / "gym.duckdb")


class TestCappedDetail:
    """Gym rollouts and model calls are capped to the latest rows; a capped read computes the
    view only from the start time that bounds them (``DataStore._cap_floor``)."""

    @pytest.mark.parametrize("cap", [1, 2, 4, 5])
    def test_a_capped_read_holds_the_view_s_latest_rows(self, gym_db, monkeypatch, cap):
        from dataclasses import replace

        from rolloutscope.store import RunStore

        for name in ("gym_rollouts", "model_calls"):
            monkeypatch.setitem(VIEWS, name, replace(VIEWS[name], cap=cap))
        with RunStore(gym_db, read_only=True) as store:
            data = DataStore(store)
            for name in ("gym_rollouts", "model_calls"):
                assert data._cap_floor(VIEWS[name]) is not None, name  # the capture has more
                whole = store.query_df(f"SELECT * FROM {name} WHERE run_id = ?", [data.run_id])
                assert len(whole) > cap
                got = data.frames[name]
                assert len(got) == cap, name
                # the newest `cap` starts of the whole view, and rows of it as it reads whole
                # (every column equal to a row of the unfiltered view)
                newest = sorted(whole.start_ns, reverse=True)[:cap]
                assert sorted(got.start_ns, reverse=True) == newest, name
                cols = list(whole.columns)
                merged = got[cols].merge(whole, on=cols, how="left", indicator=True)
                assert (merged["_merge"] == "both").all(), name

    def test_without_enough_anchor_spans_the_whole_view_is_read(self, gym_db):
        from rolloutscope.store import RunStore

        with RunStore(gym_db, read_only=True) as store:
            data = DataStore(store)  # cap 20,000, and the capture has 6 rollouts, 12 calls
            assert data._cap_floor(VIEWS["model_calls"]) is None
            assert len(data.frames["gym_rollouts"]) == 6
            assert len(data.frames["model_calls"]) == 12


@pytest.mark.parametrize("seed", range(8))
def test_rows_of_rollouts_map_only_their_rows_and_match_mapping_every_row(p1_store, seed):
    """``rows_of_rollouts`` (and ``incident_rollouts``) map only the rows that may land on the
    lanes asked for; checked against mapping every row of the frame onto its prompt group,
    on random tries and Gym rows: prompts no try names, rows whose own id is a lane but whose
    prompt's group is another, missing prompt indices."""
    import numpy as np
    import pandas as pd

    from rolloutscope.dashboard.timeline_plot import group_rollout_ids

    rng = np.random.default_rng(seed)
    data = DataStore(p1_store)
    pool = [f"p{i}" for i in range(12)] + [f"p{i}-0" for i in range(12)] + ["x-0", "y-1"]

    def prompts(n):
        p = rng.integers(0, 16, n).astype("float64")
        p[rng.random(n) < 0.15] = np.nan
        return p

    n = 60
    attempts = pd.DataFrame({"rollout_id": rng.choice(pool[:12], n), "prompt_idx": prompts(n),
                             "span_id": [f"a{i}" for i in range(n)]})
    data.frames["rollout_attempts"] = attempts
    for name in ("parked_intervals", "completions"):
        data.frames[name] = pd.DataFrame({"rollout_id": rng.choice(pool, n),
                                          "prompt_idx": prompts(n),
                                          "span_id": [f"{name[0]}{i}" for i in range(n)]})
    evidence = list(rng.choice([f"a{i}" for i in range(n)] + [f"p{i}" for i in range(n)]
                               + [f"c{i}" for i in range(n)], 12, replace=False))
    data.frames["incidents"] = pd.DataFrame({
        "incident_id": ["i1"], "evidence": [evidence], "subject": [f"{pool[seed]} try 1"]})
    for name in data.frame_versions:
        data.frame_versions[name] += 1
    ids = set(rng.choice(pool, 6, replace=False))
    for name in ("rollout_attempts", "parked_intervals", "completions"):
        df = data.frames[name]
        if name != "rollout_attempts":
            df = df.assign(rollout_id=group_rollout_ids(df, attempts))
        want = df[df.rollout_id.isin(ids)]
        got = data.rows_of_rollouts(name, ids)
        assert got.index.tolist() == want.index.tolist()
        assert got.rollout_id.tolist() == want.rollout_id.tolist()
    named = set()
    for name in ("rollout_attempts", "parked_intervals", "completions"):
        df = data.frames[name]
        mapped = group_rollout_ids(df, attempts) if name != "rollout_attempts" else df.rollout_id
        named |= set(mapped[df.span_id.isin(evidence)].dropna().astype(str))
    if pool[seed] in set(attempts.rollout_id):
        named.add(pool[seed])
    assert data.incident_rollouts("i1") == named


def test_rows_of_fewer_lanes_come_from_rows_found_for_more_and_follow_a_new_frame(p1_store):
    """The tries of some lanes are picked among the tries already found for a wider set of
    lanes (the incidents' rollouts hold the lanes the Timeline draws): the same rows as a
    fresh look, without a pass over the frame; once the frame changes, a new row of a lane is
    there."""
    import pandas as pd

    from rolloutscope.dashboard import rollout_rows

    data = DataStore(p1_store)
    data.frames["rollout_attempts"] = pd.DataFrame({
        "rollout_id": ["a", "b", "c", "a", "d"], "prompt_idx": [1, 2, 3, 1, 4],
        "span_id": ["s0", "s1", "s2", "s3", "s4"]}, index=[10, 11, 12, 13, 14])
    data.frame_versions["rollout_attempts"] += 1
    wide = data.rows_of_rollouts("rollout_attempts", {"a", "b", "c"})
    assert wide.index.tolist() == [10, 11, 12, 13]
    looked_at = []
    real_is_in = rollout_rows.is_in

    def counting_is_in(values, wanted):
        looked_at.append(len(values))
        return real_is_in(values, wanted)

    rollout_rows.is_in = counting_is_in
    try:
        narrow = data.rows_of_rollouts("rollout_attempts", {"a", "c"})
    finally:
        rollout_rows.is_in = real_is_in
    assert narrow.index.tolist() == [10, 12, 13]
    assert looked_at == [4]  # the wider rows, not the frame's five
    fresh = data._rows_of_rollouts.__func__  # the same question with nothing remembered
    data._derived.clear()
    pd.testing.assert_frame_equal(fresh(data, "rollout_attempts", frozenset({"a", "c"})),
                                  narrow)
    grown = pd.concat([data.frames["rollout_attempts"], pd.DataFrame(
        {"rollout_id": ["a"], "prompt_idx": [1], "span_id": ["s5"]}, index=[15])])
    data.rows_of_rollouts("rollout_attempts", {"a", "b", "c"})
    data.frames["rollout_attempts"] = grown  # as a refresh does: the frame, then its version
    data.frame_versions["rollout_attempts"] += 1
    assert data.rows_of_rollouts("rollout_attempts", {"a"}).span_id.tolist() == \
        ["s0", "s3", "s5"]


@pytest.mark.parametrize("seed", range(8))
def test_a_refresh_finds_the_rows_it_replaces_as_keys_made_of_every_row_find_them(seed):
    """The old rows a refresh replaces (their key read again) are found without making the
    key of every old row: the same rows as comparing whole keys, for text and integer keys,
    one column or two, Arrow text in chunks or not, repeated and missing values."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from rolloutscope.dashboard.datastore import _key_hits, _keys
    from rolloutscope.store.store import arrow_frame

    rng = np.random.default_rng(seed)

    def frame(n: int, arrow: bool) -> pd.DataFrame:
        ids = [None if rng.random() < 0.1 else f"r-{int(v)}" for v in rng.integers(0, 30, n)]
        table = pa.table({"rollout_id": pa.array(ids, pa.string()),
                          "attempt": pa.array(rng.integers(0, 3, n), pa.int32()),
                          "ts_ns": pa.array(rng.integers(0, 40, n), pa.int64())})
        table = pa.Table.from_batches(table.to_batches(max_chunksize=max(n // 4, 1)))
        return arrow_frame(table) if arrow else table.to_pandas()

    for arrow in (True, False):
        old, new = frame(int(rng.integers(1, 200)), arrow), frame(int(rng.integers(1, 20)), arrow)
        for key in (("rollout_id",), ("rollout_id", "attempt"), ("ts_ns",)):
            want = _keys(old, key).isin(_keys(new, key))
            assert _key_hits(old, new, key).tolist() == want.tolist(), (arrow, key)


def test_what_a_session_remembers_moves_with_the_frames_it_came_from(p1_store):
    """``last_seen_ns``, ``dialects`` and an open incident's window are remembered per frame
    version: a frame replaced (as a refresh does: the frame, then its version) moves them."""
    import pandas as pd

    data = DataStore(p1_store)
    now = data.last_seen_ns()
    inc = data.incidents()
    open_inc = inc[inc.end_ns.isna()]
    assert len(open_inc), "the P1 run has an incident still open at the end"
    incident = open_inc.iloc[0].to_dict()
    window = data.incident_window(incident)
    assert data.dialects() == {"rl"}

    later = now + 600 * 10**9
    dl = data.frames["deadlines"]
    data.frames["deadlines"] = pd.concat(
        [dl, dl.iloc[:1].assign(start_ns=later - 10**9, fired_ns=later, end_ns=later)],
        ignore_index=True)
    data.frame_versions["deadlines"] += 1
    assert data.last_seen_ns() == later
    moved = data.incident_window(incident)
    assert moved[1] > window[1]  # an open incident runs to the new now
    att = data.frames["rollout_attempts"]
    data.frames["rollout_attempts"] = att.assign(dialect="gym")
    assert data.dialects() == {"rl"}  # the version has not moved: still the remembered value
    data.frame_versions["rollout_attempts"] += 1
    assert data.dialects() == {"gym"}
