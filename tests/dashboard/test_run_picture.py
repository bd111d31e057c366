"""The Overview's whole-run picture (dashboard/run_picture.py) reads the store's per-second sums:
its buckets sum to what the views' rows say, its gauges end at what is open, it is the same read
through a collector, and a store that keeps no sums draws it from the views' rows."""

from __future__ import annotations

import panel as pn
import pytest

from rolloutscope.dashboard import run_picture
from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.shared import DashboardLimits, SharedReads
from rolloutscope.dashboard.tabs import Overview
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore, derived, summaries
from rolloutscope.store.remote import RemoteRunStore
from tests.collectors.conftest import start_collector
from tests.store.test_derived import _strip

RUN = "demo"


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("picture") / "p1.duckdb"
    with RunStore(p) as store:
        replay_into_store(get(RUN), store, run_id=RUN)
    return p


def _expected(store: RunStore) -> dict[str, float]:
    """Each count and gauge end, from the views' rows."""
    q = lambda sql: store.query(sql, [RUN])[0][0]  # noqa: E731
    return {
        "committed": q("SELECT count(*) FROM rl_attempts WHERE run_id = ? "
                       "AND outcome = 'committed'"),
        "timeouts": q("SELECT count(*) FROM deadlines WHERE run_id = ? AND outcome = 'fired'"),
        "tries_started": q("SELECT count(*) FROM rl_attempts WHERE run_id = ?"),
        "parked_s": q("SELECT coalesce(sum(duration_s), 0) FROM parked_intervals "
                      "WHERE run_id = ? AND end_ns IS NOT NULL"),
        "in_flight": q("SELECT count(*) FROM rl_attempts WHERE run_id = ? AND end_ns IS NULL"),
        "serving_shards": q("SELECT count(*) FROM shard_states WHERE run_id = ? AND serving "
                            "AND end_ns IS NULL"),
    }


def _check(buckets, expected) -> None:
    for col in ("committed", "timeouts", "tries_started", "parked_s"):
        assert buckets[col].sum() == pytest.approx(expected[col]), col
    for gauge in ("in_flight", "serving_shards"):
        assert buckets[gauge].iloc[-1] == expected[gauge], gauge


def test_the_buckets_sum_to_the_views_rows(path):
    with RunStore(path, read_only=True) as store:
        assert store.maintained
        expected = _expected(store)
        assert expected["committed"] > 20 and expected["timeouts"] >= 1, expected
        assert expected["parked_s"] > 0, expected
        for width in (1, 30, 600):
            buckets = summaries.buckets(store, RUN, width)
            assert (buckets.bucket_ns % (width * 10**9) == 0).all()
            _check(buckets, expected)


def _large(**kw) -> SharedReads:
    """A server whose sessions read any run of more than 100 spans as a large one."""
    return SharedReads(DashboardLimits(window_spans=100, **kw))


def test_the_overview_draws_it_in_at_most_max_buckets(path):
    with RunStore(path, read_only=True) as store:
        data = DataStore(store, shared=_large())
        assert data.large
        view = Overview(data)
        buckets, width = data.run_buckets()
        assert view._picture.visible and f"of {width:g} s" in view._picture_note.object
        length_s = (data.last_seen_ns() - data.origin_ns()) / 1e9
        assert len(buckets) <= run_picture.MAX_BUCKETS and width * run_picture.MAX_BUCKETS \
            >= length_s
        drawn = run_picture.curves(view._picture.object)
        assert set(drawn) == {*run_picture.GAUGE_LABELS.values(),
                              *run_picture.COUNT_LABELS.values()}
        assert drawn["committed"].y.sum() == _expected(store)["committed"]
        assert drawn["tries in flight"].y.iloc[-1] == _expected(store)["in_flight"]
        assert pn.panel(view).get_root() is not None
        # sessions of one server read the buckets once
        shared = SharedReads()
        first = DataStore(store, shared=shared).run_buckets()[0]
        assert DataStore(store, shared=shared).run_buckets()[0] is first
        assert first.equals(buckets)


def test_a_store_that_keeps_no_sums_draws_it_from_the_views(path, tmp_path):
    old = tmp_path / "old.duckdb"
    old.write_bytes(path.read_bytes())
    _strip(old)
    with RunStore(old, read_only=True) as store:
        assert not store.maintained
        _check(summaries.buckets(store, RUN, 30), _expected(store))
        assert DataStore(store).run_buckets() is not None


def test_it_reads_the_same_through_a_collector(path, tmp_path):
    served = tmp_path / "served.duckdb"
    served.write_bytes(path.read_bytes())
    with RunStore(path, read_only=True) as local:
        want = summaries.buckets(local, RUN, 30)
    collector = start_collector(served)
    try:
        with RemoteRunStore(collector.http) as remote:
            assert remote.maintained
            got = summaries.buckets(remote, RUN, 30)
    finally:
        assert collector.stop() == 0, "".join(collector.output)
    assert got.round(9).equals(want.round(9)), (got, want)


def test_the_sums_cover_every_measure_the_picture_draws():
    drawn = set(run_picture.COUNT_LABELS) | {m for pair in summaries.GAUGES.values()
                                             for m in pair}
    assert drawn <= {m[0] for m in derived.MEASURES}


def test_a_run_read_whole_has_no_picture(path):
    """A run the session reads whole: its Timeline draws all of it; the Overview has no
    picture."""
    with RunStore(path, read_only=True) as store:
        view = Overview(DataStore(store, shared=SharedReads()))
        assert not view.data.large and not view._picture.visible
