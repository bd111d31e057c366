"""``rollout_staleness``: the policy version each try and batch was generated with against the
trainer's version when it was trained on, and what was aborted as stale.

The tries, steps and syncs come from the real OTel SDK (``SpanKit``) in the names the controller
sends; the batches from the bytes NeMo-RL's own telemetry sent (tests/fixtures/
nemo-rl-telemetry-otlp-http/), posted to a real collector and read back with the official
opentelemetry-proto messages."""

from __future__ import annotations

from pathlib import Path

from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr, EventName, SpanName
from tests.gym_capture import bodies, expected_spans, post_capture

from .conftest import S, T0

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


def test_each_try_is_generated_by_the_weights_served_and_trained_at_the_steps_version(kit):
    # steps 1..3 train 10 s each from 100 s; the fleet syncs to version 1 at 115-118 s and to
    # version 3 (its sync after step 3, where step 2's sync was skipped) at 155-160 s
    for step, start in ((1, 100), (2, 120), (3, 140)):
        kit.span(SpanName.RL_TRAIN_STEP, start, start + 10, {Attr.TRAIN_STEP: step})
    kit.span(SpanName.RL_WEIGHT_SYNC, 115, 118, {Attr.TRAINER_VERSION: 1})
    kit.span(SpanName.RL_WEIGHT_SYNC, 155, 160, {Attr.TRAINER_VERSION: 3}, events=[
        (EventName.WEIGHT_SYNC_ABORTED_STALE, 156, {Attr.ABORTED_STALE_INFLIGHT: 5})])
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

