"""The Steps tab headless: its plot as data, and what it reads, on a replayed scenario."""

from __future__ import annotations

import panel as pn
import pytest

from rolloutscope.dashboard.datastore import DataStore
from rolloutscope.dashboard.steps_view import LABELS, Steps, split_plot
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore
from rolloutscope.store.ledger import SPLIT, ledger_table

RUN = "snapshot-outlasts-deadline"


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("steps-view") / "p1.duckdb"
    with RunStore(p) as store:
        replay_into_store(get(RUN), store, run_id=RUN)
    return p


def test_the_stacked_bars_of_a_step_add_up_to_its_wall_time(path):
    with RunStore(path, read_only=True) as store:
        ledger = ledger_table(store, RUN)
    bars = split_plot(ledger).dframe()
    by_step = bars.groupby("step").seconds.sum()
    assert by_step.to_dict() == pytest.approx({"1": float(ledger.duration_s.iloc[0])})
    parts = dict(zip(bars.part, bars.seconds))
    # the snapshot's 60 s and the wait for the re-dispatched try are drawn as such
    assert parts[LABELS["parked_s"]] == pytest.approx(60.0)
    assert parts[LABELS["straggler_s"]] == pytest.approx(float(ledger.straggler_s.iloc[0]))
    assert set(bars.part) <= {LABELS[c] for c in SPLIT}


def test_the_tab_shows_the_ledger_and_its_straggler_and_renders(path):
    with RunStore(path, read_only=True) as store:
        view = Steps(DataStore(store))
        assert list(view._table.value.step) == [1]
        assert list(view._late.value.rollout_id) == ["p00000"]
        assert "waiting for stragglers" in view._note.object
        assert not view._again.visible  # a finished run: nothing more to read
        assert pn.panel(view).get_root() is not None
