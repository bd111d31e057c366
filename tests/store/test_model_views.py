"""Each model view returns the expected rows for hand-built span sets, every state and outcome."""

from __future__ import annotations

import json

import pandas as pd

from rolloutscope.vocabulary import Attr, EventName, SpanName

from .conftest import S, T0


def _rows(df: pd.DataFrame, cols: list[str]) -> list[tuple]:
    out = []
    for rec in df[cols].itertuples(index=False):
        out.append(tuple(None if (not isinstance(v, (list, str)) and pd.isna(v)) else v
                         for v in rec))
    return sorted(out, key=repr)


def ns(seconds: float) -> int:
    return T0 + int(seconds * S)


class TestCheckpointOps:
    def test_participant_and_controller_operations_with_every_outcome(self, kit):
        ck = "rollout-step-0-snapshot-1"
        kit.span(SpanName.CK_PREPARE, 10, 12, {
            Attr.CHECKPOINT_ID: ck, Attr.CK_PARTICIPANT_KIND: "agent", Attr.CK_INSTANCE: "a0",
            Attr.CK_OUTCOME: "ok"})
        kit.span(SpanName.CK_PREPARE, 10, 310, {
            Attr.CHECKPOINT_ID: ck, Attr.CK_PARTICIPANT_KIND: "model", Attr.CK_INSTANCE: "m0",
            Attr.CK_OUTCOME: "error", Attr.CK_CODE: "deadline_exceeded", Attr.CK_BLOCKERS: 2,
            Attr.CK_BLOCKER_KEYS: ("r1", "r2-a1")})
        kit.span(SpanName.CK_COORDINATE_PREPARE, 9, 311, {
            Attr.CHECKPOINT_ID: ck, Attr.CK_STOPPED_AT: "model", Attr.CK_PREPARED: False},
            error="model not ready")
        kit.open(SpanName.CK_COMMIT, 400, {Attr.CHECKPOINT_ID: ck,
                                           Attr.CK_PARTICIPANT_KIND: "resources"})
        df = kit.flush().view("checkpoint_ops")
        assert _rows(df, ["participant_kind", "instance", "op", "start_ns", "end_ns", "outcome",
                          "code", "blockers", "stopped_at"]) == sorted([
            ("agent", "a0", "prepare", ns(10), ns(12), "ok", None, None, None),
            ("model", "m0", "prepare", ns(10), ns(310), "error", "deadline_exceeded", 2, None),
            ("controller", None, "prepare", ns(9), ns(311), "error", None, None, "model"),
            ("resources", None, "commit", ns(400), None, None, None, None, None),
        ], key=repr)
        model = df[df.participant_kind == "model"].iloc[0]
        assert json.loads(model.blocker_keys) == ["r1", "r2-a1"]
        assert model.duration_s == 300.0


class TestCheckpointWindows:
    def test_each_window_outcome(self, kit):
        def window(ck, start, end, outcome=None, *, fence=True, snap=True):
            if fence:
                if end is None:
                    kit.open(SpanName.RL_ADMISSION_FENCE, start, {
                        Attr.CHECKPOINT_ID: ck, Attr.FENCE_OWNER: "gym_checkpoint"})
                else:
                    kit.span(SpanName.RL_ADMISSION_FENCE, start, end, {
                        Attr.CHECKPOINT_ID: ck, Attr.FENCE_OWNER: "gym_checkpoint"})
            if snap and end is not None:
                kit.span(SpanName.RL_SNAPSHOT, start, end, {
                    Attr.CHECKPOINT_ID: ck, Attr.SNAPSHOT_OUTCOME: outcome,
                    Attr.SNAPSHOT_INDEX: int(ck[-1])})

        window("ck1", 150, 210, "published")
        window("ck2", 450, 750, "failed")
        window("ck3", 800, 820, "aborted")
        window("ck4", 900, None)
        # no RL snapshot span: outcome derived from the operations
        window("ck5", 1000, 1010, snap=False)
        kit.span(SpanName.CK_COORDINATE_COMMIT, 1005, 1009, {Attr.CHECKPOINT_ID: "ck5"})
        window("ck6", 1100, 1110, snap=False)
        kit.span(SpanName.CK_PREPARE, 1100, 1110, {
            Attr.CHECKPOINT_ID: "ck6", Attr.CK_PARTICIPANT_KIND: "agent",
            Attr.CK_OUTCOME: "error"})
        window("ck7", 1200, 1201, snap=False)
        # a weight-sync fence is not a checkpoint window
        kit.span(SpanName.RL_ADMISSION_FENCE, 1300, 1310, {Attr.FENCE_OWNER: "weight_sync"})
        # participant-side open interval widens the window
        kit.span(SpanName.CK_OPEN, 149, 212, {Attr.CHECKPOINT_ID: "ck1",
                                               Attr.CK_PARTICIPANT_KIND: "agent"})
        df = kit.flush().view("checkpoint_windows")
        assert _rows(df, ["checkpoint_id", "start_ns", "end_ns", "outcome"]) == sorted([
            ("ck1", ns(149), ns(212), "committed"),
            ("ck2", ns(450), ns(750), "failed"),
            ("ck3", ns(800), ns(820), "aborted"),
            ("ck4", ns(900), None, "open"),
            ("ck5", ns(1000), ns(1010), "committed"),
            ("ck6", ns(1100), ns(1110), "failed"),
            ("ck7", ns(1200), ns(1201), "aborted"),
        ], key=repr)


class TestShardStates:
    def test_state_stays_with_the_current_one_open(self, kit):
        base = {Attr.SHARD_IDX: 1, Attr.BACKEND_URL: "http://gen-1:8000/v1"}
        kit.span(SpanName.SHARD_STATE, 0, 40, {**base, Attr.FLEET_STATE: "healthy",
                                               Attr.FLEET_TRIGGER: "initial",
                                               Attr.FLEET_MEMBERSHIP_EPOCH: 0})
        kit.span(SpanName.SHARD_STATE, 40, 50, {**base, Attr.FLEET_STATE: "suspect",
                                                Attr.FLEET_PREVIOUS_STATE: "healthy",
                                                Attr.FLEET_TRIGGER: "reported_failure",
                                                Attr.FLEET_MEMBERSHIP_EPOCH: 0,
                                                Attr.FLEET_REPORTED_FAILURES: 1})
        kit.open(SpanName.SHARD_STATE, 50, {**base, Attr.FLEET_STATE: "dead",
                                            Attr.FLEET_PREVIOUS_STATE: "suspect",
                                            Attr.FLEET_TRIGGER: "reported_failure",
                                            Attr.FLEET_MEMBERSHIP_EPOCH: 1,
                                            Attr.FLEET_LAST_ERROR: "ActorDiedError: gone"})
        df = kit.flush().view("shard_states")
        assert _rows(df, ["shard_idx", "state", "start_ns", "end_ns", "trigger",
                          "membership_epoch", "serving"]) == sorted([
            (1, "healthy", ns(0), ns(40), "initial", 0, True),
            (1, "suspect", ns(40), ns(50), "reported_failure", 0, True),
            (1, "dead", ns(50), None, "reported_failure", 1, False),
        ], key=repr)
        assert df[df.state == "dead"].iloc[0].last_error == "ActorDiedError: gone"


class TestRolloutAttempts:
    def test_every_attempt_outcome(self, kit):
        common = {Attr.PROMPT_IDX: 3, Attr.ROLLOUT_ID: "p3"}
        kit.span(SpanName.RL_ATTEMPT, 0, 180, {
            **common, Attr.RL_ATTEMPT: 0, Attr.GROUP_ID: "g1", Attr.ROLLOUT_OUTCOME: "failed",
            Attr.FAILURE_CLASS: "infra", Attr.FAILURE_REASON: "RolloutTimeout"})
        kit.span(SpanName.RL_ATTEMPT, 181, 300, {
            **common, Attr.RL_ATTEMPT: 1, Attr.GROUP_ID: "g2",
            Attr.ROLLOUT_OUTCOME: "committed"})
        kit.span(SpanName.RL_ATTEMPT, 5, 6, {
            Attr.PROMPT_IDX: 4, Attr.RL_ATTEMPT: 0, Attr.ROLLOUT_OUTCOME: "cancelled"})
        kit.span(SpanName.RL_ATTEMPT, 7, 8, {Attr.PROMPT_IDX: 5, Attr.RL_ATTEMPT: 0},
                 error="ValueError")
        kit.open(SpanName.RL_ATTEMPT, 9, {Attr.PROMPT_IDX: 6, Attr.RL_ATTEMPT: 0})
        df = kit.flush().view("rollout_attempts")
        assert _rows(df, ["prompt_idx", "attempt", "group_id", "outcome", "failure_class",
                          "failure_reason", "end_ns"]) == sorted([
            (3, 0, "g1", "failed", "infra", "RolloutTimeout", ns(180)),
            (3, 1, "g2", "committed", None, None, ns(300)),
            (4, 0, None, "cancelled", None, None, ns(6)),
            (5, 0, None, "failed", None, None, ns(8)),
            (6, 0, None, "open", None, None, None),
        ], key=repr)


class TestDeadlines:
    def test_every_deadline_outcome(self, kit):
        base = {Attr.DEADLINE_KIND: "rollout", Attr.DEADLINE_BUDGET_S: 180.0,
                Attr.PROMPT_IDX: 0, Attr.ROLLOUT_ID: "p0"}
        kit.span(SpanName.RL_DEADLINE, 0, 180, {
            **base, Attr.RL_ATTEMPT: 0, Attr.DEADLINE_OUTCOME: "fired"},
            events=[(EventName.DEADLINE_START, 0, {}),
                    (EventName.DEADLINE_FIRE, 180, {Attr.DEADLINE_STATE_WHEN_FIRED: "parked"})])
        kit.span(SpanName.RL_DEADLINE, 180, 300, {
            **base, Attr.RL_ATTEMPT: 1, Attr.DEADLINE_OUTCOME: "completed",
            Attr.DEADLINE_SUSPENDED_S: 60.0},
            events=[(EventName.DEADLINE_SUSPEND, 200, {Attr.DEADLINE_HOLDER: "gym_checkpoint",
                                                       Attr.DEADLINE_HOLDERS_COUNT: 1}),
                    (EventName.DEADLINE_RESUME, 260, {Attr.DEADLINE_HOLDERS_COUNT: 0})])
        kit.span(SpanName.RL_DEADLINE, 0, 10, {
            **base, Attr.RL_ATTEMPT: 2, Attr.DEADLINE_OUTCOME: "cancelled"})
        kit.span(SpanName.RL_DEADLINE, 0, 30, {**base, Attr.RL_ATTEMPT: 3},
                 events=[(EventName.DEADLINE_FIRE, 30, {})])  # outcome only from the event
        kit.open(SpanName.RL_DEADLINE, 400, {**base, Attr.RL_ATTEMPT: 4})
        df = kit.flush().view("deadlines")
        assert _rows(df, ["attempt", "kind", "budget_s", "outcome", "suspended_s",
                          "state_when_fired", "fired_ns"]) == sorted([
            (0, "rollout", 180.0, "fired", 0.0, "parked", ns(180)),
            (1, "rollout", 180.0, "completed", 60.0, None, None),
            (2, "rollout", 180.0, "cancelled", 0.0, None, None),
            (3, "rollout", 180.0, "fired", 0.0, None, ns(30)),
            (4, "rollout", 180.0, "open", 0.0, None, None),
        ], key=repr)
        assert set(df.rollout_id) == {"p0"}


class TestParkedIntervals:
    def test_closed_and_still_parked(self, kit):
        kit.span(SpanName.AGENT_PARKED, 150, 210, {
            Attr.ROLLOUT_ID: "p0-0", Attr.PROMPT_IDX: 0, Attr.RL_ATTEMPT: 0,
            Attr.CHECKPOINT_ID: "ck1", Attr.PARKED_BOUNDARY_STATE: "parked_with_boundary",
            Attr.BOUNDARY_INDEX: 3})
        parked = kit.open(SpanName.AGENT_PARKED, 450, {
            Attr.ROLLOUT_ID: "p1-0", Attr.PROMPT_IDX: 1, Attr.RL_ATTEMPT: 0,
            Attr.CHECKPOINT_ID: "ck2", Attr.PARKED_BOUNDARY_STATE: "parked_without_boundary"})
        store = kit.flush()
        assert _rows(store.view("parked_intervals"), [
            "rollout_id", "attempt", "checkpoint_id", "start_ns", "end_ns", "boundary_state",
            "is_open"]) == sorted([
            ("p0-0", 0, "ck1", ns(150), ns(210), "parked_with_boundary", False),
            ("p1-0", 0, "ck2", ns(450), None, "parked_without_boundary", True),
        ], key=repr)
        parked.end(end_time=ns(460))
        store = kit.flush()
        df = store.view("parked_intervals")
        assert len(df) == 2 and not df.is_open.any()
        assert store.query("SELECT count(*) FROM open_spans") == [(0,)]


class TestCompletions:
    def test_acknowledged_and_stranded_completions(self, kit):
        for attempt, done in ((0, 240), (1, 300)):
            kit.span(SpanName.AGENT_EXECUTION, 0, done, {
                Attr.ROLLOUT_ID: "p0-0", Attr.PROMPT_IDX: 0, Attr.RL_ATTEMPT: attempt},
                events=[(EventName.AGENT_COMPLETED, done, {Attr.RESULT_ID: f"res-{attempt}"})])
        kit.span(SpanName.RL_GYM_ACK, 301, 302, {}, events=[
            (EventName.AGENT_ACKNOWLEDGED, 302, {Attr.ROLLOUT_ID: "p0-0", Attr.RL_ATTEMPT: 1,
                                                 Attr.PROMPT_IDX: 0})])
        df = kit.flush().view("completions")
        assert _rows(df, ["rollout_id", "attempt", "completed_ns", "ack_ns", "result_id"]) == [
            ("p0-0", 0, ns(240), None, "res-0"),
            ("p0-0", 1, ns(300), ns(302), "res-1"),
        ]
