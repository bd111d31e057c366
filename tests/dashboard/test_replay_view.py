"""The Replay view: a capture and its replay with a fix, in one store file, side by side.

The store holds ``snapshot-outlasts-deadline`` replayed as captured and with
``pause-deadlines-during-snapshot`` under another run id, which is what
``rolloutscope replay RUN.duckdb --variant ... --out RUN.duckdb`` writes.
"""

from __future__ import annotations

import pandas as pd
import panel as pn
import pytest

from rolloutscope.store import RunStore
from rolloutscope.dashboard import replay_plot as rp
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard.app import build_app
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.replay_view import Replay
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get

CAPTURE, FIXED = "capture", "fixed"
FIX = "pause-deadlines-during-snapshot"


@pytest.fixture(scope="module")
def pair_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "pair.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("snapshot-outlasts-deadline"), store, run_id=CAPTURE)
        replay_into_store(get("snapshot-outlasts-deadline"), store, run_id=FIXED,
                          variants=[FIX])
    return path


@pytest.fixture
def pair(pair_path):
    with RunStore(pair_path, read_only=True) as store:
        yield DataStore(store, run_id=CAPTURE)


def frame(rows):
    return pd.DataFrame(rows, columns=["run", "lane", "kind", "label", "start_s", "end_s",
                                       "outcome"])


BEFORE = frame([("before", "snapshots", "snapshot", "snapshot 1", 150.0, 210.0, "committed"),
                ("before", "p0", "try", "try 0", 0.0, 180.0, "failed"),
                ("before", "p0", "deadline_fired", "try 0 deadline fired", 180.0, 180.0,
                 "parked"),
                ("before", "p0", "completion", "p0 completed", 240.0, 240.0,
                 "unacknowledged"),
                ("before", "incidents", "incident", "deadline_fired_while_parked", 180.0,
                 180.0, "p0 try 0")])
AFTER = frame([("after", "snapshots", "snapshot", "snapshot 1", 150.0, 210.0, "committed"),
               ("after", "p0", "try", "try 0", 0.0, 240.0, "committed"),
               ("after", "shard 0", "shard_state", "healthy", 0.0, None, "initial")])


class TestReplayPlot:
    def test_both_sides_share_lanes_snapshots_then_shards_then_rollouts_then_incidents(self):
        assert rp.replay_lanes(BEFORE, AFTER) == (
            ("snapshots", "shard 0", "p0", "incidents"), 1)

    def test_open_intervals_reach_the_end_of_the_axis(self):
        lanes, _ = rp.replay_lanes(BEFORE, AFTER)
        rects = rp.replay_rects(AFTER, lanes, end_s=300.0)
        shard = rects[rects.lane == "shard 0"].iloc[0]
        assert (shard.t_replay, shard.t_end, shard.detail) == (0.0, 300.0, "initial")

    def test_fired_deadlines_unacknowledged_completions_and_incidents_are_markers(self):
        lanes, _ = rp.replay_lanes(BEFORE, AFTER)
        marks = rp.replay_instants(BEFORE, lanes)
        assert marks["deadline_fired"][["t_replay", "y"]].values.tolist() == [[180.0, -2.0]]
        assert marks["unacknowledged"].t_replay.tolist() == [240.0]
        assert marks["completion"].empty
        assert marks["incident"][["t_replay", "y"]].values.tolist() == [[180.0, -3.0]]

    def test_a_timeline_has_the_same_layers_whatever_the_data(self):
        lanes, _ = rp.replay_lanes(BEFORE, AFTER)
        full = rp.replay_timeline(BEFORE, lanes, title="before", xlim=(0, 300),
                                  highlight=(179, 181))
        none = rp.replay_timeline(BEFORE.iloc[:0], lanes, title="after", xlim=(0, 300))

        def layers(fig):
            return [(type(r.glyph), r.name, sorted(r.data_source.data)) for r in fig.renderers]

        assert layers(full) == layers(none)
        assert [r.name for r in full.renderers] == ["highlight", "intervals", "marks"]
        assert tf.layer(full, "highlight")[["t_replay", "t_end"]].values.tolist() == [
            [179.0, 181.0]]
        assert full.title.text == "before"
        marks = tf.layer(full, "marks")  # every kind in one layer, each with its marker
        assert marks[["t_replay", "marker"]].values.tolist() == [
            [180.0, "x"], [240.0, "circle"], [180.0, "inverted_triangle"]]
        assert marks.fill.tolist()[1] == "white"  # the unacknowledged completion is hollow

    def test_verdicts_say_what_the_replay_did_to_each_incident(self):
        def incidents(*rows):
            return pd.DataFrame([{"incident_id": i, "kind": k, "subject": s, "start_s": t,
                                  "summary": f"{k} {s}", "key": (k, s)} for i, k, s, t in rows])
        before = incidents(("a", "stall", "controller", 800.0),
                           ("b", "deadline_fired_while_parked", "p0 try 0", 180.0))
        after = incidents(("c", "stall", "controller", 820.0),
                          ("d", "quarantine", "shard 1", 300.0))
        out = rp.incident_verdicts(before, after).fillna(-1)
        assert out[["status", "kind", "before (s)", "after (s)"]].values.tolist() == [
            ["reproduced", "stall", 800.0, 820.0],
            ["vanished", "deadline_fired_while_parked", 180.0, -1],
            ["appeared", "quarantine", -1, 300.0]]


class TestReplayView:
    def test_the_after_run_is_picked_from_the_same_file(self, pair):
        view = Replay(pair)
        assert view.param.after_run.objects == [FIXED] and view.after_run == FIXED

    def test_the_fix_makes_the_deadline_incident_vanish(self, pair):
        view = Replay(pair)
        verdicts = view._verdicts.value
        vanished = verdicts[verdicts.status == "vanished"].kind.tolist()
        assert "deadline_fired_while_parked" in vanished
        outcomes = view._outcomes.value.set_index("outcome")
        assert outcomes.loc["timed_out"].tolist() == [1, 0]

    def test_selecting_an_incident_zooms_both_timelines_to_it(self, pair):
        view = Replay(pair)
        before, after = (pane.object for pane in view.plots())
        inc = pair.incidents().query("kind == 'deadline_fired_while_parked'").iloc[0]
        pair.incident = inc.incident_id
        t = view._before_incidents.set_index("incident_id").start_s[inc.incident_id]
        for plot in (before, after):
            assert (plot.x_range.start, plot.x_range.end) == pytest.approx(
                (t - 60.0, t + 120.0))

    def test_a_file_with_one_run_says_how_to_write_a_replay_into_it(self, p1_store):
        view = Replay(DataStore(p1_store))
        assert view.after_run is None and "rolloutscope replay" in view._note.object
        assert pn.panel(view).get_root() is not None

    def test_the_app_has_a_replay_tab(self, pair_path):
        with RunStore(pair_path, read_only=True) as store:
            app = build_app(store, live=False, run_id=CAPTURE)
            assert app[1]._names[-2:] == ["Replay", "Diff"]
            assert pn.panel(app.dashboard.replay).get_root() is not None


def test_a_replay_picked_while_it_is_being_written_is_read_again_as_it_grows(tmp_path):
    """The demo registers each fix replay before writing its spans; a Replay tab on screen
    then picks the run at once. The capture's frames do not change after that, so the view
    must notice the replay growing on the live refreshes, or its after side stays empty."""
    with RunStore(tmp_path / "live.duckdb") as store:
        replay_into_store(get("snapshot-outlasts-deadline"), store, run_id=CAPTURE)
        data = DataStore(store, run_id=CAPTURE, live=True)
        view = Replay(data)
        assert view.after_run is None
        store.register_run(FIXED, source="replay", parent_run_id=CAPTURE)  # no span yet
        data.refresh()
        assert view.after_run == FIXED
        assert view._after.empty
        replay_into_store(get("snapshot-outlasts-deadline"), store, run_id=FIXED,
                          variants=[FIX])
        data.refresh()
        assert not view._after.empty
        verdicts = view._verdicts.value
        assert "deadline_fired_while_parked" in set(verdicts.kind[verdicts.status == "vanished"])
        # another replay registered later is offered in the picker, the choice kept
        store.register_run("later", source="replay", parent_run_id=CAPTURE)
        data.refresh()
        assert view.after_run == FIXED and "later" in view.param.after_run.objects
