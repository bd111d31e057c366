"""The fleet-health wrapper, on the project's own model and on a class with only the real API."""

from __future__ import annotations

import json

import pytest

from rolloutscope.collectors.instrument import ObservedFleetHealth, observe_fleet_health
from rolloutscope.vocabulary import Attr, EventName, SpanName
from rolloutscope.replay.participants.fleet_health import (
    FleetHealthConfig,
    GenerationFleetHealth,
    UnknownShardError,
)

from .conftest import S, T0

URLS = ("http://gen-0:7000/v1", "http://gen-1:7001/v1")


def _model(**config) -> GenerationFleetHealth:
    return GenerationFleetHealth(num_shards=2, config=FleetHealthConfig(**config),
                                 clock=lambda: 0.0, base_urls=URLS)


def _stays(run, shard: int):
    states = run.view("shard_states")
    return states[states.shard_idx == shard].reset_index(drop=True)


class TestOnTheProjectsOwnModel:
    def test_wrapping_opens_one_stay_per_shard_in_its_current_state(self, run):
        observe_fleet_health(_model(), tracer=run.tracer, time_ns=run.wall())
        states = run.view("shard_states")
        assert list(states.shard_idx) == [0, 1]
        assert set(states.state) == {"healthy"} and set(states.trigger) == {"initial"}
        assert states.is_open.all() and states.end_ns.isna().all()
        assert list(states.backend_url) == list(URLS)

    def test_each_transition_ends_one_stay_and_opens_the_next(self, run):
        wall = run.wall()
        fleet = observe_fleet_health(_model(), tracer=run.tracer, time_ns=wall)
        for _ in range(3):
            wall.advance(5)
            fleet.record_probe(0, False, ConnectionError("is_alive timed out"))
        stays = _stays(run, 0)
        assert list(stays.state) == ["healthy", "suspect", "dead"]
        assert list(stays.previous_state.fillna("-")) == ["-", "healthy", "suspect"]
        assert list(stays.trigger) == ["initial", "probe_failure", "probe_failure"]
        # healthy -> suspect keeps the shard serving; suspect -> dead leaves the serving set
        assert list(stays.membership_epoch) == [0, 0, 1]
        assert list(stays.probe_failures) == [0, 1, 3]
        assert stays.last_error.iloc[2] == "ConnectionError: is_alive timed out"
        assert list(stays.start_ns) == [T0, T0 + 5 * S, T0 + 15 * S]
        assert list(stays.end_ns.iloc[:2]) == [T0 + 5 * S, T0 + 15 * S]
        assert list(stays.is_open) == [False, False, True]
        assert _stays(run, 1).state.tolist() == ["healthy"]

    def test_each_transition_is_an_event_with_trigger_streaks_epoch_and_last_error(self, run):
        wall = run.wall()
        fleet = observe_fleet_health(_model(unhealthy_threshold=2), tracer=run.tracer,
                                     time_ns=wall)
        wall.advance(1)
        fleet.report_failure(1, RuntimeError("router: 1 failed request(s) to " + URLS[1]))
        wall.advance(1)
        fleet.report_failure(1, RuntimeError("router: 2 failed request(s) to " + URLS[1]))
        events = run.events(EventName.FLEET_TRANSITION)
        assert list(events.shard_idx) == [1, 1]
        last = json.loads(events.attributes.iloc[1])
        assert last == {
            Attr.SHARD_IDX: 1, Attr.BACKEND_URL: URLS[1], Attr.FLEET_STATE: "dead",
            Attr.FLEET_PREVIOUS_STATE: "suspect", Attr.FLEET_TRIGGER: "reported_failure",
            Attr.FLEET_MEMBERSHIP_EPOCH: 1, Attr.FLEET_PROBE_FAILURES: 0,
            Attr.FLEET_REPORTED_FAILURES: 2, Attr.FLEET_RESTART_ATTEMPTS: 0,
            Attr.FLEET_LAST_ERROR: "RuntimeError: router: 2 failed request(s) to " + URLS[1]}

    def test_the_recovery_path_is_recorded_with_its_own_triggers(self, run):
        wall = run.wall()
        fleet = observe_fleet_health(_model(unhealthy_threshold=1), tracer=run.tracer,
                                     time_ns=wall)
        for step in (lambda: fleet.record_probe(0, False, "dead worker"),
                     lambda: fleet.mark_restarting(0), lambda: fleet.mark_loaded(0),
                     lambda: fleet.report_refit(0, 7)):
            wall.advance(10)
            step()
        stays = _stays(run, 0)
        assert list(zip(stays.state, stays.trigger)) == [
            ("healthy", "initial"), ("dead", "probe_failure"), ("restarting", "restart"),
            ("stale", "loaded"), ("healthy", "refit")]
        assert stays.weight_version.iloc[-1] == 7
        assert list(stays.membership_epoch) == [0, 1, 1, 1, 2]

    def test_a_restart_past_the_budget_is_recorded_as_a_retire(self, run):
        wall = run.wall()
        fleet = observe_fleet_health(_model(max_restart_attempts_per_shard=1), tracer=run.tracer,
                                     time_ns=wall)
        wall.advance(1)
        fleet.mark_restarting(1)
        wall.advance(60)
        fleet.mark_restarting(1)
        stays = _stays(run, 1)
        assert list(zip(stays.state, stays.trigger)) == [
            ("healthy", "initial"), ("restarting", "restart"), ("retired", "retire")]
        assert stays.last_error.iloc[-1] == "restart attempts exhausted"
        assert stays.restart_attempts.iloc[-1] == 2

    def test_probe_results_and_reported_failures_are_events_with_the_streaks(self, run):
        fleet = observe_fleet_health(_model(), tracer=run.tracer)
        fleet.record_probe(0, True)
        fleet.report_failure(0, TimeoutError("no result within 900s"))
        fleet.report_success(0)
        probes = run.events(EventName.FLEET_PROBE)
        failures = run.events(EventName.FLEET_REPORTED_FAILURE)
        assert len(probes) == 1 and len(failures) == 1
        probe = json.loads(probes.attributes.iloc[0])
        assert (probe[Attr.PROBE_OK], probe[Attr.FLEET_STATE]) == (True, "healthy")
        failure = json.loads(failures.attributes.iloc[0])
        assert failures.shard_idx.iloc[0] == 0
        assert failure[Attr.FLEET_REPORTED_FAILURES] == 1
        assert failure[Attr.FLEET_LAST_ERROR] == "TimeoutError: no result within 900s"
        assert failure[Attr.FLEET_STATE] == "suspect"
        assert run.inst.flush()
        calls = run.inst.store.query_df("SELECT * FROM spans WHERE name = ?", [SpanName.FLEET_CALL])
        assert sorted(json.loads(a)[Attr.FLEET_OPERATION] for a in calls.attributes) == [
            "record_probe", "report_failure"]  # report_success had nothing to record

    def test_probes_inside_a_tick_share_one_probe_tick_span(self, run):
        fleet = observe_fleet_health(_model(), tracer=run.tracer)
        with fleet.probe_tick():
            fleet.record_probe(0, True)
            fleet.record_probe(1, False, "is_alive timed out")
        assert run.inst.flush()
        spans = run.inst.store.query_df(
            "SELECT span_name, count(*) AS n FROM span_events WHERE name IN (?, ?) "
            "GROUP BY span_name", [EventName.FLEET_PROBE, EventName.FLEET_TRANSITION])
        assert dict(zip(spans.span_name, spans.n)) == {SpanName.FLEET_PROBE_TICK: 3}

    def test_a_wedged_engine_seen_through_the_wrapper_is_a_wedged_backend_incident(self, run):
        run.inst.store.register_run("run-1", config={})
        wall = run.wall()
        fleet = observe_fleet_health(_model(), tracer=run.tracer, time_ns=wall)
        for _ in range(3):  # the worker answers is_alive while every generation fails
            wall.advance(5)
            fleet.record_probe(0, True)
            wall.advance(1)
            fleet.report_failure(0, "GenerationUnavailable: engine core died")
        incidents = run.view("wedged_backend")
        assert list(incidents.shard_idx) == [0]
        assert "answered all 2 liveness probes while failing 3 generations" in (
            incidents.summary.iloc[0])

    def test_readers_pass_through_to_the_wrapped_model(self):
        model = _model(unhealthy_threshold=1)
        fleet = ObservedFleetHealth(model)
        fleet.record_probe(1, False)
        assert fleet.serving_shards() == model.serving_shards() == (0,)
        assert fleet.membership_epoch == model.membership_epoch == 1
        assert fleet.snapshot().shards == model.snapshot().shards
        assert fleet.shard_for_base_url(URLS[1]) == 1
        assert fleet.wrapped is model

    def test_the_models_own_exceptions_reach_the_caller_unchanged(self, run):
        fleet = observe_fleet_health(_model(), tracer=run.tracer)
        with pytest.raises(UnknownShardError, match="no shard 9"):
            fleet.report_failure(9, "boom")
        assert fleet.failures.count == 0
        assert len(run.view("shard_states")) == 2


class MinimalFleet:
    """Only the real API's method names: dict snapshots, string states, an epoch method."""

    def __init__(self) -> None:
        self.shards = [{"dp_shard_idx": i, "base_url": None, "state": "healthy",
                        "consecutive_probe_failures": 0, "consecutive_reported_failures": 0,
                        "restart_attempts": 0, "weight_version": None, "last_error": None}
                       for i in range(3)]
        self._epoch = 0

    def _set(self, idx: int, state: str, error: str | None = None) -> None:
        serving = ("healthy", "suspect")
        if (self.shards[idx]["state"] in serving) != (state in serving):
            self._epoch += 1
        self.shards[idx].update(state=state, last_error=error)

    def record_probe(self, idx, ok, error=None):
        if not ok:
            self.shards[idx]["consecutive_probe_failures"] += 1
            self._set(idx, "dead", error)

    def report_failure(self, idx, error=None):
        self.shards[idx]["consecutive_reported_failures"] += 1
        self._set(idx, "suspect", error)

    def report_success(self, idx):
        self.shards[idx]["consecutive_reported_failures"] = 0

    def mark_restarting(self, idx):
        self.shards[idx]["restart_attempts"] += 1
        self._set(idx, "restarting")

    def mark_loaded(self, idx):
        self._set(idx, "stale")

    def report_refit(self, idx, weight_version):
        self.shards[idx]["weight_version"] = weight_version
        self._set(idx, "healthy")

    def retire(self, idx, reason):
        self._set(idx, "retired", reason)

    def snapshot(self):
        return {"shards": [dict(s) for s in self.shards]}

    def serving_shards(self):
        return tuple(s["dp_shard_idx"] for s in self.shards
                     if s["state"] in ("healthy", "suspect"))

    def membership_epoch(self):
        return self._epoch


class TestOnAClassWithOnlyTheRealApi:
    def test_every_mutator_is_observed_with_keyword_or_positional_arguments(self, run):
        wall = run.wall()
        fleet = observe_fleet_health(MinimalFleet(), tracer=run.tracer, time_ns=wall)
        for step in (lambda: fleet.report_failure(idx=2, error="router: 1 failed request(s)"),
                     lambda: fleet.record_probe(2, ok=False, error="is_alive timed out"),
                     lambda: fleet.mark_restarting(2), lambda: fleet.mark_loaded(2),
                     lambda: fleet.report_refit(2, weight_version=3),
                     lambda: fleet.retire(1, "operator")):
            wall.advance(5)
            step()
        stays = _stays(run, 2)
        assert list(zip(stays.state, stays.trigger)) == [
            ("healthy", "initial"), ("suspect", "reported_failure"), ("dead", "probe_failure"),
            ("restarting", "restart"), ("stale", "loaded"), ("healthy", "refit")]
        assert list(stays.membership_epoch) == [0, 0, 1, 1, 1, 2]
        assert _stays(run, 1).state.tolist() == ["healthy", "retired"]
        assert fleet.serving_shards() == (0, 2)

    def test_changes_behind_the_wrappers_back_are_recorded_when_not_exclusive(self, run):
        inner = MinimalFleet()
        wall = run.wall()
        fleet = observe_fleet_health(inner, tracer=run.tracer, exclusive=False, time_ns=wall)
        wall.advance(5)
        inner.report_failure(0, "drained outside the wrapper")
        fleet.report_success(1)
        stays = _stays(run, 0)
        assert list(zip(stays.state, stays.trigger)) == [
            ("healthy", "initial"), ("suspect", "reported_failure")]
        assert run.inst.flush()
        calls = run.inst.store.query_df("SELECT * FROM spans WHERE name = ?", [SpanName.FLEET_CALL])
        assert [json.loads(a)[Attr.FLEET_OPERATION] for a in calls.attributes] == ["unobserved"]

    def test_a_snapshot_that_breaks_never_raises_into_the_caller(self, run):
        class Broken(MinimalFleet):
            def snapshot(self):
                raise RuntimeError("snapshot unavailable")

        inner = Broken()
        fleet = observe_fleet_health(inner, tracer=run.tracer)
        fleet.report_failure(0, "x")
        fleet.record_probe(1, False)
        assert inner.shards[0]["state"] == "suspect" and inner.shards[1]["state"] == "dead"
        assert fleet.failures.count == 3
        assert "snapshot unavailable" in fleet.failures.last
