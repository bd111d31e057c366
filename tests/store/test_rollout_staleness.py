"""``rollout_staleness``: the policy version each try and batch was generated with against the
trainer's version when it was trained on, and what was aborted as stale.

The tries, steps and syncs come from the real OTel SDK (``SpanKit``) in the names the controller
sends; the batches from the bytes NeMo-RL's own telemetry sent (tests/fixtures/
nemo-rl-telemetry-otlp-http/), posted to a real collector and read back with the official
opentelemetry-proto messages."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr, EventName, SpanName
from tests.gym_capture import bodies, expected_spans, post_capture
from tests.synthetic_run import synthetic_run

from .conftest import S, T0
from .test_view_rewrites import _norm

RL_FIXTURE = Path(__file__).parents[1] / "fixtures" / "nemo-rl-telemetry-otlp-http"


def rows(store: RunStore, run_id: str = "run-1") -> list[dict]:
    frame = store.query_frame("SELECT * FROM rollout_staleness WHERE run_id = ? "
                              "ORDER BY unit DESC, start_ns", [run_id])
    return [{k: (None if v != v else v) for k, v in r.items()}  # NaN -> None
            for r in frame.to_dict("records")]


def attempt(kit, idx: int, start_s: float, end_s: float, error: str | None = None, **attrs):
    """RL try 0 of prompt ``idx`` (committed unless ``error``)."""
    return kit.span(SpanName.RL_ATTEMPT, start_s, end_s, {
        Attr.PROMPT_IDX: idx, Attr.ROLLOUT_ID: f"p{idx}", Attr.RL_ATTEMPT: 0, **attrs},
        error=error)


def trains(kit) -> None:
    """Steps 1..3 train 10 s each from 100 s; the fleet syncs to version 1 at 115-118 s and to
    version 3 (its sync after step 3, where step 2's sync was skipped) at 155-160 s, aborting
    5 stale groups in flight."""
    for step, start in ((1, 100), (2, 120), (3, 140)):
        kit.span(SpanName.RL_TRAIN_STEP, start, start + 10, {Attr.TRAIN_STEP: step})
    kit.span(SpanName.RL_WEIGHT_SYNC, 115, 118, {Attr.TRAINER_VERSION: 1})
    kit.span(SpanName.RL_WEIGHT_SYNC, 155, 160, {Attr.TRAINER_VERSION: 3}, events=[
        (EventName.WEIGHT_SYNC_ABORTED_STALE, 156, {Attr.ABORTED_STALE_INFLIGHT: 5})])


def test_each_try_is_generated_by_the_weights_served_and_trained_at_the_steps_version(kit):
    trains(kit)
    attempt(kit, 1, 0, 90)  # initial weights, committed before step 1: lag 0
    attempt(kit, 2, 50, 125)  # initial weights, trained at step 3 (trainer at 2): lag 2
    attempt(kit, 3, 119, 135)  # after the sync to 1, trained at step 3: lag 1
    attempt(kit, 4, 161, 170)  # after the sync to 3, nothing trained on it yet
    attempt(kit, 5, 10, 130, **{Attr.WEIGHT_VERSION: 1})  # says its own version
    attempt(kit, 6, 119, 121, error="RolloutTimeout")  # failed: never trained on
    got = rows(kit.flush())
    tries = {r["rollout_id"]: r for r in got if r["unit"] == "try"}
    pick = ("weight_version", "weight_version_from", "train_step", "trained_version", "lag",
            "outcome", "groups")
    assert {k: tuple(r[c] for c in pick) for k, r in tries.items()} == {
        "p1": (0, "initial", 1, 0, 0, "committed", 1),
        "p2": (0, "initial", 3, 2, 2, "committed", 1),
        "p3": (1, "last_weight_sync", 3, 2, 1, "committed", 1),
        "p4": (3, "last_weight_sync", None, None, None, "committed", 1),
        "p5": (1, "span", 3, 2, 1, "committed", 1),
        "p6": (1, "last_weight_sync", None, None, None, "failed", 1),
    }
    [aborted] = [r for r in got if r["unit"] == "aborted"]
    assert (aborted["groups"], aborted["trained_version"], aborted["start_ns"]) == (
        5, 3, T0 + 156 * S)
    assert aborted["reason"].startswith("aborted in flight at the weight sync to version 3")


def test_a_run_that_never_trains_has_no_versions(kit):
    attempt(kit, 1, 0, 10)
    [row] = rows(kit.flush())
    assert (row["weight_version"], row["weight_version_from"], row["lag"]) == (None, None, None)


def test_nemo_rl_batches_are_read_from_its_own_telemetry(tmp_path):
    db = collect_capture_of(tmp_path / "rl.duckdb")
    sent = [s for s in expected_spans(RL_FIXTURE)
            if s["name"] == "rl.grpo.collect_rollouts"]
    assert len(sent) == 5
    with RunStore(db, read_only=True) as store:
        got = rows(store, "rl-telemetry-probe")
    assert [(r["unit"], r["weight_version"], r["trained_version"], r["lag"], r["groups"],
             r["outcome"], r["start_ns"]) for r in got] == [
        ("batch", int(s["attrs"][Attr.TELEMETRY_WEIGHT_VERSION]),
         int(s["attrs"][Attr.TELEMETRY_TARGET_WEIGHT_VERSION]),
         int(s["attrs"][Attr.TELEMETRY_TARGET_WEIGHT_VERSION]) - int(s["attrs"][Attr.TELEMETRY_WEIGHT_VERSION]),
         int(s["attrs"][Attr.TELEMETRY_NUM_PROMPT_GROUPS]), "collected", s["start"])
        for s in sorted(sent, key=lambda s: s["start"])]


def collect_capture_of(db: Path) -> Path:
    """The RL capture as a real collector (``rolloutscope serve``) wrote it."""
    from tests.collectors.conftest import start_collector

    collector = start_collector(db)
    try:
        assert post_capture(collector.http, RL_FIXTURE) == len(bodies(RL_FIXTURE))
    finally:
        assert collector.stop() == 0, "".join(collector.output)
    return db



# -- a window's rows: rollout_staleness_window(run, floor_ns) ------------------------------------

def _window_sets(store: RunStore, run: str, floors: list[int]) -> int:
    """Each floor's window rows, from the main schema's macro and, where the store keeps its
    rows, the maintained one, against the view's rows that end at or after the floor or are
    open; the rows compared, summed."""
    def counted(sql: str, params: list) -> Counter:
        return Counter(repr(_norm(r)) for r in store.query(sql, params))

    schemas = [""] + (["rs_read."] if store.maintained else [])
    compared = 0
    for floor in floors:
        want = counted("SELECT * FROM rollout_staleness WHERE run_id = ? "
                       "AND (end_ns >= ? OR end_ns IS NULL)", [run, floor])
        for schema in schemas:
            got = counted(f"SELECT * FROM {schema}rollout_staleness_window(?, ?)", [run, floor])
            assert got == want, (schema, floor, list((want - got).elements())[:2],
                                 list((got - want).elements())[:2])
        compared += sum(want.values())
    for schema in schemas:  # no run, no floor: the view
        assert counted(f"SELECT * FROM {schema}rollout_staleness_window(NULL, NULL)", []) == \
            counted("SELECT * FROM rollout_staleness", [])
    return compared


def test_a_windows_rows_are_the_views_rows_that_end_in_it(kit):
    # the first test's run: tries on initial and synced weights, a failed one, an abort
    trains(kit)
    for idx, (start, end) in enumerate(((0, 90), (50, 125), (119, 135), (161, 170)), 1):
        attempt(kit, idx, start, end)
    store = kit.flush()
    # before everything, inside a try, at the abort, after the last row
    assert _window_sets(store, "run-1", [T0, T0 + 100 * S, T0 + 156 * S, T0 + 171 * S]) > 0


def test_a_large_runs_window_reads_the_kept_tries(tmp_path):
    """On a store that keeps its rows, a window's rows join the kept tries (``d_rl_attempts``,
    read by end time) to the run's syncs and steps: equal to the view, at floors from the
    first try's end to past the last, open tries included."""
    path = synthetic_run(tmp_path / "synthetic.duckdb", spans=40_000)
    with RunStore(path) as store:  # three tries still running: their start markers
        store.query("INSERT INTO open_spans SELECT * REPLACE (NULL AS end_ns, "
                    "upper(left(md5(span_id), 16)) AS span_id) FROM spans "
                    "WHERE name = 'rl.rollout.attempt' ORDER BY start_ns DESC LIMIT 3")
    with RunStore(path, read_only=True) as store:
        assert store.maintained
        ends = store.query("SELECT quantile_disc(end_ns, [0.0, 0.5, 0.9, 1.0]), "
                           "count(*) FILTER (end_ns IS NULL), "
                           "count(*) FILTER (train_step IS NOT NULL) "
                           "FROM rollout_staleness WHERE run_id = 'synthetic'")[0]
        assert ends[1] > 0 and ends[2] > 0  # open tries, and tries a step trained on
        assert _window_sets(store, "synthetic", [*ends[0], ends[0][-1] + 1]) > 0
        # a table macro binds its names in its caller's schema: rs_read's names its kept rows
        plan = "".join(r[1] for r in store.query(
            "EXPLAIN (FORMAT JSON) SELECT * FROM rs_read.rollout_staleness_window('synthetic', 0)"))
        assert {"main.d_rl_attempts", "main.spans"} <= {
            t.split(".", 1)[1] for t in re.findall(r'"Table": "([^"]+)"', plan)}
