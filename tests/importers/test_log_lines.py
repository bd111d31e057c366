"""The controller's line grammar: prefixes, every message kind, malformed and unknown lines."""

from __future__ import annotations

import pytest

from rolloutscope.collectors.importers import log_lines as L

T = L.parse_iso8601("2026-08-20T10:40:38.123Z")


@pytest.mark.parametrize("line", [
    "2026-08-20 10:40:38,123 train step 1/2  trainer_v=1  lag=0",
    "2026-08-20 10:40:38.123 train step 1/2  trainer_v=1  lag=0",
    "2026-08-20T10:40:38.123Z train step 1/2  trainer_v=1  lag=0",
    "2026-08-20T12:40:38.123+02:00 train step 1/2  trainer_v=1  lag=0",
    "[2026-08-20 10:40:38,123] INFO - train step 1/2  trainer_v=1  lag=0",
    "(SingleControllerActor pid=4242) 2026-08-20 10:40:38,123 train step 1/2  trainer_v=1  lag=0",
    "2026-08-20 10:40:38,123 (SingleControllerActor pid=4242, ip=10.0.0.5) train step 1/2  "
    "trainer_v=1  lag=0",
])
def test_common_timestamp_and_ray_prefixes_are_stripped_and_read_as_utc(line):
    prefixed = L.split_prefix(line)
    assert prefixed.ts_ns == T
    assert prefixed.message == "train step 1/2  trainer_v=1  lag=0"


def test_a_line_without_a_timestamp_keeps_its_leading_spaces_and_drops_rays_repeat_suffix():
    prefixed = L.split_prefix("(pid=7)   _sync_weights: sync done in 1.000s "
                              "[repeated 3x across cluster]\n")
    assert prefixed.ts_ns is None
    assert prefixed.message == "  _sync_weights: sync done in 1.000s"


def test_the_controllers_own_warning_prefix_is_part_of_the_message_not_a_level():
    prefixed = L.split_prefix("WARNING: environment health -- environment 'math' did not answer "
                              "its health check within 30s")
    assert prefixed.level is None
    assert isinstance(L.recognise(prefixed.message).message, L.EnvHealth)


EVERY_KIND = [
    ("gen_fleet: shard 1 suspect -> dead (ActorDiedError: gone)",
     L.ShardTransition(1, "suspect", "dead", "ActorDiedError: gone")),
    ("gen_fleet: shard 0 none -> healthy (None)", L.ShardTransition(0, None, "healthy", None)),
    ("WARNING: rollout stall -- no rollout committed and no train step completed in 2018s "
     "(0 rollouts in flight, 12 groups committed, step 3/150)",
     L.Stall(2018.0, 0, 12, 3, 150, None, False)),
    ("RolloutStall: no rollout committed and no train step completed in 700s (2 rollouts in "
     "flight, 5 groups committed, step 1/10, stall_timeout_s=600)",
     L.Stall(700.0, 2, 5, 1, 10, 600.0, True)),
    ("WARNING: environment health -- environment 'code' reported unhealthy: exited with 137",
     L.EnvHealth("code", "reported unhealthy: exited with 137")),
    ("NeMo-Gym: re-dispatching 2/5 row(s) (attempt 2/3)", L.RowRedispatch(2, 5, 2, 3)),
    ("dropping prompt idx=17 after 5 infrastructure failure(s) (GenerationUnavailable: dead) "
     "[consecutive drop 1/3]", L.PromptDropped(17, 5, "GenerationUnavailable: dead", 1, 3)),
    ("skipping prompt idx=23 after 2 deterministic failure(s) (RolloutDataFailure: HTTP 400)",
     L.PromptSkipped(23, 2, "RolloutDataFailure: HTTP 400")),
    ("  target_step=3: substituting a spare prompt for idx=41",
     L.PromptSubstituted(3, "for idx=41")),
    ("  aborted 4 stale in-flight rollout(s)", L.AbortedStale(4)),
    ("  _sync_weights: sync done in 2.104s", L.SyncDone(2.104)),
    ("train step 3/150  trainer_v=3  lag=1", L.TrainStep(3, 150, 3, 1.0)),
    ("rollout_pump: starting", L.RolloutPumpStarting()),
    ("rollout_pump: completed 2 epoch(s)", L.RolloutPumpCompleted(2)),
    ("policy router listening on http://10.0.0.5:6000/v1",
     L.RouterListening("http://10.0.0.5:6000/v1")),
    ("policy router: ignoring 1 pushed URL(s) it does not serve: ['http://h:7001/v1']",
     L.RouterIgnoring(1, "['http://h:7001/v1']")),
    ("fleet probe: router update failed, retrying next tick: RayActorError: restarting",
     L.ProbeRouterUpdateFailed("RayActorError: restarting")),
    ("watchdog: router metrics unavailable this tick: GetTimeoutError: timed out",
     L.RouterMetricsUnavailable("GetTimeoutError: timed out")),
    ("  warn: remove_group(g-7) cleanup failed: KeyError: 'g-7'",
     L.GroupCleanupFailed("g-7", "KeyError: 'g-7'")),
    ("Gym completed-result acknowledgement will be retried before checkpoint preparation: boom",
     L.GymAckRetry("boom")),
    ("GenerationFleetExhausted: only 1 generation shard(s) serving, below min_healthy_shards=2; "
     "fleet state is {0: 'healthy'}", L.FleetExhausted(1, 2, "{0: 'healthy'}")),
]


@pytest.mark.parametrize(("message", "expected"), EVERY_KIND,
                         ids=[type(e).__name__ for _, e in EVERY_KIND])
def test_every_controller_message_parses_into_its_fields(message, expected):
    assert L.recognise(message).message == expected


def test_every_grammar_has_a_sample_above():
    kinds = {L.recognise(m).kind for m, _ in EVERY_KIND}
    assert kinds == {g.kind for g in L.GRAMMARS}


@pytest.mark.parametrize(("message", "kind"), [
    ("gen_fleet: shard x healthy -> dead (boom)", "shard_transition"),
    ("gen_fleet: shard 0 healthy -> zombie (boom)", "shard_transition"),
    ("train step 4/150  trainer_v=?", "train_step"),
    ("NeMo-Gym: re-dispatching two of five rows", "row_redispatch"),
    ("  _sync_weights: sync done in soon", "weight_sync_done"),
])
def test_a_recognised_head_with_a_broken_body_is_malformed_not_unknown(message, kind):
    recognised = L.recognise(message)
    assert recognised.kind == kind and isinstance(recognised.message, L.Malformed)


@pytest.mark.parametrize("message", [
    "", "Traceback (most recent call last):", "INFO 08-20 10:00:05 [async_llm.py:261] Added",
    "no rollout committed and no train step completed",
])
def test_lines_without_a_known_head_are_unknown(message):
    assert L.recognise(message) is None
