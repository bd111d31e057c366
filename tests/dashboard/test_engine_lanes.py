"""Engine lanes beside the shard lanes (dashboard/engine_lanes.py): each scraped engine's state
and each traced engine's requests, read through the DataStore's capped views, on the Fleet and
Timeline tabs; a run without engine data draws as it did without them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pandas as pd
import pytest

from rolloutscope.dashboard import datastore as ds_module
from rolloutscope.dashboard import engine_lanes as el
from rolloutscope.dashboard import time_figures as tf
from rolloutscope.dashboard import timeline_plot as tl
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.time_views import Fleet, Timeline
from rolloutscope.store import RunStore
from tests.engine_metrics import READS
from tests.store.conftest import S, T0

from .conftest import ADDRESSES, ENGINE_RUN

RUN = ENGINE_RUN


@pytest.fixture
def data(engine_path) -> Iterator[DataStore]:
    with RunStore(engine_path, read_only=True) as store:
        yield DataStore(store, run_id=RUN)


def state_bars(plot, address: str) -> pd.DataFrame:
    bars = plot.layer("bars")
    return bars[bars.lane == f"engine {address} #0"].sort_values("x0", ignore_index=True)


class TestEngineLanesSitBesideTheShardsTheyServe:
    def test_the_fleet_tab_draws_shards_then_their_engines_then_the_traced_engine(self, data):
        labels = [label for _, label in Fleet(data).lane_figure().lanes]
        assert labels[:6] == ["shard 0", "shard 1", "shard 2",
                              *(f"engine {a} #0" for a in ADDRESSES)]
        assert len(labels) == 7 and labels[6].startswith("engine tests")

    def test_the_timeline_draws_the_same_engine_lanes_after_its_shards(self, data):
        labels = [label for _, label in Timeline(data).lane_figure().lanes]
        shards = labels.index("shard 2")
        assert labels[shards + 1:shards + 4] == [f"engine {a} #0" for a in ADDRESSES]

    def test_each_scrape_is_a_bar_of_what_the_engine_said_it_was_doing(self, data):
        plot = Fleet(data).lane_figure()
        healthy, wedged, saturated = (state_bars(plot, a) for a in ADDRESSES)
        assert [len(b) for b in (healthy, wedged, saturated)] == [READS] * 3
        # tests/engine_metrics.py: healthy runs 4 with k % 2 waiting; wedged serves three
        # reads then holds 2 waiting; saturated's queue grows and it preempts from its 2nd read
        assert list(healthy.what) == ["engine serving", "engine backlog"] * (READS // 2)
        assert list(wedged.what) == ["engine serving"] * 3 + ["engine backlog"] * (READS - 3)
        assert list(saturated.what) == ["engine backlog"] + ["engine preempting"] * (READS - 1)
        assert wedged.detail.iloc[5] == ("running 3, waiting 2, KV cache 90%, preempted 0; "
                                         "serves shard 1")

    def test_a_scrape_holds_until_the_engines_next_and_the_last_has_no_width(self, data):
        stays = el.state_stays(data.frames["engine_state"])
        for _, engine in stays.groupby("engine"):
            engine = engine.sort_values("ts_ns")
            assert list(engine.end_ns[:-1]) == list(engine.start_ns[1:])
            assert engine.end_ns.iloc[-1] == engine.start_ns.iloc[-1]
            assert list(engine.start_ns) == [T0 + 10 * S + k * S // 2 for k in range(READS)]

    def test_each_traced_request_is_a_bar_from_arrival_to_end(self, data):
        plot = Fleet(data).lane_figure()
        bars = plot.layer("bars")
        bars = bars[bars.lane.str.startswith("engine tests")].sort_values("x0")
        t0 = data.origin_ns()
        assert list(bars.what) == ["request req-0", "request req-1", "request req-2"]
        assert list(bars.x0) == pytest.approx([(T0 + (11 + k) * S - t0) / S for k in range(3)])
        assert list(bars.x1) == pytest.approx([(T0 + (13 + k) * S - t0) / S for k in range(3)])
        # queued 1.5 s of its 2: drawn as queued; the others as served
        assert list(bars.color) == [el.style.ENGINE_REQUEST, el.style.ENGINE_QUEUED,
                                    el.style.ENGINE_REQUEST]
        assert bars.detail.iloc[1] == ("queued 1.500 s, first token 1.625 s, tokens 20 → 5")

    def test_the_key_names_the_engine_bars_drawn(self, data):
        key = dict((label, color) for label, _, color in
                   tl.lane_key(Fleet(data)._frames(keep=("shard_states", "engine_state",
                                                         "engine_requests", "shard_engines")),
                               markers=False))
        assert {"engine serving", "engine backlog", "engine preempting", "engine request",
                "request mostly queued"} <= set(key)
        assert "engine idle" not in key  # no scrape said so


class TestTheDataStoreReadsEngineViewsCapped:
    def test_only_the_latest_requests_and_scrapes_are_read(self, engine_path, monkeypatch):
        for name, cap in (("engine_requests", 2), ("engine_state", 4)):
            monkeypatch.setitem(ds_module.VIEWS, name,
                                dataclasses.replace(ds_module.VIEWS[name], cap=cap))
        with RunStore(engine_path, read_only=True) as store:
            data = DataStore(store, run_id=RUN)
            assert sorted(data.frames["engine_requests"].request_id) == ["req-1", "req-2"]
            state = data.frames["engine_state"]
            last = T0 + 10 * S + (READS - 1) * S // 2
            first_engine = f"engine {ADDRESSES[0]} #0"
            assert sorted(zip(state.ts_ns, state.engine)) == [
                (last - S // 2, first_engine), *((last, f"engine {a} #0") for a in ADDRESSES)]


class TestARunWithoutEngineDataDrawsAsBefore:
    def test_the_lane_plots_are_those_of_frames_without_engines(self, p1_store):
        data = DataStore(p1_store)
        assert not any(len(data.frames[n]) for n in ("engine_state", "engine_requests"))
        for view in (Fleet(data), Timeline(data)):
            plot = view.lane_figure()
            frames = view._frames(keep=None if isinstance(view, Timeline) else
                                  ("checkpoint_windows", "shard_states"),
                                  rollout_ids=data.rollout_lanes()[0]
                                  if isinstance(view, Timeline) else ())
            plain = tl.TimelineFrames(**{f.name: getattr(frames, f.name)
                                         for f in dataclasses.fields(frames)
                                         if not f.name.startswith(("engine_", "shard_eng"))})
            expected = tf.lane_layers(plain, t0_ns=data.origin_ns(),
                                      now_ns=data.last_seen_ns(), xlim=plot.xlim,
                                      markers=isinstance(view, Timeline))
            assert plot.lanes == expected.lanes and plot.height == expected.height
            assert [layer.name for layer in plot.layers] == [
                layer.name for layer in expected.layers]
            for layer in expected.layers:
                pd.testing.assert_frame_equal(plot.layer(layer.name), expected.layer(layer.name))
            assert not any(label.startswith("engine") for _, label in plot.lanes)
