"""The step ledger kept per step (rolloutscope/store/derived.py, STEP_VIEWS): the steps that
settled are read from their kept rows, the latest computed from the spans after the floor, and
``rs_read`` equals the views at every moment: while steps are kept pass by pass, after a late
span lands in a kept step, and when nothing is kept yet."""

from __future__ import annotations

from contextlib import closing

import pytest

from rolloutscope.store import RunStore, derived
from rolloutscope.store.ledger import ledger_table, straggler_table
from tests.store.test_derived import differences
from tests.synthetic_run import synthetic_run

S = 10**9


@pytest.fixture
def keep_often(monkeypatch):
    """Steps kept on every pass, settled a minute after they end, the floor ten minutes
    before the last kept step (the synthetic run's tries last at most 270 s, its snapshots a
    minute)."""
    monkeypatch.setattr(derived, "KEEP_STEPS_EVERY_S", 0.0)
    monkeypatch.setattr(derived, "STEP_SETTLE_NS", 60 * S)
    monkeypatch.setattr(derived, "STEP_LOOKBACK_NS", 600 * S)


def _state(store) -> tuple[int, int, int, int]:
    kept = store.query("SELECT count(*) FROM d_step_ledger")[0][0]
    stragglers = store.query("SELECT count(*) FROM d_step_stragglers")[0][0]
    until, floor = store.query("SELECT kept_until_ns, floor_ns FROM d_steps_state")[0]
    return kept, stragglers, until, floor


def _step_diffs(path) -> dict:
    diff, _ = differences(path)
    return {k: v for k, v in diff.items() if k in derived.STEP_VIEWS or k == "train_steps"} \
        or diff


def test_steps_kept_pass_by_pass_read_as_the_views(tmp_path, keep_often):
    """A run written in commits, the steps first: each commit's tries start before the steps
    already kept, so every pass drops kept rows and keeps them again."""
    path = synthetic_run(tmp_path / "run.duckdb", spans=60_000, commits=7)
    with RunStore(path, read_only=True) as store:
        kept, stragglers, until, floor = _state(store)
        steps = store.query("SELECT count(*) FROM step_ledger")[0][0]
        first = store.query("SELECT min(start_ns) FROM spans")[0][0]
    assert steps >= 10
    assert 0 < kept <= steps and stragglers > 0
    assert floor > first, "the computed steps read every span"
    assert not _step_diffs(path)


def _add_late_try(path, *, commit_ns: int) -> str:
    """A committed try of a new group that ends at ``commit_ns``, committed now."""
    with RunStore(path) as store, closing(store.new_cursor()) as con:
        con.execute(
            "INSERT INTO spans SELECT * REPLACE ("
            "  'late' || span_id AS span_id, 'late-group' AS rollout_id,"
            "  ? - 200000000000 AS start_ns, ? AS end_ns,"
            "  json_merge_patch(attributes, '{\"nemo.gym.rollout.id\": \"late-group\"}')"
            "      AS attributes) "
            "FROM spans WHERE name = 'rl.rollout.attempt' "
            "AND rollout_outcome = 'committed' LIMIT 1", [commit_ns, commit_ns])
        derived.derive(con)
        return "late-group"


def test_a_late_try_in_a_kept_step_is_counted(tmp_path, keep_often):
    path = synthetic_run(tmp_path / "run.duckdb", spans=40_000)
    with RunStore(path, read_only=True) as store:
        kept, _, until, _ = _state(store)
        assert kept >= 3
        # the second kept step's wait: committed after the first had its batch
        step, ready, groups = store.query(
            "SELECT step, ready_ns, groups FROM d_step_ledger ORDER BY start_ns LIMIT 1 OFFSET 1"
        )[0]
        assert ready < until
    _add_late_try(path, commit_ns=ready - S)
    with RunStore(path, read_only=True) as store:
        # that step and every later one were dropped, then kept again counting the try
        assert store.query("SELECT groups FROM d_step_ledger WHERE step = ?", [step]) \
            == [(groups + 1,)]
        run = store.run_ids()[0]
        row = ledger_table(store, run).set_index("step").loc[step]
        assert row.groups == groups + 1
    assert not _step_diffs(path)


def test_a_late_span_drops_the_steps_it_may_change_until_kept_again(tmp_path, keep_often,
                                                                    monkeypatch):
    path = synthetic_run(tmp_path / "run.duckdb", spans=40_000)
    with RunStore(path, read_only=True) as store:
        kept, _, _, floor = _state(store)
        ends = [r[0] for r in store.query("SELECT end_ns FROM d_step_ledger ORDER BY end_ns")]
    monkeypatch.setattr(derived, "KEEP_STEPS_EVERY_S", 10.0**9)  # no keep in between
    with RunStore(path) as store, closing(store.new_cursor()) as con:
        con.execute("INSERT INTO spans SELECT * REPLACE ('late' || span_id AS span_id, "
                    "? AS start_ns, ? + 1000000000::BIGINT AS end_ns) "
                    "FROM spans WHERE name = 'gym.agent.parked' LIMIT 1", [ends[2], ends[2]])
        derived.derive(con)
        assert _state(store)[0] == 2  # the steps that ended after the span started
        assert _state(store)[3] <= floor
        # readers see every step, the dropped ones computed
        assert store.query(f"SELECT count(*) FROM {store.relation('step_ledger')}")[0][0] \
            == store.query("SELECT count(*) FROM step_ledger")[0][0]
    assert not _step_diffs(path)


def test_a_run_without_steps_reads_no_steps_from_the_floor(tmp_path, keep_often):
    """Nothing to keep: the floor still follows the settled time, so a reader of a large run
    without steps reads only its latest spans to say so."""
    path = synthetic_run(tmp_path / "run.duckdb", spans=30_000, commits=3, train_steps=False)
    with RunStore(path, read_only=True) as store:
        kept, stragglers, until, floor = _state(store)
        first = store.query("SELECT min(start_ns) FROM spans")[0][0]
        run = store.run_ids()[0]
        assert kept == 0 and until > first and floor > first
        assert ledger_table(store, run).empty
        pending = straggler_table(store, run)
        # the groups still running after the last step (none): what the next step waits for
        assert (pending.step == 1).all()
    assert not _step_diffs(path)


def test_steps_are_computed_when_one_settles_not_on_every_pass(tmp_path, keep_often):
    path = synthetic_run(tmp_path / "run.duckdb", spans=30_000)
    state = "SELECT kept_ns, kept_until_ns FROM d_steps_state"

    def add(name: str, start_s: float, end_s: float) -> None:
        con.execute("INSERT INTO spans SELECT * REPLACE (? || span_id AS span_id, "
                    "? AS start_ns, ? AS end_ns) FROM spans WHERE name = ? LIMIT 1",
                    [f"{name}{start_s}", last + int(start_s * S), last + int(end_s * S), name])
        derived.derive(con)

    with RunStore(path) as store, closing(store.new_cursor()) as con:
        last = con.execute("SELECT max(end_ns) FROM spans").fetchall()[0][0]
        add("rl.deadline", 150, 200)  # the run's last step settles
        steps = con.execute("SELECT count(*) FROM d_step_ledger").fetchall()[0][0]
        assert steps == con.execute("SELECT count(*) FROM step_ledger").fetchall()[0][0]
        before = con.execute(state).fetchall()[0]
        add("rl.deadline", 300, 350)  # no step ends: nothing computed
        assert con.execute(state).fetchall()[0] == before
        add("rl.train_step", 340, 400)  # a step ends; not settled yet
        assert con.execute(state).fetchall()[0] == before
        add("rl.deadline", 450, 480)  # now it has: computed and kept
        kept_ns, until = con.execute(state).fetchall()[0]
        assert kept_ns > before[0] and until > last + 400 * S
        assert con.execute("SELECT count(*) FROM d_step_ledger").fetchall()[0][0] == steps + 1
    assert not _step_diffs(path)
