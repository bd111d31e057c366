"""The generation fleet health model: its invariants, its recovery path, its config."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from rolloutscope.clock import ManualClock
from rolloutscope.vocabulary import SERVING_STATES, ShardState, ShardTrigger
from rolloutscope.replay.participants.fleet_health import (
    FleetHealthConfig,
    FleetHealthConfigError,
    GenerationFleetExhausted,
    GenerationFleetHealth,
    Transition,
    UnknownShardError,
    report_router_failures,
)

H, S, D = ShardState.HEALTHY, ShardState.SUSPECT, ShardState.DEAD
RESTARTING, STALE, RETIRED = ShardState.RESTARTING, ShardState.STALE, ShardState.RETIRED
URLS = ("http://gen-0:7000/v1", "http://gen-1:7001/v1", "http://gen-2:7002/v1")


T0 = 1000.0


def fleet(num_shards: int = 2, **overrides) -> tuple[GenerationFleetHealth, list[Transition]]:
    transitions: list[Transition] = []
    model = GenerationFleetHealth(num_shards=num_shards, base_urls=URLS[:num_shards],
                                  config=FleetHealthConfig(**overrides), clock=ManualClock(T0).now,
                                  observer=transitions.append)
    transitions.clear()  # the initial records have their own test
    return model, transitions


def edges(transitions: list[Transition], shard: int = 0) -> list[tuple[str, str, str]]:
    return [(t.previous_state, t.state, t.trigger) for t in transitions if t.shard == shard]


def condemn(model: GenerationFleetHealth, idx: int = 0) -> None:
    for _ in range(model.config.unhealthy_threshold):
        model.record_probe(idx, ok=False, error=ConnectionError("actor died"))


class TestTheServingSetIsHealthyAndSuspect:
    def test_one_failed_probe_makes_a_shard_suspect_and_it_keeps_serving(self):
        model, transitions = fleet()
        model.record_probe(0, ok=False, error=TimeoutError("probe timed out"))
        assert model.shard(0).state is S
        assert model.serving_shards() == (0, 1)
        assert edges(transitions) == [(H, S, ShardTrigger.PROBE_FAILURE)]

    def test_unhealthy_threshold_failed_probes_in_a_row_condemn_a_shard(self):
        model, transitions = fleet(unhealthy_threshold=3)
        condemn(model)
        assert model.serving_shards() == (1,)
        assert edges(transitions) == [(H, S, ShardTrigger.PROBE_FAILURE),
                                      (S, D, ShardTrigger.PROBE_FAILURE)]
        assert transitions[-1].last_error == "ConnectionError: actor died"

    def test_a_good_probe_between_failures_restarts_the_count(self):
        model, _ = fleet(unhealthy_threshold=3)
        for ok in (False, False, True, False, False):
            model.record_probe(0, ok=ok)
        assert model.shard(0).state is S

    def test_a_suspect_needs_healthy_threshold_good_probes_to_be_healthy_again(self):
        model, transitions = fleet(healthy_threshold=2)
        model.record_probe(0, ok=False)
        model.record_probe(0, ok=True)
        assert model.shard(0).state is S
        model.record_probe(0, ok=True)
        assert edges(transitions)[-1] == (S, H, ShardTrigger.PROBE_SUCCESS)

    def test_a_threshold_of_one_goes_straight_from_healthy_to_dead(self):
        model, transitions = fleet(unhealthy_threshold=1)
        model.record_probe(0, ok=False)
        assert edges(transitions) == [(H, D, ShardTrigger.PROBE_FAILURE)]

    def test_serving_base_urls_is_what_the_router_push_carries(self):
        model, _ = fleet(num_shards=3)
        condemn(model, 1)
        assert model.serving_base_urls() == (URLS[0], URLS[2])
        assert model.shard_for_base_url(URLS[2]) == 2
        assert model.shard_for_base_url("http://elsewhere/v1") is None


class TestAQuarantinedShardIgnoresObservations:
    def test_a_dead_shard_ignores_successful_probes(self):
        model, transitions = fleet(healthy_threshold=1)
        condemn(model)
        for _ in range(10):
            model.record_probe(0, ok=True)
        assert model.shard(0).state is D
        assert edges(transitions)[-1][1] is D

    def test_a_dead_shard_ignores_failures_and_successes_reported_by_the_generation_path(self):
        model, _ = fleet()
        condemn(model)
        before = model.shard(0)
        model.report_failure(0, RuntimeError("late failure"))
        model.report_success(0)
        assert model.shard(0) == before

    def test_a_refit_cannot_revive_a_dead_or_restarting_shard(self):
        model, transitions = fleet()
        condemn(model)
        model.report_refit(0, weight_version=7)
        assert model.shard(0).state is D
        model.mark_restarting(0)
        model.report_refit(0, weight_version=7)
        assert model.shard(0).state is RESTARTING
        assert model.shard(0).weight_version is None
        assert (D, H) not in {(t.previous_state, t.state) for t in transitions}

    def test_stale_weights_never_serve(self):
        model, _ = fleet(healthy_threshold=1)
        condemn(model)
        model.mark_restarting(0)
        model.mark_loaded(0)
        for _ in range(10):
            model.record_probe(0, ok=True)
        assert model.shard(0).state is STALE
        assert 0 not in model.serving_shards()
        assert URLS[0] not in model.serving_base_urls()

    def test_a_healthy_shard_that_reloads_its_weights_leaves_service_until_a_refit(self):
        model, transitions = fleet()
        model.mark_loaded(0)
        assert model.serving_shards() == (1,)
        assert edges(transitions) == [(H, STALE, ShardTrigger.LOADED)]


class TestRecoveryGoesThroughARefit:
    def test_recovery_goes_dead_restarting_stale_healthy_only_through_a_refit(self):
        model, transitions = fleet()
        condemn(model)
        model.mark_restarting(0)
        model.mark_loaded(0)
        model.report_refit(0, weight_version=12)
        assert edges(transitions) == [
            (H, S, ShardTrigger.PROBE_FAILURE), (S, D, ShardTrigger.PROBE_FAILURE),
            (D, RESTARTING, ShardTrigger.RESTART), (RESTARTING, STALE, ShardTrigger.LOADED),
            (STALE, H, ShardTrigger.REFIT)]
        assert model.shard(0).weight_version == 12
        assert model.serving_shards() == (0, 1)

    def test_a_refit_clears_every_streak_but_not_the_restart_count(self):
        model, _ = fleet(unhealthy_threshold=5)
        model.record_probe(0, ok=False)
        model.report_failure(0, "boom")
        model.mark_restarting(0)
        model.mark_loaded(0)
        model.report_refit(0, weight_version=3)
        shard = model.shard(0)
        assert (shard.consecutive_probe_failures, shard.consecutive_probe_successes,
                shard.consecutive_reported_failures) == (0, 0, 0)
        assert shard.restart_attempts == 1

    def test_restart_attempts_past_the_budget_retire_the_shard(self):
        model, transitions = fleet(max_restart_attempts_per_shard=2)
        for _ in range(3):
            model.mark_restarting(0)
            model.mark_loaded(0)
        assert model.shard(0).state is RETIRED
        assert model.shard(0).restart_attempts == 3
        last = transitions[-1]
        assert (last.previous_state, last.state, last.trigger) == (STALE, RETIRED,
                                                                   ShardTrigger.RETIRE)
        assert last.last_error == "restart attempts exhausted"

    def test_retired_is_terminal(self):
        model, transitions = fleet(healthy_threshold=1)
        model.retire(0, reason="operator")
        count = len(transitions)
        model.record_probe(0, ok=True)
        model.mark_restarting(0)
        model.mark_loaded(0)
        model.report_refit(0, weight_version=1)
        model.retire(0, reason="again")
        assert model.shard(0).state is RETIRED
        assert len(transitions) == count
        assert model.shard(0).last_error == "operator"


class TestTheMembershipEpoch:
    def test_the_epoch_moves_only_when_the_serving_set_changes(self):
        model, _ = fleet(unhealthy_threshold=3, healthy_threshold=1)
        model.record_probe(0, ok=False)  # healthy -> suspect: still serving
        model.record_probe(0, ok=True)  # suspect -> healthy
        model.report_refit(1, weight_version=2)  # healthy -> healthy
        assert model.membership_epoch == 0
        condemn(model)  # leaves the set
        assert model.membership_epoch == 1
        model.mark_restarting(0)  # dead -> restarting: was out, stays out
        model.mark_loaded(0)
        assert model.membership_epoch == 1
        model.report_refit(0, weight_version=2)  # back in
        assert model.membership_epoch == 2

    def test_each_transition_carries_the_epoch_after_it(self):
        model, transitions = fleet()
        condemn(model)
        assert [t.membership_epoch for t in transitions] == [0, 1]
        assert [t.serving_changed for t in transitions] == [False, True]


class TestReportedFailuresHaveTheirOwnStreak:
    @staticmethod
    def wedge(model: GenerationFleetHealth, rounds: int) -> None:
        """A wedged engine: each round one generation fails, then the probes all succeed."""
        for _ in range(rounds):
            model.report_failure(0, RuntimeError("router: 1 failed request(s) to gen-0"))
            for _ in range(model.config.healthy_threshold):
                model.record_probe(0, ok=True)

    def test_a_wedged_engine_that_answers_probes_is_condemned_by_reported_failures(self):
        model, transitions = fleet(unhealthy_threshold=3, healthy_threshold=2)
        self.wedge(model, rounds=3)
        assert model.shard(0).state is D
        assert edges(transitions) == [
            (H, S, ShardTrigger.REPORTED_FAILURE), (S, H, ShardTrigger.PROBE_SUCCESS),
            (H, S, ShardTrigger.REPORTED_FAILURE), (S, H, ShardTrigger.PROBE_SUCCESS),
            (H, D, ShardTrigger.REPORTED_FAILURE)]
        assert transitions[-1].reported_failures == 3
        assert transitions[-1].probe_failures == 0

    def test_with_one_shared_streak_a_wedged_engine_oscillates_forever(self):
        model, transitions = fleet(unhealthy_threshold=3, healthy_threshold=2,
                                   separate_reported_failure_streak=False)
        self.wedge(model, rounds=200)
        assert model.shard(0).state is H
        assert {t.state for t in transitions} == {H, S}
        assert len(transitions) == 400

    def test_only_a_successful_generation_or_a_refit_clears_the_reported_streak(self):
        model, _ = fleet(unhealthy_threshold=3)
        model.report_failure(0)
        model.report_failure(0)
        model.record_probe(0, ok=True)
        assert model.shard(0).consecutive_reported_failures == 2
        model.report_success(0)
        assert model.shard(0).consecutive_reported_failures == 0
        model.report_failure(0)
        model.report_refit(0, weight_version=1)
        assert model.shard(0).consecutive_reported_failures == 0

    def test_a_successful_generation_is_never_a_transition(self):
        model, transitions = fleet()
        model.record_probe(0, ok=False)
        model.report_success(0)
        assert model.shard(0).state is S
        assert len(transitions) == 1

    def test_failures_drained_from_the_router_are_reported_one_per_request(self):
        model, transitions = fleet(num_shards=2, unhealthy_threshold=3)
        unmatched = report_router_failures(model, {URLS[1]: 3, "http://gone/v1": 1})
        assert unmatched == ("http://gone/v1",)
        assert model.shard(1).state is D
        assert transitions[-1].last_error == (
            f"RuntimeError: router: 3 failed request(s) to {URLS[1]}")


class TestExhaustion:
    def test_a_fleet_below_min_healthy_shards_is_exhausted_with_the_real_message(self):
        model, _ = fleet(num_shards=2, min_healthy_shards=2)
        model.raise_if_exhausted()
        condemn(model)
        with pytest.raises(GenerationFleetExhausted) as caught:
            model.raise_if_exhausted()
        assert str(caught.value) == (
            "only 1 generation shard(s) serving, below min_healthy_shards=2; fleet state is "
            "{'healthy': 1, 'suspect': 0, 'dead': 1, 'restarting': 0, 'stale': 0, 'retired': 0}")
        assert (caught.value.serving, caught.value.min_healthy_shards) == (1, 2)

    def test_suspect_shards_count_as_serving(self):
        model, _ = fleet(num_shards=1)
        model.record_probe(0, ok=False)
        model.raise_if_exhausted()


class TestWhatTheModelHandsOut:
    def test_each_shard_starts_with_an_initial_record(self):
        seen: list[Transition] = []
        GenerationFleetHealth(num_shards=2, base_urls=URLS[:2], config=FleetHealthConfig(),
                              clock=ManualClock(T0).now, observer=seen.append)
        assert [(t.shard, t.previous_state, t.state, t.trigger, t.membership_epoch)
                for t in seen] == [(0, None, H, ShardTrigger.INITIAL, 0),
                                   (1, None, H, ShardTrigger.INITIAL, 0)]

    def test_transitions_are_stamped_by_the_injected_clock(self):
        clock = ManualClock(T0)
        seen: list[Transition] = []
        model = GenerationFleetHealth(num_shards=1, config=FleetHealthConfig(), clock=clock.now,
                                      observer=seen.append)
        clock.set(1234.5)
        model.record_probe(0, ok=False, error="probe timed out")
        assert seen[-1].at == 1234.5
        assert seen[-1].log_line() == "gen_fleet: shard 0 healthy -> suspect (probe timed out)"
        clock.set(1240.0)
        model.record_probe(0, ok=True)
        assert model.shard(0).last_ok_at == 1240.0

    def test_a_snapshot_does_not_change_when_the_fleet_does(self):
        model, _ = fleet()
        snap = model.snapshot()
        condemn(model)
        assert snap.serving_shards == (0, 1)
        assert snap.counts[H] == 2
        assert model.snapshot().counts[D] == 1

    def test_an_unknown_shard_index_is_refused(self):
        model, _ = fleet()
        with pytest.raises(UnknownShardError):
            model.record_probe(5, ok=True)

    def test_base_urls_must_match_the_shard_count(self):
        with pytest.raises(ValueError, match="base_urls has 1 entries for 2 shards"):
            GenerationFleetHealth(num_shards=2, base_urls=URLS[:1], config=FleetHealthConfig(),
                                  clock=ManualClock(T0).now)


class TestTheConfigRefusesWhatWouldMisbehave:
    def test_the_defaults_are_the_real_ones(self):
        config = FleetHealthConfig.from_mapping({})
        assert (config.enabled, config.probe_interval_s, config.probe_timeout_s,
                config.unhealthy_threshold, config.healthy_threshold, config.selection,
                config.on_dead_shard, config.max_restart_attempts_per_shard,
                config.min_healthy_shards, config.separate_reported_failure_streak) == (
            False, 5.0, 2.0, 3, 2, "least_outstanding", "fail_fast", 5, 1, True)

    def test_unknown_keys_are_refused_by_name(self):
        with pytest.raises(FleetHealthConfigError, match="unhealthy_treshold, watchdog") as caught:
            FleetHealthConfig.from_mapping({"unhealthy_treshold": 2, "watchdog": {}})
        assert caught.value.key == "unhealthy_treshold"

    def test_a_probe_timeout_must_be_shorter_than_the_probe_interval(self):
        with pytest.raises(FleetHealthConfigError, match="probe_timeout_s"):
            FleetHealthConfig.from_mapping({"probe_interval_s": 2, "probe_timeout_s": 2})

    @pytest.mark.parametrize("key,value", [
        ("unhealthy_threshold", 0), ("healthy_threshold", 0), ("min_healthy_shards", -1),
        ("unhealthy_threshold", True), ("probe_interval_s", "5"), ("enabled", 1),
        ("selection", "round_robin"), ("on_dead_shard", "restart"),
    ])
    def test_a_value_that_would_misbehave_is_refused(self, key, value):
        with pytest.raises(FleetHealthConfigError) as caught:
            FleetHealthConfig.from_mapping({key: value})
        assert caught.value.key == key

    def test_integer_seconds_are_accepted_as_floats(self):
        assert FleetHealthConfig.from_mapping({"probe_interval_s": 10}).probe_interval_s == 10.0

    def test_a_floor_above_the_fleet_size_is_refused(self):
        with pytest.raises(FleetHealthConfigError, match="min_healthy_shards=3"):
            GenerationFleetHealth(num_shards=2, config=FleetHealthConfig(min_healthy_shards=3),
                                  clock=ManualClock(T0).now)


class FleetHealthMachine(RuleBasedStateMachine):
    """Random operation sequences; the invariants are checked after every step."""

    shard = st.integers(min_value=0, max_value=2)

    @initialize(unhealthy=st.integers(1, 4), healthy=st.integers(1, 3),
                restarts=st.integers(0, 3), separate=st.booleans())
    def build(self, unhealthy, healthy, restarts, separate):
        self.clock = ManualClock(T0)
        self.transitions: list[Transition] = []
        config = FleetHealthConfig(unhealthy_threshold=unhealthy, healthy_threshold=healthy,
                                   max_restart_attempts_per_shard=restarts,
                                   separate_reported_failure_streak=separate)
        self.model = GenerationFleetHealth(num_shards=3, base_urls=URLS, config=config,
                                           clock=self.clock.now, observer=self.transitions.append)
        self.last_epoch = 0
        self.last_serving = self.model.serving_shards()
        self.replayed = {t.shard: t.state for t in self.transitions}  # the initial records
        self.checked = len(self.transitions)
        self.ever_retired: set[int] = set()

    @rule(idx=shard, ok=st.booleans())
    def probe(self, idx, ok):
        self.model.record_probe(idx, ok=ok, error=None if ok else "probe failed")

    @rule(idx=shard)
    def failure(self, idx):
        self.model.report_failure(idx, RuntimeError("generation failed"))

    @rule(idx=shard)
    def success(self, idx):
        self.model.report_success(idx)

    @rule(idx=shard)
    def restarting(self, idx):
        self.model.mark_restarting(idx)

    @rule(idx=shard)
    def loaded(self, idx):
        self.model.mark_loaded(idx)

    @rule(idx=shard, version=st.integers(0, 100))
    def refit(self, idx, version):
        self.model.report_refit(idx, weight_version=version)

    # Keep one shard out of retirement, or most runs would end with nothing left to explore.
    @precondition(lambda self: len(self.ever_retired) < 2)
    @rule(idx=shard)
    def retire(self, idx):
        self.model.retire(idx, reason="operator")

    @rule(seconds=st.floats(0, 30))
    def time_passes(self, seconds):
        self.clock.advance(seconds)

    @invariant()
    def the_serving_set_is_healthy_and_suspect(self):
        snap = self.model.snapshot()
        assert self.model.serving_shards() == tuple(
            s.dp_shard_idx for s in snap.shards if s.state in SERVING_STATES)

    @invariant()
    def the_epoch_is_monotone_and_moves_iff_the_serving_set_moves(self):
        epoch, serving = self.model.membership_epoch, self.model.serving_shards()
        assert epoch >= self.last_epoch
        assert (epoch != self.last_epoch) == (serving != self.last_serving)
        self.last_epoch, self.last_serving = epoch, serving

    @invariant()
    def the_observer_stream_replays_to_the_current_states(self):
        for t in self.transitions[self.checked:]:
            assert t.previous_state == self.replayed[t.shard]
            assert t.previous_state != t.state
            self.replayed[t.shard] = t.state
            if t.previous_state is not None and t.previous_state not in SERVING_STATES:
                # Out of service, only the recovery path and retirement move a shard.
                assert t.trigger in {ShardTrigger.RESTART, ShardTrigger.LOADED,
                                     ShardTrigger.REFIT, ShardTrigger.RETIRE}
        self.checked = len(self.transitions)
        assert self.replayed == {s.dp_shard_idx: s.state for s in self.model.snapshot().shards}

    @invariant()
    def no_dead_to_healthy_edge_is_ever_observed(self):
        assert all((t.previous_state, t.state) != (D, H) for t in self.transitions)

    @invariant()
    def a_shard_returns_to_service_only_from_stale_through_a_refit(self):
        for t in self.transitions:
            if t.state in SERVING_STATES and t.previous_state not in SERVING_STATES | {None}:
                assert (t.previous_state, t.trigger) == (STALE, ShardTrigger.REFIT)

    @invariant()
    def retired_is_terminal(self):
        states = {s.dp_shard_idx: s.state for s in self.model.snapshot().shards}
        assert all(states[idx] is RETIRED for idx in self.ever_retired)
        self.ever_retired |= {idx for idx, state in states.items() if state is RETIRED}


TestFleetHealthStateMachine = FleetHealthMachine.TestCase
TestFleetHealthStateMachine.settings = settings(max_examples=150, stateful_step_count=40,
                                                deadline=None)
