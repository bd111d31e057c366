"""store/summaries.py: the per-second sums by second, by bucket and by train step agree with one
another and with the rows they sum (the sums themselves are held to the views in
tests/store/test_derived.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore, derived, summaries

RUN = "demo"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("summaries") / "demo.duckdb"
    with RunStore(path) as s:
        replay_into_store(get(RUN), s, run_id=RUN)
    with RunStore(path, read_only=True) as s:
        yield s


def _ends(store) -> np.ndarray:
    return np.array([e for (e,) in store.query(
        "SELECT end_ns FROM rs_read.train_step_spans WHERE run_id = ? AND end_ns IS NOT NULL "
        "ORDER BY end_ns", [RUN])], dtype="int64")


def test_per_step_sums_are_the_seconds_attributed_by_their_last_instant(store):
    ends = _ends(store)
    assert len(ends) >= 2
    sec = summaries.seconds(store, RUN)
    row = np.searchsorted(ends, sec.sec_ns.to_numpy() + derived.SECOND_NS - 1, side="left")
    got = summaries.step_counts(store, RUN, ends)
    assert len(got) == len(ends) + 1
    for m in summaries.MEASURE_NAMES:
        want = np.bincount(row, weights=sec[m].to_numpy(), minlength=len(ends) + 1)
        assert got[m].to_numpy() == pytest.approx(want), m
    # the run's commits fall in several steps: the attribution is tested, not a single row
    assert (got.committed > 0).sum() >= 2


def test_no_steps_is_one_row_of_the_run(store):
    got = summaries.step_counts(store, RUN, np.array([], dtype="int64"))
    total = summaries.seconds(store, RUN)
    assert len(got) == 1
    for m in summaries.MEASURE_NAMES:
        assert got[m].iloc[0] == pytest.approx(total[m].sum()), m


def test_buckets_are_the_seconds_summed(store):
    sec = summaries.seconds(store, RUN)
    for width in (1, 7, 60):
        b = summaries.buckets(store, RUN, width)
        want = sec.assign(b=sec.sec_ns // (width * 10**9) * width * 10**9).groupby("b").sum()
        assert list(b.bucket_ns) == list(want.index)
        for m in summaries.MEASURE_NAMES:
            assert b[m].to_numpy() == pytest.approx(want[m].to_numpy()), (width, m)
        assert b.in_flight.iloc[-1] == sec.tries_started.sum() - sec.tries_ended.sum()


def test_a_window_holds_only_its_seconds(store):
    sec = summaries.seconds(store, RUN)
    lo, hi = int(sec.sec_ns.iloc[len(sec) // 3]), int(sec.sec_ns.iloc[2 * len(sec) // 3])
    part = summaries.seconds(store, RUN, lo, hi)
    assert part.sec_ns.min() >= lo and part.sec_ns.max() < hi
    assert len(part) == ((sec.sec_ns >= lo) & (sec.sec_ns < hi)).sum()
