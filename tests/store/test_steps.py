"""Runs per train step and two runs aligned by step, on a capture and its replay with a fix."""

from __future__ import annotations

import json

import pytest

from rolloutscope.cli import main
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get
from rolloutscope.store import RunStore
from rolloutscope.store.steps import diff_totals, step_diff, step_table

FIX = "pause-deadlines-during-snapshot"


@pytest.fixture(scope="module")
def pair_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("steps") / "pair.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("demo"), store, run_id="capture")
        replay_into_store(get("demo"), store, run_id="fixed", variants=[FIX])
    return path


def test_each_step_counts_what_happened_in_it(pair_path):
    with RunStore(pair_path, read_only=True) as store:
        steps = step_table(store, "capture")
        attempts = store.view("rollout_attempts", run_id="capture")
        deadlines = store.view("deadlines", run_id="capture")
        incidents = store.view("incidents", run_id="capture")
    assert list(steps.step[steps.trained]) == list(range(1, int(steps.trained.sum()) + 1))
    assert steps.committed.sum() == (attempts.outcome == "committed").sum()
    assert steps.timeouts.sum() == (deadlines.outcome == "fired").sum() == 4
    assert steps.incidents.sum() == len(incidents)
    assert steps.start_s.is_monotonic_increasing and (steps.end_s >= steps.start_s).all()
    # the quarantine at 198 s falls in the step whose interval holds it
    q = steps[steps.incident_kinds.str.contains("quarantine")].iloc[0]
    assert q.start_s <= 198.0 <= q.end_s


def test_the_fix_shows_step_by_step(pair_path):
    with RunStore(pair_path, read_only=True) as store:
        diff = step_diff(step_table(store, "capture"), step_table(store, "fixed"))
    totals = diff_totals(diff)
    assert totals["timeouts"] == (4.0, 0.0, -4.0)
    assert totals["committed"][2] > 0
    fired = diff[diff.timeouts_a > 0]
    assert (fired.d_timeouts < 0).all()
    both = diff.dropna(subset=["committed_a", "committed_b"])
    assert (both.d_committed == both.committed_b - both.committed_a).all()


def test_the_command_prints_the_table_and_json(pair_path, capsys):
    assert main(["diff", f"{pair_path}:capture", f"{pair_path}:fixed"]) == 0
    out = capsys.readouterr().out
    assert "per train step" in out and "total" in out and "(    -4)" in out
    assert main(["diff", f"{pair_path}:capture", f"{pair_path}:fixed", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["timeouts"] == [4.0, 0.0, -4.0]
    assert main(["diff", f"{pair_path}:capture", f"{pair_path}:capture"]) == 2
    assert "same run" in capsys.readouterr().err
    assert main(["diff", f"{pair_path}:nope", f"{pair_path}:capture"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_the_plus_marker_is_explained_only_where_a_step_carries_it(pair_path, tmp_path, capsys):
    legend = "(a step marked + is what happened after the run's last completed train step)"
    # demo's runs train through their last rows: no step is marked, so no legend
    assert main(["diff", f"{pair_path}:capture", f"{pair_path}:fixed"]) == 0
    out = capsys.readouterr().out
    assert legend not in out
    assert not [line for line in out.splitlines() if line.split() and
                line.split()[0].endswith("+")]
    # lost-reply stalls after its last train step: that row is marked and the legend follows
    path = tmp_path / "lost.duckdb"
    with RunStore(path) as store:
        replay_into_store(get("lost-reply"), store, run_id="a")
        replay_into_store(get("lost-reply"), store, run_id="b", variants=["retire-then-adopt"])
    assert main(["diff", f"{path}:a", f"{path}:b"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.split() and
            line.split()[0].endswith("+")]
    assert legend in out


def test_a_run_compared_with_itself_is_refused_however_its_path_is_spelled(pair_path, capsys,
                                                                          monkeypatch):
    monkeypatch.chdir(pair_path.parent)
    assert main(["diff", f"./{pair_path.name}:capture", f"{pair_path}:capture"]) == 2
    assert "same run" in capsys.readouterr().err
    # the same run id in another file is another run: compared, exit 0
    other = pair_path.parent / "copy.duckdb"
    other.write_bytes(pair_path.read_bytes())
    assert main(["diff", f"{pair_path}:capture", f"{other}:capture"]) == 0


def test_a_gym_deployment_counts_its_finished_and_failed_rollouts(tmp_path):
    """Released Gym's rollouts (no RL try) count as committed where they finished and as
    failed tries where they failed, read from the maintained rows as from the views."""
    from tests.gym_capture import collect_capture

    path = collect_capture(tmp_path / "gym.duckdb")
    with RunStore(path, read_only=True) as store:
        assert store.maintained
        (run,) = store.run_ids()
        gym = store.view("gym_attempts", run_id=run)
        finished = int(gym.outcome.isin(["committed", "finished"]).sum())
        failed = int(gym.outcome.isin(["failed", "cancelled"]).sum())
        assert finished > 0
        steps = step_table(store, run)
        assert int(steps.committed.sum()) == finished
        assert int(steps.failed_tries.sum()) == failed
