"""Every incident kind drawn with its evidence: the Incident tab's scene over the incident zoo
(a store with an incident of each of the 19 kinds), headless, as data."""

from __future__ import annotations

import pytest

from rolloutscope.store import RunStore
from rolloutscope.vocabulary import IncidentKind
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.incident_view import IncidentDetail

from .conftest import serving_lines
from .incident_zoo import build_zoo

KINDS = sorted(k.value for k in IncidentKind)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    path = tmp_path_factory.mktemp("zoo") / "zoo.duckdb"
    chosen = build_zoo(path)
    return path, chosen


@pytest.fixture(scope="module")
def zoo_store(zoo):
    with RunStore(zoo[0], read_only=True) as store:
        yield store


def detail_for(zoo, zoo_store, kind):
    run_id, incident_id = zoo[1][kind]
    data = DataStore(zoo_store, run_id=run_id)
    data.incident = incident_id
    return data, IncidentDetail(data)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_draws_the_incident_and_what_its_summary_talks_about(zoo, zoo_store, kind):
    data, detail = detail_for(zoo, zoo_store, kind)
    scene = detail.scene()
    lanes = tl.lanes_for(scene.frames)
    assert lanes.labels[0] == "incident"  # never an empty plot
    plot = detail.lane_figure()
    bars, marks = len(tf.layer(plot, "bars")), len(tf.layer(plot, "marks"))
    # the incident's bar, and its evidence beside it, or (a divergence read from the
    # watchdog's metrics: no span) its lines on the serving plot
    serving = detail.serving_figure()
    drawn = serving_lines(serving) if scene.serving else {}
    lines = [len(drawn.get(w, ())) for w in ("fleet serving shards", "router serving backends")]
    assert bars >= 1 and (bars + marks >= 2 or min(lines) >= 2), lanes.labels
    inc = data.selected_incident()
    ev = data.evidence(inc)
    rects = tl.interval_rects(scene.frames, lanes, data.origin_ns(), data.last_seen_ns())
    drawn = set(rects.span_id)
    marked = set()
    for name in ("deadlines", "completions"):
        df = data.frames[name]
        marked |= set(df.span_id[df.span_id.isin(ev)]) if len(df) else set()
    # every evidence span is a bar, a marker's span, or read from all_spans onto its own lane
    assert ev <= drawn | marked, sorted(ev - drawn - marked)
    assert "outside the model views" not in detail.story().object
    # the plot shows the incident: its start is inside the x range
    xlim = plot.xlim
    start = (int(inc["start_ns"]) - data.origin_ns()) / 1e9
    assert xlim[0] <= start <= xlim[1]


def test_the_stall_draws_the_gauges_flat_the_watchdog_line_and_the_hung_weight_sync(zoo,
                                                                                 zoo_store):
    data, detail = detail_for(zoo, zoo_store, "stall")
    scene = detail.scene()
    assert scene.gauges and not scene.serving
    spans = scene.frames.spans
    sync = spans[spans.name == "rl.weight_sync"]
    assert len(sync) and sync.end_ns.isna().any()  # the refit that never ends
    assert "the watchdog's stall line" in set(scene.frames.events.name)
    assert {"stall_timeout_s passes", "the watchdog's stall line"} <= set(scene.marks.what)
    gauges = detail.gauge_figure()
    flight, committed = tf.layer(gauges, "in flight"), tf.layer(gauges, "committed")
    start = (int(data.selected_incident()["start_ns"]) - data.origin_ns()) / 1e9
    after = committed[committed.t > start]
    assert len(after) and after.committed.nunique() == 1  # nothing committed in the stall
    assert flight[flight.t > start + 60].in_flight.max() == 0  # nothing in flight
    marks = tf.layer(gauges, "marks")
    assert {"stall_timeout_s passes", "the watchdog's stall line"} <= set(marks.what)
    story = detail.story().object
    assert "A weight sync (refit)" in story and "it never ends" in story
    assert "The watchdog&#x27;s stall line" in story


@pytest.mark.parametrize("kind", ["quarantine", "wedged_backend", "stale_weights_serving",
                                  "router_fleet_divergence"])
def test_fleet_kinds_draw_their_shards_and_the_serving_line(zoo, zoo_store, kind):
    data, detail = detail_for(zoo, zoo_store, kind)
    scene = detail.scene()
    assert scene.serving
    subject = data.selected_incident()["subject"]
    if subject.startswith("shard "):
        assert subject in tl.lanes_for(scene.frames).labels
    serving = detail.serving_figure()
    assert len(tf.layer(serving, "lines")) > 0
