"""The generation router model: every status it can answer, and its membership."""

from __future__ import annotations

import pytest

from rolloutscope.vocabulary import RouterOutcome
from rolloutscope.replay.participants.fleet_health import (
    FleetHealthConfig,
    GenerationFleetHealth,
    report_router_failures,
)
from rolloutscope.replay.participants.gym_client import RETRY_ERROR_CODES
from rolloutscope.replay.participants.router import (
    GenerationRouter,
    RouterConfig,
    RouterConfigError,
    UnknownBackendError,
    ignoring_line,
)

A, B, C = "http://gen-0:7000/v1", "http://gen-1:7001/v1", "http://gen-2:7002/v1"


def router(*, health_managed: bool = True, backends=(A, B, C), **config) -> GenerationRouter:
    return GenerationRouter(backends=backends, config=RouterConfig(**config),
                            health_managed=health_managed)


class TestLeastOutstandingAmongServingBackends:
    def test_ties_go_to_the_lowest_index(self):
        r = router()
        assert [r.route().backend for _ in range(4)] == [A, B, C, A]

    def test_the_backend_with_the_fewest_requests_in_flight_is_chosen(self):
        r = router()
        for _ in range(3):
            r.route()  # one each
        r.route()  # A now has two
        r.complete(B, ok=True)
        r.complete(C, ok=True)
        assert r.route().backend == B

    def test_a_completed_request_answers_200_and_frees_its_slot(self):
        r = router()
        decision = r.route()
        reply = r.complete(decision.backend, ok=True)
        assert (reply.status, reply.outcome, reply.reflex_drop) == (200, RouterOutcome.OK, False)
        assert r.outstanding(A) == 0

    def test_only_serving_backends_are_chosen(self):
        r = router()
        r.set_serving_backends([C])
        assert {r.route().backend for _ in range(5)} == {C}


class TestNoServingBackendIsAnsweredWithAStatusGymDoesNotRetry:
    def test_an_empty_serving_set_answers_409_without_a_backend(self):
        r = router()
        r.set_serving_backends([])
        decision = r.route()
        assert not decision.forwarded
        assert (decision.status, decision.outcome) == (409, RouterOutcome.NO_BACKEND)
        assert decision.body == {"error": "no healthy generation backend", "backends": [A, B, C]}
        metrics = r.metrics()
        assert (metrics.requests_total, metrics.no_healthy_backend_total,
                metrics.serving_backends) == (1, 1, 0)

    def test_the_status_is_configurable(self):
        r = router(no_healthy_backend_status=421)
        r.set_serving_backends([])
        assert r.route().status == 421

    @pytest.mark.parametrize("status", sorted(RETRY_ERROR_CODES))
    def test_a_status_in_gyms_retry_set_is_refused_by_the_config(self, status):
        assert status in {429, 500, 502, 503, 504, 520}
        with pytest.raises(RouterConfigError, match="retry set") as caught:
            RouterConfig.from_mapping({"no_healthy_backend_status": status})
        assert caught.value.key == "no_healthy_backend_status"

    def test_a_status_that_is_not_an_error_is_refused(self):
        with pytest.raises(RouterConfigError, match="not an HTTP error status"):
            RouterConfig(no_healthy_backend_status=200)


class TestABackendErrorIsADeliberate500:
    def test_a_failed_backend_call_answers_500_naming_the_backend(self):
        r = router()
        backend = r.route().backend
        reply = r.complete(backend, ok=False, error=ConnectionResetError("peer reset"))
        assert (reply.status, reply.outcome, reply.error_type) == (
            500, RouterOutcome.BACKEND_ERROR, "ConnectionResetError")
        assert reply.body == {"error": "backend failed: ConnectionResetError: peer reset",
                              "backend": A}
        assert r.metrics().backend_error_total == 1

    def test_a_backend_timeout_is_also_500(self):
        r = router()
        reply = r.complete(r.route().backend, ok=False, error=TimeoutError())
        assert reply.status == 500

    def test_a_health_managed_router_drops_the_failed_backend_until_the_next_push(self):
        r = router()
        reply = r.complete(r.route().backend, ok=False, error=TimeoutError())
        assert reply.reflex_drop
        assert r.serving_backends() == (B, C)
        # The corpse is back at zero in flight; without the drop it would win every pick.
        assert r.route().backend == B
        r.set_serving_backends([A, B, C])
        assert r.serving_backends() == (A, B, C)

    def test_without_fleet_health_nothing_would_push_so_nothing_is_dropped(self):
        r = router(health_managed=False)
        reply = r.complete(r.route().backend, ok=False, error=TimeoutError())
        assert not reply.reflex_drop
        assert r.serving_backends() == (A, B, C)

    def test_a_drop_that_empties_the_set_answers_409(self):
        r = router(backends=(A,))
        reply = r.complete(r.route().backend, ok=False, error=TimeoutError())
        assert (reply.status, reply.outcome, reply.reflex_drop) == (
            409, RouterOutcome.BACKEND_ERROR, True)
        assert r.route().status == 409
        metrics = r.metrics()
        assert (metrics.backend_error_total, metrics.no_healthy_backend_total) == (1, 2)

    def test_a_second_failure_in_flight_to_a_dropped_backend_is_500_without_another_drop(self):
        r = router()
        r.route(), r.route(), r.route()
        r.route()  # a second request to A
        r.complete(A, ok=False, error=TimeoutError())
        reply = r.complete(A, ok=False, error=TimeoutError())
        assert (reply.status, reply.reflex_drop) == (500, False)

    def test_completing_a_request_that_is_not_in_flight_is_refused(self):
        with pytest.raises(UnknownBackendError):
            router().complete(A, ok=True)


class TestThePreFixRouterAnswered504OnATimeout:
    def test_with_the_variant_off_a_backend_timeout_answers_504(self):
        r = router(router_500_not_504=False)
        reply = r.complete(r.route().backend, ok=False, error=TimeoutError())
        assert reply.status == 504

    def test_with_the_variant_off_other_backend_errors_stay_500(self):
        r = router(router_500_not_504=False)
        reply = r.complete(r.route().backend, ok=False, error=ConnectionRefusedError())
        assert reply.status == 500


class TestMembershipPushes:
    def test_a_push_replaces_the_serving_set_in_full(self):
        r = router()
        r.set_serving_backends([A, B])
        r.set_serving_backends([C])
        assert r.serving_backends() == (C,)
        assert r.metrics().serving_backends == 1

    def test_unknown_urls_are_ignored_and_reported(self):
        r = router()
        ignored = r.set_serving_backends([B, "http://elsewhere:9000/v1"])
        assert ignored == ("http://elsewhere:9000/v1",)
        assert r.serving_backends() == (B,)
        assert ignoring_line(ignored) == (
            "policy router: ignoring 1 pushed URL(s) it does not serve: http://elsewhere:9000/v1")

    def test_a_restarted_router_starts_with_every_backend_serving(self):
        r = router()
        r.set_serving_backends([A])
        r.route()
        restarted = r.restarted()
        assert restarted.serving_backends() == (A, B, C)
        assert restarted.metrics().requests_total == 0
        assert restarted.outstanding(A) == 0

    def test_a_push_from_the_fleet_model_corrects_a_restarted_router(self):
        fleet = GenerationFleetHealth(num_shards=3, base_urls=(A, B, C),
                                      config=FleetHealthConfig(), clock=lambda: 0.0)
        for _ in range(3):
            fleet.record_probe(1, ok=False)
        r = router().restarted()
        r.set_serving_backends(fleet.serving_base_urls())
        assert r.serving_backends() == (A, C)


class TestFailureDrain:
    def test_drain_returns_failures_per_backend_since_the_last_drain(self):
        r = router(health_managed=False)
        for backend in (A, B, C):
            r.route()
        r.complete(A, ok=False, error=TimeoutError())
        r.complete(B, ok=True)
        r.complete(C, ok=False, error=OSError("unreachable"))
        assert r.drain_failures() == {A: 1, C: 1}
        assert r.drain_failures() == {}

    def test_drained_failures_condemn_a_wedged_shard_in_the_fleet_model(self):
        fleet = GenerationFleetHealth(num_shards=2, base_urls=(A, B),
                                      config=FleetHealthConfig(unhealthy_threshold=3),
                                      clock=lambda: 0.0)
        r = router(backends=(A, B), health_managed=False)
        for _ in range(3):
            r.complete(r.route().backend, ok=False, error=TimeoutError())  # lands on A
            fleet.record_probe(0, ok=True)  # the wedged engine answers its probe
            report_router_failures(fleet, r.drain_failures())
        assert fleet.serving_shards() == (1,)


class TestTheConfig:
    def test_the_defaults_are_the_real_ones(self):
        config = RouterConfig.from_mapping({})
        assert (config.enabled, config.port_range_low, config.port_range_high,
                config.backend_timeout_s, config.connect_timeout_s,
                config.no_healthy_backend_status, config.router_500_not_504) == (
            False, 6000, 6099, 600.0, 5.0, 409, True)

    def test_unknown_keys_are_refused_by_name(self):
        with pytest.raises(RouterConfigError, match="backend_timeout, port") as caught:
            RouterConfig.from_mapping({"port": 6000, "backend_timeout": 5})
        assert caught.value.key == "backend_timeout"

    def test_the_connect_timeout_may_not_exceed_the_backend_timeout(self):
        with pytest.raises(RouterConfigError, match="connect_timeout_s"):
            RouterConfig.from_mapping({"backend_timeout_s": 3, "connect_timeout_s": 5})

    def test_a_transposed_port_range_is_refused(self):
        with pytest.raises(RouterConfigError, match="port range"):
            RouterConfig.from_mapping({"port_range_low": 6099, "port_range_high": 6000})

    def test_a_router_needs_distinct_backends(self):
        with pytest.raises(ValueError, match="duplicate"):
            router(backends=(A, A))
