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


def test_the_stragglers_of_the_latest_steps_then_of_a_picked_one(tmp_path, monkeypatch):
    """A run of many steps lists the latest steps' stragglers up to STRAGGLER_ROWS, not the
    run's (a 16k-rollout run waits for 1,600 groups a step), and a picked step's own."""
    from rolloutscope.dashboard import steps_view
    from tests.synthetic_run import synthetic_run

    path = synthetic_run(tmp_path / "run.duckdb", spans=40_000)
    with RunStore(path, read_only=True) as store:
        ledger = ledger_table(store, "synthetic")
        assert len(ledger) >= 10
        per_step = dict(zip(ledger.step, ledger.stragglers))
        last = int(ledger.step.iloc[-1])
        monkeypatch.setattr(steps_view, "STRAGGLER_ROWS",
                            per_step[last] + per_step[last - 1])
        view = Steps(DataStore(store))
        assert set(view._late.value.step) >= {last - 1, last}
        assert min(view._late.value.step) == last - 1
        assert len(view._late.value) == per_step[last] + per_step[last - 1] + int(
            (view.stragglers.step == last + 1).sum())  # and the groups still running
        assert "latest steps" in view._late_title.object
        first = int(ledger.step.iloc[0])
        view._table.selection = [0]
        assert set(view._late.value.step) == {first}
        assert len(view._late.value) == per_step[first]
        assert f"step {first}" in view._late_title.object
