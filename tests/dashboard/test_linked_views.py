"""One time range for every tab, the deep link that reopens a view, and the Diff tab: driven
headless through the DataStore's and the views' parameters over real store files."""

from __future__ import annotations

import panel as pn
import pytest

from rolloutscope.dashboard.app import TAB_NAMES, build_app
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.deeplink import LinkState, parse_query, tab_index
from rolloutscope.dashboard.diff_view import Diff
from rolloutscope.dashboard.incident_view import IncidentDetail
from rolloutscope.dashboard.time_views import Fleet, Timeline
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore


def x_range(pane):
    """The x range a time plot's pane shows (what the browser draws)."""
    return (pane.object.x_range.start, pane.object.x_range.end)


class TestOneTimeRange:
    def test_a_zoom_on_the_timeline_moves_the_fleet_when_it_is_shown(self, p1_store):
        data = DataStore(p1_store)
        timeline, fleet = Timeline(data), Fleet(data)
        fleet.shown = False
        shards, _ = fleet.plots()
        assert x_range(shards) == (0.0, 800.0)
        timeline._on_range(x_range=(100.0, 300.0))  # what the browser reports on a zoom
        assert data.time_range == (100.0, 300.0)
        assert x_range(shards) == (0.0, 800.0)  # hidden: not redrawn yet
        fleet.shown = True
        assert x_range(shards) == (100.0, 300.0)

    def test_a_zoom_in_the_browser_moves_the_tab_s_plots_and_becomes_the_range(self, p1_store):
        data = DataStore(p1_store)
        timeline, fleet = Timeline(data), Fleet(data)
        lanes, gauges, serving = timeline.plots()
        shards, _ = fleet.plots()
        # one range model for the tab's plots: the browser moves them together
        assert lanes.object.x_range is gauges.object.x_range is serving.object.x_range
        assert shards.object.x_range is not lanes.object.x_range
        lanes.object.x_range.update(start=100.0, end=300.0)  # what a wheel zoom sends
        assert data.time_range == (100.0, 300.0)
        assert x_range(shards) == (100.0, 300.0)  # the other tab follows
        assert x_range(lanes) == (100.0, 300.0)  # and this tab is not drawn back

    def test_picking_an_incident_redraws_each_plot_once_in_place(self, p1_store):
        data = DataStore(p1_store)
        detail = IncidentDetail(data)
        built = []
        for name in ("lane_figure", "gauge_figure", "serving_figure"):
            build = getattr(detail, name)
            setattr(detail, name, lambda build=build, name=name: built.append(name) or build())
        panes = detail.plots()
        shown = [pane.object for pane in panes]
        built.clear()
        q = data.incidents().query("kind == 'quarantine'").incident_id.iloc[0]
        data.incident = q  # the range moves and the incident changes: one redraw
        assert sorted(built) == ["gauge_figure", "lane_figure", "serving_figure"]
        assert [pane.object for pane in panes] == shown  # the same models, new data
        assert "shard 3" in shown[0].yaxis[0].major_label_overrides.values()
        lo, hi = x_range(panes[0])
        assert lo < 320.0 < hi and hi - lo < 400

    def test_the_echo_of_a_drawn_range_is_not_a_zoom(self, p1_store):
        data = DataStore(p1_store)
        timeline = Timeline(data)
        timeline.plots()
        timeline._on_range(x_range=timeline._shown_range)
        assert data.time_range is None

    def test_whole_run_resets_every_plot(self, p1_store):
        data = DataStore(p1_store)
        timeline, fleet = Timeline(data), Fleet(data)
        shards, _ = fleet.plots()
        data.show_range((10.0, 20.0))
        assert x_range(shards) == (10.0, 20.0)
        timeline._whole_run()
        assert x_range(shards) == (0.0, 800.0) and data.incident is None

    def test_picking_an_incident_brings_every_tab_onto_it(self, p1_store):
        data = DataStore(p1_store)
        fleet = Fleet(data)
        shards, _ = fleet.plots()
        q = data.incidents().query("kind == 'quarantine'").incident_id.iloc[0]
        data.incident = q
        lo, hi = x_range(shards)
        assert lo < 320.0 < hi and hi - lo < 400  # shard 3 dead at 320 s, not the whole run
        data.incident = None
        assert x_range(shards) == (0.0, 800.0)


class TestDeepLink:
    def test_query_arguments_parse_leniently(self):
        state = parse_query({"tab": [b"Incident"], "t0": [b"12.5"], "t1": [b"x"],
                             "incident": [b" p1-abc "]})
        assert state == LinkState(tab="Incident", incident="p1-abc", t0=12.5)
        assert state.time_range is None
        assert LinkState(run="r", t0=1.0, t1=2.25).query() == {"run": "r", "t0": "1",
                                                                 "t1": "2.25"}
        assert tab_index("replay", TAB_NAMES) == TAB_NAMES.index("Replay")
        assert tab_index("nope", TAB_NAMES) is None

    def test_a_link_reopens_the_tab_the_incident_and_the_range(self, p1_store):
        data = DataStore(p1_store)
        q = data.incidents().query("kind == 'quarantine'").incident_id.iloc[0]
        app = build_app(p1_store, live=False, link={
            "tab": ["incident"], "incident": [q.encode()], "t0": ["250"], "t1": ["400"]})
        dash = app.dashboard
        assert app[1].active == TAB_NAMES.index("Incident")
        assert dash.data.incident == q and dash.data.time_range == (250.0, 400.0)
        plot, _, _ = dash.incident.plots()
        assert x_range(plot) == (250.0, 400.0)

    def test_a_stale_link_still_opens(self, p1_store):
        app = build_app(p1_store, live=False, link={"tab": ["nope"], "incident": ["gone"],
                                                     "run": ["other"], "t0": ["5"]})
        assert app[1].active == 0 and app.dashboard.data.incident is None


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    path = tmp_path_factory.mktemp("diff") / "pair.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("snapshot-outlasts-deadline"), store, run_id="capture")
        replay_into_store(get("snapshot-outlasts-deadline"), store, run_id="fixed",
                          variants=["pause-deadlines-during-snapshot"])
    return path


def test_the_diff_tab_shows_two_runs_by_step(pair):
    with RunStore(pair, read_only=True) as store:
        data = DataStore(store, run_id="capture")
        diff = Diff(data)
        assert diff.other_run == "fixed"
        rows = diff._table.value
        assert len(rows) and rows.step.is_monotonic_increasing
        assert any("(-1)" in cell for cell in rows["timeouts"])
        assert "timeouts 1 → 0 (-1)" in diff._note.object
        assert pn.panel(diff).get_root() is not None
