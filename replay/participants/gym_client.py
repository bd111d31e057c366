"""NeMo-Gym's model-client retry behaviour, as a pure model.

See docs/domain/rollouts-and-deadlines.md#gyms-own-retries, and P6 in docs/domain/incidents.md.

Two loops decide how long a Gym model call keeps knocking on the policy endpoint, and both
matter to the router's choice of status codes:

- the status loop (``NeMoGymAsyncOpenAI._request_with_retry``): a status in the retry set is
  retried after 0.5 s, up to ``MAX_NUM_TRIES`` tries. A status in the rate-limit subset also
  raises the ceiling by one on that try, so a backend that keeps answering 504 is retried for
  ever, each try lasting as long as the backend takes to time out. That is the 504 storm the
  router's deliberate 500 removes: 500 is retried but never raises the ceiling, so it is bounded.
- the transport loop (``server_utils.request``): ``ServerDisconnectedError`` and
  ``ClientOSError`` are retried every 0.5 s with no limit on the Aug-2026 main branch (0.7.0 can
  cap it), and no HTTP timeout is set at all.

The rule this module keeps: which statuses Gym retries is decided here and nowhere else; the
router's config validator reads ``RETRY_ERROR_CODES`` from this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class GymClientVersion(StrEnum):
    """Which Gym client's behaviour to reproduce."""

    MAIN_2026_08 = "main-2026-08"  # NVIDIA-NeMo/Gym main at 07d6b0d
    V0_7_0 = "0.7.0"  # the released wheel


RATE_LIMIT_ERROR_CODES = frozenset({429, 502, 503, 504, 520})
# The main branch's retry set; the router's no-healthy-backend status must stay outside it.
RETRY_ERROR_CODES = RATE_LIMIT_ERROR_CODES | {500}
_RETRY_ERROR_CODES_0_7_0 = RATE_LIMIT_ERROR_CODES | {404, 408, 500}
MAX_NUM_TRIES = 3
RETRY_SLEEP_S = 0.5


def retry_error_codes(version: GymClientVersion) -> frozenset[int]:
    return RETRY_ERROR_CODES if version is GymClientVersion.MAIN_2026_08 \
        else _RETRY_ERROR_CODES_0_7_0


class RetryKind(StrEnum):
    """The ``kind=`` of a ``[model_retry …]`` line."""

    RATE_LIMIT = "rate_limit"
    SERVER_ERROR = "server_error"
    HTTP_ERROR = "http_error"  # 0.7.0 only: 404 and 408


@dataclass(frozen=True, slots=True)
class StatusVerdict:
    """What the client does with one answered try.

    ``retry`` is False both when the call succeeded (a status outside the retry set, which the
    caller then raises for or returns) and when the retries are used up (``gave_up``). A
    retryable status always sleeps ``sleep_s`` first, even on the try that exhausts the ceiling:
    the real loop sleeps before it re-checks its condition.
    """

    status: int
    try_number: int  # 1-based: the try that got this status
    max_tries: int  # the ceiling after this try (raised already for a rate-limit status)
    kind: RetryKind | None  # None when the status is not retried
    retry: bool
    sleep_s: float

    @property
    def gave_up(self) -> bool:
        return self.kind is not None and not self.retry

    def log_line(self, *, url: str, error_msg: str = "") -> str | None:
        """The client's ``[model_retry …]`` line for this try, or None when it prints none."""
        if self.kind is None:
            return None
        return (f"[model_retry url={url} status={self.status} kind={self.kind.value} "
                f"try={self.try_number} max_tries={self.max_tries} error_msg={error_msg[:200]}]")


class ModelCallRetries:
    """The status loop of one logical model call: feed it each answered status in turn."""

    def __init__(self, *, version: GymClientVersion = GymClientVersion.MAIN_2026_08,
                 internal: bool = False) -> None:
        self._version = version
        self._retry_codes = retry_error_codes(version)
        # 0.7.0 raises the ceiling only for clients that call Gym's own servers; the policy
        # model's client to the router is not one of them.
        self._raises_ceiling = version is GymClientVersion.MAIN_2026_08 or internal
        self._tries = 0
        self._max_tries = MAX_NUM_TRIES
        self._finished = False

    @property
    def tries(self) -> int:
        return self._tries

    @property
    def max_tries(self) -> int:
        return self._max_tries

    @property
    def finished(self) -> bool:
        return self._finished

    def observe(self, status: int) -> StatusVerdict:
        if self._finished:
            raise RuntimeError("this model call has already finished; start a new one")
        self._tries += 1
        if status not in self._retry_codes:
            self._finished = True
            return StatusVerdict(status, self._tries, self._max_tries, None, False, 0.0)
        rate_limited = status in RATE_LIMIT_ERROR_CODES
        if rate_limited and self._raises_ceiling:
            self._max_tries += 1
        retry = self._tries < self._max_tries
        self._finished = not retry
        return StatusVerdict(status, self._tries, self._max_tries, self._kind(status), retry,
                             RETRY_SLEEP_S)

    def _kind(self, status: int) -> RetryKind:
        if status in RATE_LIMIT_ERROR_CODES:
            return RetryKind.RATE_LIMIT
        if status == 500:
            return RetryKind.SERVER_ERROR
        return RetryKind.HTTP_ERROR


class TransportError(StrEnum):
    """The connection errors the transport loop retries."""

    SERVER_DISCONNECTED = "ServerDisconnectedError"
    CLIENT_OS_ERROR = "ClientOSError"


@dataclass(frozen=True, slots=True)
class TransportVerdict:
    error: TransportError
    retry_number: int  # 1-based count of connection errors on this request
    retry: bool
    sleep_s: float


class ConnectionRetries:
    """The transport loop of one request. Uncapped unless ``max_connection_retries`` is given,
    which only 0.7.0 accepts; with no HTTP timeout, an uncapped loop against a dead endpoint
    holds its rollout for as long as the endpoint stays dead."""

    def __init__(self, *, version: GymClientVersion = GymClientVersion.MAIN_2026_08,
                 max_connection_retries: int | None = None) -> None:
        if max_connection_retries is not None:
            if version is not GymClientVersion.V0_7_0:
                raise ValueError("max_connection_retries exists only in Gym 0.7.0")
            if max_connection_retries < 0:
                raise ValueError("max_connection_retries must be >= 0")
        self._cap = max_connection_retries
        self._errors = 0

    def observe(self, error: TransportError) -> TransportVerdict:
        self._errors += 1
        retry = self._cap is None or self._errors <= self._cap
        return TransportVerdict(error, self._errors, retry, RETRY_SLEEP_S if retry else 0.0)


__all__ = [
    "ConnectionRetries", "GymClientVersion", "MAX_NUM_TRIES", "ModelCallRetries",
    "RATE_LIMIT_ERROR_CODES", "RETRY_ERROR_CODES", "RETRY_SLEEP_S", "RetryKind",
    "StatusVerdict", "TransportError", "TransportVerdict", "retry_error_codes",
]
