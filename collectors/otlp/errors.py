"""The collector's error taxonomy: what the sender did wrong vs. what the collector cannot do now.

``BadRequestError`` and its subclasses are the sender's fault and are answered with a 4xx /
INVALID_ARGUMENT naming the problem; the sender must not retry them. ``BackpressureError`` and
``UnavailableError`` are the collector's condition and are answered with 429/503 /
RESOURCE_EXHAUSTED/UNAVAILABLE plus a retry hint, so stock exporters retry.
"""

from __future__ import annotations


class CollectorError(Exception):
    """Base class of every error the collector's receivers raise."""


class BadRequestError(CollectorError):
    """The request cannot be accepted as sent. ``problem`` is a short stable code (for counters
    and tests), ``status`` the HTTP status it maps to."""

    status = 400

    def __init__(self, problem: str, message: str) -> None:
        self.problem = problem
        self.message = message
        super().__init__(message)


class PayloadTooLargeError(BadRequestError):
    """The body, or what it expands to, is over a configured limit."""

    status = 413


class UnsupportedMediaError(BadRequestError):
    """A content type or content encoding the collector does not speak."""

    status = 415


class UnauthenticatedError(CollectorError):
    """A token is configured and the request did not carry it."""

    def __init__(self, message: str = "missing or wrong bearer token") -> None:
        self.message = message
        super().__init__(message)


class BackpressureError(CollectorError):
    """The writer's queue is full; the sender should retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        self.message = message
        self.retry_after_s = retry_after_s
        super().__init__(message)


class UnavailableError(CollectorError):
    """The store could not commit (or the collector is shutting down); retryable."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        self.message = message
        self.retry_after_s = retry_after_s
        super().__init__(message)
