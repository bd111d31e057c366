"""Plot builders checked as data: frames in, Bokeh figures (the time plots) and HoloViews
elements (the rest) out."""

from __future__ import annotations

import dataclasses

import holoviews as hv
import numpy as np
import pandas as pd
import pytest
from bokeh.models import FixedTicker, HoverTool, LinearAxis, Line, Quad, Scatter, Segment

try:  # where current holoviews keeps it; the comparison module's copy is deprecated
    from holoviews.testing import assert_element_equal
except ImportError:  # an older holoviews
    from holoviews.element.comparison import assert_element_equal

from rolloutscope.dashboard import plots, style
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.dashboard.story import incident_story, story_html

from .conftest import serving_lines

hv.renderer("bokeh")
S = 10**9
T0 = 1_000 * S


def ns(s: float) -> int:
    return T0 + int(s * S)


def frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


SHARD_COLS = ["shard_idx", "state", "start_ns", "end_ns", "trigger", "membership_epoch",
              "previous_state", "last_error", "probe_failures", "reported_failures", "serving",
              "span_id"]
ATT_COLS = ["rollout_id", "attempt", "group_id", "start_ns", "end_ns", "outcome",
            "failure_class", "failure_reason", "span_id"]
PARK_COLS = ["rollout_id", "attempt", "checkpoint_id", "start_ns", "end_ns", "span_id"]
DL_COLS = ["deadline_id", "kind", "rollout_id", "attempt", "budget_s", "start_ns", "end_ns",
           "outcome", "suspended_s", "state_when_fired", "fired_ns", "span_id"]
COMP_COLS = ["rollout_id", "attempt", "completed_ns", "ack_ns", "span_id"]
WIN_COLS = ["checkpoint_id", "start_ns", "end_ns", "outcome"]
OPS_COLS = ["checkpoint_id", "participant_kind", "instance", "op", "start_ns", "end_ns",
            "outcome", "code", "blockers", "duration_s", "span_id"]
INC_COLS = ["run_id", "incident_id", "kind", "severity", "start_ns", "end_ns", "subject",
            "summary", "evidence", "caused_by"]


def shard(idx, state, start, end, serving=True, **kw):
    return {"shard_idx": idx, "state": state, "start_ns": ns(start),
            "end_ns": None if end is None else ns(end), "trigger": kw.get("trigger", "initial"),
            "membership_epoch": 1, "previous_state": kw.get("prev"), "last_error": None,
            "probe_failures": kw.get("probe"), "reported_failures": kw.get("reported"),
            "serving": serving, "span_id": kw.get("span_id", f"s{idx}{state}")}


@pytest.fixture
def p1_frames() -> tl.TimelineFrames:
    """P1's one rollout, one snapshot (RL #4266's incident write-up), in view rows."""
    return tl.TimelineFrames(
        checkpoint_windows=frame([{"checkpoint_id": "ck1", "start_ns": ns(150),
                                   "end_ns": ns(210), "outcome": "committed"}], WIN_COLS),
        checkpoint_ops=frame([
            {"checkpoint_id": "ck1", "participant_kind": "agent", "instance": "a0",
             "op": "prepare", "start_ns": ns(150), "end_ns": ns(152), "outcome": "ok",
             "code": None, "blockers": None, "duration_s": 2.0, "span_id": "op-a"},
            {"checkpoint_id": "ck1", "participant_kind": "controller", "instance": None,
             "op": "commit", "start_ns": ns(160), "end_ns": None, "outcome": None,
             "code": None, "blockers": None, "duration_s": None, "span_id": "op-c"}],
            OPS_COLS),
        shard_states=frame([shard(0, "healthy", 0, None)], SHARD_COLS),
        rollout_attempts=frame([
            {"rollout_id": "r-7", "attempt": 0, "group_id": "g0", "start_ns": ns(0),
             "end_ns": ns(180), "outcome": "failed", "failure_class": "infra",
             "failure_reason": "RolloutTimeout", "span_id": "att-0"},
            {"rollout_id": "r-7", "attempt": 1, "group_id": "g1", "start_ns": ns(182),
             "end_ns": None, "outcome": "open", "failure_class": None,
             "failure_reason": None, "span_id": "att-1"}], ATT_COLS),
        parked_intervals=frame([{"rollout_id": "r-7", "attempt": 0, "checkpoint_id": "ck1",
                                 "start_ns": ns(150), "end_ns": ns(210), "span_id": "park"}],
                               PARK_COLS),
        deadlines=frame([{"deadline_id": "d0", "kind": "rollout", "rollout_id": "r-7",
                          "attempt": 0, "budget_s": 180.0, "start_ns": ns(0),
                          "end_ns": ns(180), "outcome": "fired", "suspended_s": 0.0,
                          "state_when_fired": "parked", "fired_ns": ns(180),
                          "span_id": "dl"}], DL_COLS),
        completions=frame([{"rollout_id": "r-7", "attempt": 0, "completed_ns": ns(240),
                            "ack_ns": None, "span_id": "exec-0"}], COMP_COLS),
        incidents=frame([{"run_id": "r", "incident_id": "stall-1", "kind": "stall",
                          "severity": "critical", "start_ns": ns(300), "end_ns": None,
                          "subject": "controller", "summary": "stalled", "evidence": [],
                          "caused_by": None}], INC_COLS),
        rollout_ids=("r-7",), evidence=frozenset({"park", "dl"}))


class TestLanePlot:
    def test_lanes_run_windows_then_participants_in_protocol_order_then_shards_then_tries(
            self, p1_frames):
        assert tl.lanes_for(p1_frames).labels == (
            "checkpoint windows", "controller", "agent a0", "shard 0", "r-7 try 0", "r-7 try 1")

    def test_open_intervals_reach_now_and_say_so(self, p1_frames):
        rects = tl.interval_rects(p1_frames, tl.lanes_for(p1_frames), T0, ns(400))
        try1 = rects[rects.span_id == "att-1"].iloc[0]
        assert (try1.x0, try1.x1, try1.end_s) == (182.0, 400.0, "open")
        shard0 = rects[rects.lane == "shard 0"].iloc[0]
        assert (shard0.x1, shard0.end_s) == (400.0, "open")

    def test_bar_texts_made_earlier_draw_the_same_bars(self, p1_frames):
        # a view hands over the text of unchanged frames (per frame version); the bars drawn
        # with it are those drawn from the frames, and a stale text would show
        lanes = tl.lanes_for(p1_frames)
        fresh = tl.interval_rects(p1_frames, lanes, T0, ns(400))
        texts = {name: tl.bar_texts(name, getattr(p1_frames, name))
                 for name in ("checkpoint_windows", "checkpoint_ops", "shard_states")}
        given = tl.interval_rects(dataclasses.replace(p1_frames, bar_texts=texts), lanes, T0,
                                  ns(400))
        pd.testing.assert_frame_equal(given, fresh)
        stale = dict(texts, shard_states=dict(texts["shard_states"], what="stale"))
        drawn = tl.interval_rects(dataclasses.replace(p1_frames, bar_texts=stale), lanes, T0,
                                  ns(400))
        assert set(drawn[drawn.lane == "shard 0"].what) == {"stale"}

    def test_a_parked_bar_sits_inside_its_try_bar(self, p1_frames):
        rects = tl.interval_rects(p1_frames, tl.lanes_for(p1_frames), T0, ns(400))
        park = rects[rects.span_id == "park"].iloc[0]
        att = rects[rects.span_id == "att-0"].iloc[0]
        assert att.y0 < park.y0 < park.y1 < att.y1
        assert (park.x0, park.x1) == (150.0, 210.0)

    def test_an_unacknowledged_completion_has_its_own_marker(self, p1_frames):
        marks = tl.instants(p1_frames, tl.lanes_for(p1_frames), T0)
        assert marks["completed, unacknowledged"][["x", "lane"]].values.tolist() == [
            [240.0, "r-7 try 0"]]
        assert marks["acknowledged"].empty
        fired = marks["deadline fired"].iloc[0]
        assert (fired.x, fired.lane, fired.detail) == (180.0, "r-7 try 0", "while parked")

    def test_every_instant_draws_in_one_layer_with_its_kind_s_marker(self, p1_frames):
        marks = tl.instants(p1_frames, tl.lanes_for(p1_frames), T0)
        fig = tf.lane_plot(p1_frames, t0_ns=T0, now_ns=ns(400))
        layer = fig.renderers[2]
        assert (type(layer.glyph), layer.name) == (Scatter, "marks")
        drawn = tf.layer(fig, "marks")
        assert len(drawn) == sum(len(m) for m in marks.values()) > 0
        at = 0
        for kind, mk in marks.items():  # in the kinds' order: later kinds on top
            rows = drawn.iloc[at:at + len(mk)]
            at += len(mk)
            st = tl.MARKER_STYLE[kind]
            assert rows.x.tolist() == mk.x.tolist() and rows.lane.tolist() == mk.lane.tolist()
            assert set(rows.marker) <= {st["marker"]} and set(rows["size"]) <= {st["size"]}
            assert set(rows.line) <= {st.get("line_color", st.get("color"))}
            assert set(rows.fill) <= {st.get("fill_color", st.get("color"))}
        for prop, col in (("marker", "marker"), ("size", "size"), ("fill_color", "fill"),
                          ("line_color", "line"), ("line_width", "line_width")):
            assert getattr(layer.glyph, prop).field == col, prop  # one value per marker

    def test_evidence_is_outlined_and_stalls_are_shaded_to_now(self, p1_frames):
        fig = tf.lane_plot(p1_frames, t0_ns=T0, now_ns=ns(400))
        lanes = len(tl.lanes_for(p1_frames).labels)
        pd.testing.assert_frame_equal(tf.layer(fig, "shade"), pd.DataFrame({
            "x0": [300.0], "y0": [-lanes + 0.5], "x1": [400.0], "y1": [0.5], "what": ["stall"],
            "detail": ["stalled"], "color": [style.STALL], "alpha": [0.10]}), check_dtype=False)
        drawn = tf.layer(fig, "bars")
        outlined = drawn[drawn.line == style.EVIDENCE]
        assert outlined.span_id.tolist() == ["park"]  # the deadline is a marker
        assert outlined.line_width.tolist() == [2.5] and drawn.span_id.iloc[-1] == "park"

    def test_every_bar_draws_in_one_layer_closed_then_open_then_evidence(self, p1_frames):
        rects = tl.interval_rects(p1_frames, tl.lanes_for(p1_frames), T0, ns(400))
        fig = tf.lane_plot(p1_frames, t0_ns=T0, now_ns=ns(400))
        assert [(type(r.glyph), r.name) for r in fig.renderers] == [
            (Quad, "shade"), (Quad, "bars"), (Scatter, "marks")]
        bars = tf.layer(fig, "bars")
        assert sorted(bars.span_id) == sorted(rects.span_id)  # every bar, once
        evid = bars.span_id.isin(p1_frames.evidence)
        is_open = bars.end_s.eq("open") & ~evid
        closed = ~is_open & ~evid
        kind = (evid * 2 + is_open).tolist()
        assert kind == sorted(kind)  # closed under open under evidence
        assert set(bars.dash[is_open]) == {"dashed"} and set(bars.dash[~is_open]) == {"solid"}
        assert set(bars.fill_alpha[bars.end_s.eq("open")]) == {0.45}
        assert set(bars.fill_alpha[~bars.end_s.eq("open")]) == {1.0}
        assert set(bars.line[closed]) == {"white"} and set(bars.line[is_open]) == {"#6b7785"}
        [bar] = [r for r in fig.renderers if r.name == "bars"]
        for prop, col in (("line_dash", "dash"), ("line_color", "line"),
                          ("line_width", "line_width"), ("fill_alpha", "fill_alpha"),
                          ("fill_color", "color")):
            assert getattr(bar.glyph, prop).field == col, prop  # one value per bar

    def test_lanes_fill_the_plot_and_carry_their_labels(self, p1_frames):
        fig = tf.lane_plot(p1_frames, t0_ns=T0, now_ns=ns(400))
        labels = tl.lanes_for(p1_frames).labels
        assert fig.height == style.lane_plot_height(len(labels))
        assert (fig.y_range.start, fig.y_range.end) == (-len(labels) + 0.5, 0.5)
        [axis] = fig.yaxis
        assert isinstance(axis.ticker, FixedTicker)
        assert [axis.major_label_overrides[t] for t in axis.ticker.ticks] == list(labels)
        assert (fig.x_range.start, fig.x_range.end) == (0.0, 400.0)

    def test_the_selected_incident_shades_over_the_stall_in_the_same_layer(self, p1_frames):
        fig = tf.lane_plot(p1_frames, t0_ns=T0, now_ns=ns(400), highlight=(10.0, 20.0))
        shade = tf.layer(fig, "shade")
        assert shade[["what", "color", "alpha"]].values.tolist() == [
            ["stall", style.STALL, 0.10], ["selected incident", style.INCIDENT_SPAN, 0.25]]
        assert shade.x0.tolist() == [300.0, 10.0] and shade.x0.dtype == "float64"

    def test_text_columns_type_text_and_leave_the_rest(self):
        df = pd.DataFrame({"name": [pd.NA, "a"], "n": pd.Series([None, 1.5], dtype=object),
                           "x": [1.0, 2.0]})
        out = tl.text_columns(df)
        assert str(out.name.dtype) == "string" and out.name.isna().tolist() == [True, False]
        assert out.n.dtype == object and out.x.dtype == "float64"
        empty = tl.text_columns(pd.DataFrame({"t": pd.Series([], dtype=object)}))
        assert empty.t.dtype == object  # nothing says it is text

    def test_an_empty_layer_sends_no_float_colours(self):
        # BokehJS refuses an empty float array as colours ("invalid color array"): the Replay
        # tab of a file with one run drew nothing and stopped the page
        src = tf.source(pd.DataFrame({"color": pd.Series([], dtype="float64"),
                                      "x0": pd.Series([], dtype="float64")}))
        assert src.data["color"].dtype == object and len(src.data["color"]) == 0

    def test_missing_text_reaches_the_browser_as_null(self):
        src = tf.source(pd.DataFrame({"name": pd.array([pd.NA, "a"], dtype="string"),
                                      "x": [1.0, np.nan]}))
        assert list(src.data["name"]) == [None, "a"] and np.isnan(src.data["x"][1])

    def test_layers_are_the_same_whatever_the_data(self, p1_frames):
        empty = tl.TimelineFrames(**{f: getattr(p1_frames, f).iloc[:0] for f in (
            "checkpoint_windows", "checkpoint_ops", "shard_states", "rollout_attempts",
            "parked_intervals", "deadlines", "completions", "incidents")})
        full = tf.lane_plot(p1_frames, t0_ns=T0, now_ns=ns(400))
        none = tf.lane_plot(empty, t0_ns=T0, now_ns=ns(400))

        def layers(fig):
            return [(type(r.glyph), r.name, sorted(r.data_source.data)) for r in fig.renderers]

        assert layers(full) == layers(none)

    def test_a_bar_whose_centre_is_off_screen_still_hovers(self, p1_frames):
        # zoomed onto 250-300 s: the shard's bar (0 s to now) and the open try's bar have
        # their centres outside the view; a tooltip anchored at the centre would be dropped
        fig = tf.lane_plot(p1_frames, t0_ns=T0, now_ns=ns(1200), xlim=(250.0, 300.0))
        policies = {type(r.glyph).__name__: t.point_policy
                    for t in fig.tools if isinstance(t, HoverTool) for r in t.renderers}
        assert policies == {"Quad": "follow_mouse", "Scatter": "snap_to_data"}
        [bars] = [t for t in fig.tools if isinstance(t, HoverTool)
                  and t.renderers[0].name == "bars"]
        assert bars.tooltips == tl.RECT_TOOLTIPS  # the span's name, times, state, details

    def test_a_redraw_moves_a_fresh_plot_s_rows_onto_the_shown_figure(self, p1_frames):
        shown = tf.lane_plot(p1_frames, t0_ns=T0, now_ns=ns(400))
        fewer = tl.TimelineFrames(**{f: getattr(p1_frames, f) for f in (
            "checkpoint_windows", "checkpoint_ops", "shard_states", "parked_intervals",
            "deadlines", "completions", "incidents")},
            rollout_attempts=p1_frames.rollout_attempts.iloc[:1], rollout_ids=("r-7",))
        plot = tf.lane_layers(fewer, t0_ns=T0, now_ns=ns(500), xlim=(1.0, 2.0))
        fresh = tf.render(plot)
        models = [r.data_source for r in shown.renderers]
        x_range = (shown.x_range.start, shown.x_range.end)
        tf.redraw(shown, plot)
        assert [r.data_source for r in shown.renderers] == models  # the same models
        for name in ("shade", "bars", "marks"):
            pd.testing.assert_frame_equal(tf.layer(shown, name), tf.layer(fresh, name))
        assert shown.height == fresh.height
        assert (shown.y_range.start, shown.y_range.end) == (fresh.y_range.start,
                                                            fresh.y_range.end)
        assert shown.yaxis[0].ticker.ticks == fresh.yaxis[0].ticker.ticks
        assert shown.yaxis[0].major_label_overrides == fresh.yaxis[0].major_label_overrides
        assert (shown.x_range.start, shown.x_range.end) == x_range  # the tab's, not redrawn

    def test_focus_covers_the_incident_and_its_evidence_with_padding(self, p1_frames):
        incident = {"start_ns": ns(180), "end_ns": ns(180)}
        lo, hi = tl.focus_range(incident, p1_frames, t0_ns=T0, now_ns=ns(400))
        assert lo == pytest.approx(150 - 0.12 * 60) and hi == pytest.approx(210 + 0.12 * 60)


class TestServing:
    def test_serving_count_steps_down_when_a_shard_leaves_and_holds_to_now(self):
        shards = frame([shard(0, "healthy", 0, None), shard(1, "healthy", 0, 10),
                        shard(1, "dead", 10, None, serving=False)], SHARD_COLS)
        plot = tf.serving_plot(shards, t0_ns=T0, now_ns=ns(30))
        lines = serving_lines(plot)
        assert lines["fleet serving shards"].values.tolist() == [[0.0, 2.0], [10.0, 1.0],
                                                                [30.0, 1.0]]
        assert lines["shards in fleet"].serving.tolist() == [2.0, 2.0]
        assert lines["router serving backends"].empty

    def test_every_line_is_a_segment_of_one_layer_with_its_own_style(self):
        shards = frame([shard(0, "healthy", 0, None), shard(1, "healthy", 0, 10),
                        shard(1, "dead", 10, None, serving=False)], SHARD_COLS)
        router = pd.DataFrame({"t": [5.0, 20.0], "serving": [2.0, 1.0]})
        plot = tf.serving_plot(shards, t0_ns=T0, now_ns=ns(30), router=router)
        assert [(type(r.glyph), r.name) for r in plot.renderers] == [(Segment, "lines")]
        seg = tf.layer(plot, "lines")
        # the fleet's line: 2 from 0 to 10 s, the fall to 1 at 10 s, 1 to now
        fleet = seg[seg.what == "fleet serving shards"]
        assert fleet[["t", "y0", "t_end", "y1", "serving"]].values.tolist() == [
            [0.0, 2.0, 10.0, 2.0, 2.0], [10.0, 1.0, 30.0, 1.0, 1.0],
            [10.0, 2.0, 10.0, 1.0, 1.0]]
        assert serving_lines(plot)["router serving backends"].values.tolist() == [
            [5.0, 2.0], [20.0, 1.0]]
        for what, (color, dash, width) in tl.SERVING_LINES.items():
            mine = seg[seg.what == what]
            assert len(mine) and set(mine.color) == {color} and set(mine.dash) == {dash}
            assert set(mine.width) == {width}
        assert not plot.title.text  # the tab's heading names it; nothing over the plot
        [line] = plot.renderers
        for prop, col in (("line_dash", "dash"), ("line_color", "color"),
                          ("line_width", "width")):
            field = getattr(line.glyph, prop).field
            assert list(line.data_source.data[field]) == seg[col].tolist(), prop

    def test_a_line_of_one_point_draws_nothing(self):
        assert tl.step_segments([3.0], [1.0], "router serving backends").empty
        assert list(tl.step_segments([], [], "shards in fleet").columns) == \
            tl.SEGMENT_COLUMNS


class TestRenderers:
    def test_each_layer_s_glyph_is_the_one_the_glyph_methods_make(self, p1_frames):
        """``render`` builds renderers directly; their glyphs must be what ``figure.quad``
        and the others make of the same style (``color``/``alpha`` shorthands, the glyph
        methods' default colours), for every layer of every builder."""
        from bokeh.models import ColumnDataSource, Range1d
        from bokeh.plotting import figure

        from rolloutscope.dashboard.replay_plot import replay_layers

        g = pd.DataFrame({"t": [0.0, 10.0], "in_flight": [1.0, 0.0], "committed": [0.0, 1.0]})
        marks = pd.DataFrame({"t": [5.0], "what": ["stall"], "detail": [""]})
        replay = pd.DataFrame({"lane": ["a", "a"], "kind": ["attempt", "deadline_fired"],
                               "start_s": [0.0, 0.5], "end_s": [1.0, np.nan],
                               "outcome": ["committed", ""], "label": ["try 0", "fired"]})
        plots_made = [
            tf.lane_layers(p1_frames, t0_ns=T0, now_ns=ns(400), highlight=(1.0, 2.0)),
            tf.gauge_layers(g, xlim=(0.0, 10.0), marks=marks),
            tf.serving_layers(p1_frames.shard_states, t0_ns=T0, now_ns=ns(400)),
            replay_layers(replay, ("a",), title="t", xlim=(0.0, 2.0), highlight=(0.5, 0.6)),
        ]
        seen = set()
        for plot in plots_made:
            for layer in plot.layers:
                fig = figure()
                fig.extra_y_ranges = {"right": Range1d(0, 1)}
                made = getattr(fig, layer.glyph)(source=ColumnDataSource(data=layer.data),
                                                 name=layer.name, **layer.style)
                direct = tf.glyph_renderer(layer)
                assert type(direct.glyph) is type(made.glyph), layer.name
                assert (direct.glyph.properties_with_values(include_defaults=True)
                        == made.glyph.properties_with_values(include_defaults=True)), layer.name
                assert (direct.name, direct.y_range_name, direct.level) == (
                    made.name, made.y_range_name, made.level)
                seen.add(layer.glyph)
        assert seen == set(tf.GLYPHS)


class TestGauges:
    def test_tries_in_flight_and_committed_step_on_their_own_axes_under_the_marks(self):
        g = pd.DataFrame({"t": [0.0, 10.0, 20.0], "in_flight": [1.0, 3.0, 0.0],
                          "committed": [0.0, 0.0, 4.0]})
        marks = pd.DataFrame({"t": [15.0], "what": ["the watchdog's stall line"],
                              "detail": ["no progress"]})
        fig = tf.rollout_gauges(g, xlim=(0.0, 30.0), marks=marks,
                                committed_label="finished so far")
        assert [(type(r.glyph), r.name) for r in fig.renderers] == [
            (Segment, "marks"), (Line, "in flight"), (Line, "committed")]
        # each value held until the next change (steps after), not a line between samples
        assert tf.layer(fig, "in flight").values.tolist() == [
            [0.0, 1.0], [10.0, 1.0], [10.0, 3.0], [20.0, 3.0], [20.0, 0.0]]
        assert tf.layer(fig, "committed").committed.tolist() == [0.0, 0.0, 0.0, 0.0, 4.0]
        [committed] = [r for r in fig.renderers if r.name == "committed"]
        assert committed.y_range_name == "right"
        assert fig.extra_y_ranges["right"].end == pytest.approx(4.0 * 1.15)
        assert fig.y_range.end == pytest.approx(3.0 * 1.15)
        [right] = [a for a in fig.right if isinstance(a, LinearAxis)]
        assert (right.y_range_name, right.axis_label) == ("right", "finished so far")
        assert tf.layer(fig, "marks")[["t", "what"]].values.tolist() == [
            [15.0, "the watchdog's stall line"]]
        tips = {t.renderers[0].name: dict(t.tooltips) for t in fig.tools
                if isinstance(t, HoverTool)}
        assert tips["committed"]["finished so far"] == "@committed"
        assert tips["marks"] == dict(tl.SHADE_TOOLTIPS)

    def test_no_tries_is_still_a_plot_of_the_same_layers(self):
        g, sampled = tl.rollout_gauges_frame(pd.DataFrame(columns=["start_ns", "end_ns",
                                                                   "outcome"]),
                                             t0_ns=0, now_ns=10 * S)
        fig = tf.rollout_gauges(g, xlim=(0.0, 10.0))
        assert not sampled and [r.name for r in fig.renderers] == [
            "marks", "in flight", "committed"]
        assert tf.layer(fig, "in flight").empty


class TestPanels:
    def test_phase_durations_pivot_per_checkpoint_and_participant(self, p1_frames):
        out = plots.phase_durations(p1_frames.checkpoint_ops)
        assert out[["checkpoint_id", "participant", "prepare", "outcome"]].fillna(-1) \
            .values.tolist() == [["ck1", "agent a0", 2.0, "ok"],
                                 ["ck1", "controller", -1, "open"]]

    def test_the_overlap_plot_shows_the_snapshot_outlasting_the_fired_deadline(self, p1_frames):
        ov = plots.deadline_overlaps(p1_frames.deadlines, p1_frames.checkpoint_windows,
                                     now_ns=ns(400))
        assert ov[["row", "kind", "x0", "x1"]].values.tolist() == [
            ["r-7 try 0", "budget", 0.0, 180.0],
            ["r-7 try 0", "snapshot", 150.0, 210.0],
            ["r-7 try 0", "fired", 180.0, 180.0]]
        plot = plots.overlap_plot(ov)
        assert_element_equal(plot.get(2), hv.Points(
            pd.DataFrame({"x": [180.0], "y": [0.0], "row": ["r-7 try 0"],
                          "detail": ["fired while parked"]}),
            ["x", "y"], ["row", "detail"], label="deadline fired"))

    def test_a_participant_whose_instance_is_its_kind_is_named_once(self, p1_frames):
        ops = p1_frames.checkpoint_ops.assign(
            participant_kind=["agent", "environment"], instance=["agent", "environment"])
        assert plots.phase_durations(ops).participant.tolist() == ["agent", "environment"]
        pts = plots.duration_distribution(ops).get(1)
        assert sorted(set(pts.data.participant)) == ["agent"]

    def test_a_deadline_that_outlived_its_budget_says_the_extra_was_suspended(self, p1_frames):
        # a weight sync suspended the deadline for 35 s: it ran 215 s of a 180 s budget
        deadlines = p1_frames.deadlines.assign(suspended_s=35.0, end_ns=ns(215),
                                               fired_ns=ns(215))
        ov = plots.deadline_overlaps(deadlines, p1_frames.checkpoint_windows, now_ns=ns(400))
        assert ov[["kind", "x0", "x1"]].values.tolist() == [
            ["budget", 0.0, 180.0], ["suspended", 180.0, 215.0], ["snapshot", 150.0, 210.0],
            ["fired", 215.0, 215.0]]
        detail = ov[ov.kind == "suspended"].detail.iloc[0]
        assert "+35 s past the 180 s budget" in detail and "suspended" in detail
        assert "35 s suspended on top" in ov[ov.kind == "budget"].detail.iloc[0]
        layer = plots.overlap_plot(ov).get(3)
        assert layer.label == plots.SUSPENDED_LABEL
        assert layer.data[["x0", "x1"]].values.tolist() == [[180.0, 215.0]]
        assert plots.SUSPENDED_LABEL in [label for label, _, _ in plots.OVERLAP_KEY]

    def test_a_deadline_no_window_crossed_is_not_drawn(self, p1_frames):
        late = p1_frames.checkpoint_windows.assign(start_ns=ns(500), end_ns=ns(560))
        assert plots.deadline_overlaps(p1_frames.deadlines, late, now_ns=ns(600)).empty

    def test_overlaps_are_the_cross_join_s_without_making_it(self):
        """Random deadlines and windows (open ones included): the rows are those the plain
        cross join of every deadline with every window gives, in the same order."""
        rng = np.random.default_rng(7)
        n, m, now = 600, 40, ns(5_000)
        start = rng.integers(0, ns(4_000), n)
        fired = rng.random(n) < 0.2
        deadlines = pd.DataFrame({
            "deadline_id": [f"d{i}" for i in range(n)], "kind": "rollout",
            "rollout_id": [f"r-{i}" for i in range(n)], "attempt": rng.integers(0, 3, n),
            "budget_s": 180.0, "suspended_s": 0.0,
            "start_ns": start,
            "end_ns": pd.array([None if o else int(v) for o, v in
                                zip(rng.random(n) < 0.1, start + ns(180), strict=True)],
                               dtype="Int64"),
            "fired_ns": pd.array([int(v) if f else None for f, v in
                                  zip(fired, start + ns(180), strict=True)], dtype="Int64"),
            "outcome": np.where(fired, "fired", "completed"), "state_when_fired": "parked"})
        wstart = np.sort(rng.integers(0, ns(4_800), m))
        windows = pd.DataFrame({
            "checkpoint_id": [f"ck{j}" for j in range(m)], "start_ns": wstart,
            "end_ns": pd.array([int(v) for v in wstart[:-1] + ns(60)] + [None],
                               dtype="Int64")})

        def cross_join(d, w):  # the formulation the plot used: every deadline x every window
            d = d[(d.kind == "rollout") & d.budget_s.notna()]
            d = d.assign(_end=d.end_ns.fillna(now).astype("int64"))
            pairs = d.merge(w[["checkpoint_id", "start_ns", "end_ns"]], how="cross",
                            suffixes=("", "_w"))
            w_end = pairs.end_ns_w.fillna(now).astype("int64")
            hit = (pairs.start_ns_w < pairs._end) & (w_end > pairs.start_ns)
            return pairs[hit].assign(_wend=w_end[hit])

        expected = cross_join(deadlines, windows)
        got = plots.deadline_overlaps(deadlines, windows, now_ns=now, cap=10_000)
        snapshots = got[got.kind == "snapshot"]
        assert len(expected) > 200 and expected.end_ns_w.isna().any()
        assert snapshots.shape[0] == len(expected)
        by_deadline = {did: grp.checkpoint_id.tolist()
                       for did, grp in expected.groupby("deadline_id", sort=False)}
        for label, grp in snapshots.groupby("row", sort=False):
            rid = grp.rollout_id.iloc[0]
            assert grp.detail.str.removeprefix("snapshot ").tolist() == \
                by_deadline[f"d{rid.removeprefix('r-')}"]
        first = expected[expected.deadline_id == "d" + snapshots.rollout_id.iloc[0][2:]]
        assert snapshots.x1.iloc[:len(first)].tolist() == pytest.approx(
            ((first._wend - first.start_ns) / 1e9).tolist())

    def test_failure_streaks_compare_probe_and_reported_per_shard(self):
        shards = frame([shard(3, "suspect", 0, 5, probe=1),
                        shard(3, "dead", 5, None, probe=1, reported=3, serving=False)],
                       SHARD_COLS)
        assert_element_equal(plots.failure_streaks(shards), hv.Bars(
            pd.DataFrame({"shard": ["shard 3", "shard 3"], "source": ["probe", "reported"],
                          "failures": [1.0, 3.0]}), ["shard", "source"],
            hv.Dimension("failures", label="worst streak")))


class TestStory:
    def incident(self):
        return {"incident_id": "p1", "kind": "deadline_fired_while_parked",
                "severity": "critical", "start_ns": ns(180), "end_ns": ns(180),
                "subject": "r-7 try 0", "summary": "Rollout r-7 try 0: <b>fired</b>",
                "evidence": ["dl", "park", "elsewhere"], "caused_by": None}

    def test_the_story_walks_the_evidence_in_time_order(self, p1_frames):
        frames = {n: getattr(p1_frames, n) for n in (
            "deadlines", "parked_intervals", "rollout_attempts", "completions",
            "checkpoint_ops", "shard_states")}
        st = incident_story(self.incident(), frames, t0_ns=T0,
                            incidents=pd.DataFrame(columns=INC_COLS))
        assert [t for t, _ in st.steps] == [0.0, 150.0, 180.0, 210.0]
        assert st.steps[2][1].startswith("The deadline fires while the try is parked")
        assert st.unmatched_evidence == 1
        assert "suspend_request_deadlines" in st.fix

    def test_the_story_html_escapes_everything_from_the_data(self, p1_frames):
        st = incident_story(self.incident(), {}, t0_ns=T0,
                            incidents=pd.DataFrame(columns=INC_COLS))
        out = story_html(st, subject="<script>alert(1)</script>")
        assert "<script>" not in out and "&lt;script&gt;" in out
        assert "&lt;b&gt;fired&lt;/b&gt;" in out
        assert np.char.count(out, "<ol>") == 0  # no evidence found: no empty list


def test_a_gym_row_draws_on_its_prompt_groups_lane():
    import pandas as pd

    from rolloutscope.dashboard.timeline_plot import group_rollout_ids

    attempts = pd.DataFrame({"rollout_id": ["p7", "p7", "p8"], "prompt_idx": [7, 7, 8]})
    parked = pd.DataFrame({"rollout_id": ["p7-0", "p8-1", "x-0"], "prompt_idx": [7, 8, 99]})
    assert list(group_rollout_ids(parked, attempts)) == ["p7", "p8", "x-0"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_points", [5, 40, 2000])
def test_the_gauges_sample_exactly_when_the_run_has_more_changes_than_points(seed, max_points):
    """Tries in flight and committed at every change (or sampled past ``max_points`` distinct
    change times): checked against counting each try at each instant directly."""
    import numpy as np

    from rolloutscope.dashboard.timeline_plot import rollout_gauges_frame

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    grid = int(rng.integers(2, 40))  # few distinct times: duplicates galore
    starts = rng.integers(0, grid, n) * 10**9
    ends = starts + rng.integers(0, grid, n) * 10**9
    open_ = rng.random(n) < 0.2
    outcome = np.where(open_, "open", rng.choice(["committed", "failed", "finished"], n))
    attempts = pd.DataFrame({"start_ns": starts,
                             "end_ns": pd.array(np.where(open_, 0, ends), dtype="Int64"),
                             "outcome": outcome})
    attempts.loc[open_, "end_ns"] = pd.NA
    # sampled instants on whole seconds (linspace's step exact), so they compare exactly
    step = (max_points - 1) * 10**9
    now = -(-(int(ends.max()) + 10**9) // step) * step
    g, sampled = rollout_gauges_frame(attempts, t0_ns=0, now_ns=now, max_points=max_points)
    changes = np.unique(np.concatenate([starts, ends[~open_], [0, now]]).astype("float64"))
    assert sampled == (len(changes) > max_points)
    assert len(g) == (max_points if sampled else len(changes))
    for t, flight, done in zip(g.t * 1e9, g.in_flight, g.committed):
        t = round(t)
        ended = (~open_) & (ends <= t)
        assert flight == ((starts <= t) & ~ended).sum()
        assert done == (ended & np.isin(outcome, ["committed", "finished"])).sum()


@pytest.mark.parametrize("seed", range(8))
def test_values_find_their_instant_on_an_even_grid_as_a_binary_search_does(seed):
    """The gauges' instants are evenly spaced when sampled: each start and end finds its
    instant by a division, and lands where a binary search puts it, on an instant, a
    nanosecond either side of one, outside the grid or missing, at nanosecond times of today."""
    import numpy as np

    from rolloutscope.dashboard.timeline_plot import _bins

    rng = np.random.default_rng(seed)
    t0 = float(rng.choice([0, 1_800_000_000 * 10**9]))
    at, step = np.linspace(t0, t0 + float(rng.integers(10**6, 10**13)),
                           int(rng.integers(2, 3000)), retstep=True)
    on = rng.choice(at, 200)
    values = np.concatenate([on, on - 1, on + 1, on - 256, on + 256,
                             rng.uniform(at[0] - step, at[-1] + step, 500),
                             [at[0] - 10 * step, at[-1] + 10 * step, np.nan]])
    rng.shuffle(values)
    assert _bins(values, at, step=step).tolist() == \
        np.searchsorted(at, values, side="left").tolist()


def _try_lanes_by_pandas(frames: tl.TimelineFrames) -> list[str]:
    """The try lanes as the pandas formulation ``_try_lanes`` replaced made them: the frames'
    tries joined, deduplicated, kept for the lanes' rollouts and sorted by lane then attempt."""
    order = {str(r): i for i, r in enumerate(frames.rollout_ids)}
    cols = ["rollout_id", "attempt", "dialect", "capture_key"]
    tries = pd.concat([df.reindex(columns=cols).astype(object) for df in (
        frames.rollout_attempts, frames.parked_intervals, frames.deadlines, frames.completions)
        if len(df)] or [pd.DataFrame({c: [] for c in cols})]).drop_duplicates()
    tries = tries[tries.rollout_id.astype(str).isin(order)]
    tries = tries.assign(_o=tries.rollout_id.astype(str).map(order),
                         _a=pd.to_numeric(tries.attempt, errors="coerce").fillna(-1))
    tries = tries.sort_values(["_o", "_a"])
    return list(dict.fromkeys(tl._attempt_labels(tries))) if len(tries) else []


@pytest.mark.parametrize("seed", range(8))
def test_try_lanes_are_the_pandas_formulation_s(seed):
    """Row by row, the try lanes come out as the joined, deduplicated and sorted frames gave
    them: RL tries by rollout and attempt, Gym rollouts by the id Gym gave them, missing
    attempts first, rows of rollouts not drawn left out, on frames that lack columns."""
    rng = np.random.default_rng(seed)
    ids = [f"p{i}" for i in range(6)]

    def rows(n, gym_cols):
        out = {"rollout_id": [ids[i] for i in rng.integers(0, 6, n)],
               "attempt": pd.array([None if rng.random() < 0.2 else int(v)
                                    for v in rng.integers(0, 3, n)], dtype="Int64")}
        if gym_cols:
            out["dialect"] = [["rl", "gym", None][i] for i in rng.integers(0, 3, n)]
            out["capture_key"] = [None if rng.random() < 0.3 else f"k{int(v)}"
                                  for v in rng.integers(0, 4, n)]
        return pd.DataFrame(out)

    empty = pd.DataFrame({"rollout_id": [], "attempt": []})
    frames = tl.TimelineFrames(
        checkpoint_windows=empty, checkpoint_ops=empty, shard_states=empty,
        rollout_attempts=rows(int(rng.integers(0, 30)), True),
        parked_intervals=rows(int(rng.integers(0, 10)), False),
        deadlines=rows(int(rng.integers(0, 10)), False) if seed % 3 else empty,
        completions=rows(int(rng.integers(0, 10)), bool(seed % 2)), incidents=empty,
        rollout_ids=tuple(rng.permutation(ids)[:int(rng.integers(0, 6))]))
    assert list(dict.fromkeys(tl._try_lanes(frames))) == _try_lanes_by_pandas(frames)
