"""NeMo-Gym's client retry loops: which statuses end a call, and which never do."""

from __future__ import annotations

import pytest

from rolloutscope.replay.participants.gym_client import (
    MAX_NUM_TRIES,
    RETRY_SLEEP_S,
    ConnectionRetries,
    GymClientVersion,
    ModelCallRetries,
    RetryKind,
    TransportError,
    retry_error_codes,
)
from rolloutscope.replay.participants.router import GenerationRouter, RouterConfig

MAIN, V070 = GymClientVersion.MAIN_2026_08, GymClientVersion.V0_7_0
ROUTER_URL = "http://router:6042/v1/responses"


def run(loop: ModelCallRetries, status: int, limit: int = 1000):
    verdicts = []
    while len(verdicts) < limit:
        verdicts.append(loop.observe(status))
        if not verdicts[-1].retry:
            break
    return verdicts


class TestA500IsBounded:
    def test_a_500_is_tried_three_times_then_given_up(self):
        verdicts = run(ModelCallRetries(), 500)
        assert [(v.try_number, v.max_tries, v.retry) for v in verdicts] == [
            (1, 3, True), (2, 3, True), (3, 3, False)]
        assert verdicts[-1].gave_up
        assert all(v.kind is RetryKind.SERVER_ERROR for v in verdicts)

    def test_every_retryable_answer_sleeps_half_a_second_even_the_last(self):
        assert [v.sleep_s for v in run(ModelCallRetries(), 500)] == [RETRY_SLEEP_S] * 3

    def test_a_success_after_a_retry_ends_the_call(self):
        loop = ModelCallRetries()
        loop.observe(500)
        verdict = loop.observe(200)
        assert (verdict.retry, verdict.gave_up, verdict.kind, loop.finished) == (
            False, False, None, True)
        assert verdict.log_line(url=ROUTER_URL) is None


class TestTheRateLimitSubsetRaisesTheCeilingEveryTry:
    @pytest.mark.parametrize("status", [429, 502, 503, 504, 520])
    def test_on_the_main_branch_a_rate_limit_status_is_retried_for_ever(self, status):
        verdicts = run(ModelCallRetries(version=MAIN), status, limit=500)
        assert len(verdicts) == 500 and verdicts[-1].retry
        assert [v.max_tries - v.try_number for v in verdicts] == [MAX_NUM_TRIES] * 500

    def test_the_retry_line_shows_the_rising_ceiling(self):
        loop = ModelCallRetries()
        lines = [loop.observe(504).log_line(url=ROUTER_URL, error_msg="Gateway Timeout")
                 for _ in range(2)]
        assert lines == [
            f"[model_retry url={ROUTER_URL} status=504 kind=rate_limit try=1 max_tries=4 "
            "error_msg=Gateway Timeout]",
            f"[model_retry url={ROUTER_URL} status=504 kind=rate_limit try=2 max_tries=5 "
            "error_msg=Gateway Timeout]"]

    def test_in_0_7_0_only_an_internal_client_raises_the_ceiling(self):
        assert len(run(ModelCallRetries(version=V070), 504)) == MAX_NUM_TRIES
        assert run(ModelCallRetries(version=V070, internal=True), 504, limit=100)[-1].retry

    def test_a_call_that_has_ended_refuses_another_answer(self):
        loop = ModelCallRetries()
        loop.observe(200)
        with pytest.raises(RuntimeError):
            loop.observe(500)


class TestTheRetrySetsDifferByVersion:
    def test_0_7_0_also_retries_404_and_408_as_http_errors(self):
        verdict = ModelCallRetries(version=V070).observe(404)
        assert (verdict.retry, verdict.kind) == (True, RetryKind.HTTP_ERROR)
        assert ModelCallRetries(version=MAIN).observe(404).retry is False
        assert retry_error_codes(V070) - retry_error_codes(MAIN) == {404, 408}

    @pytest.mark.parametrize("version", list(GymClientVersion))
    def test_the_routers_default_no_backend_status_is_never_retried(self, version):
        assert RouterConfig().no_healthy_backend_status not in retry_error_codes(version)
        verdict = ModelCallRetries(version=version).observe(409)
        assert not verdict.retry and not verdict.gave_up


class TestTheRouterAndTheClientTogether:
    @staticmethod
    def tries_against_a_wedged_backend(router_500_not_504: bool) -> int:
        router = GenerationRouter(backends=("http://gen-0:7000/v1",),
                                  config=RouterConfig(router_500_not_504=router_500_not_504),
                                  health_managed=False)
        loop = ModelCallRetries()
        for tries in range(1, 201):
            reply = router.complete(router.route().backend, ok=False, error=TimeoutError())
            if not loop.observe(reply.status).retry:
                return tries
        return tries

    def test_a_backend_timeout_answered_500_ends_the_call_after_three_tries(self):
        assert self.tries_against_a_wedged_backend(router_500_not_504=True) == 3

    def test_a_backend_timeout_answered_504_is_retried_without_end(self):
        assert self.tries_against_a_wedged_backend(router_500_not_504=False) == 200


class TestTheTransportLoop:
    def test_on_the_main_branch_connection_errors_are_retried_without_limit(self):
        loop = ConnectionRetries()
        verdicts = [loop.observe(TransportError.CLIENT_OS_ERROR) for _ in range(1000)]
        assert all(v.retry and v.sleep_s == RETRY_SLEEP_S for v in verdicts)
        assert verdicts[-1].retry_number == 1000

    def test_0_7_0_can_cap_connection_retries(self):
        loop = ConnectionRetries(version=V070, max_connection_retries=2)
        assert [loop.observe(TransportError.SERVER_DISCONNECTED).retry for _ in range(3)] == [
            True, True, False]

    def test_the_main_branch_has_no_cap_to_set(self):
        with pytest.raises(ValueError, match="only in Gym 0.7.0"):
            ConnectionRetries(version=MAIN, max_connection_retries=2)
