"""The collector's bound on memory held for requests: bytes in flight, not rows.

A request costs memory from the moment its body is being read until its rows are committed:
the body as received, what it decompresses to, and the rows it decodes into (Python tuples and
strings, several times the protobuf bytes) waiting in the writer's queue. ``InflightBudget``
counts that cost for every request at once and refuses a request that would take it past the
limit with ``BackpressureError`` (429 + Retry-After / RESOURCE_EXHAUSTED + RetryInfo), before
the memory is used: the body's declared length before reading it, its rows' estimate before
decoding it. A request that could never fit (its cost alone is over the limit) is
``PayloadTooLargeError`` (413), since retrying it cannot help.

``ROW_BYTES_PER_BODY_BYTE`` is measured (tests/collectors/test_memory_bound.py measures the
collector's peak RSS against the figure in docs/collecting.md): decoded rows of the usual span
shapes hold 5–10 bytes of Python objects per byte of protobuf, and their Arrow copy at commit
5–9 more.
"""

from __future__ import annotations

import threading

from rolloutscope.collectors.otlp.errors import BackpressureError, PayloadTooLargeError

MiB = 1024 * 1024
DEFAULT_INFLIGHT_BYTES = 1024 * MiB
ROW_BYTES_PER_BODY_BYTE = 12
"""Bytes a decoded request holds until its commit, per byte of its (decompressed) body."""


class InflightBudget:
    """Bytes reserved by the requests the collector holds. Thread-safe (the gRPC and HTTP
    servers share one event loop, but releases may come from elsewhere)."""

    def __init__(self, limit_bytes: int, *, retry_after_s: float) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"the in-flight limit must be positive, got {limit_bytes}")
        self.limit = limit_bytes
        self.retry_after_s = retry_after_s
        self.used = 0
        self.peak = 0
        self.refused = 0
        self._lock = threading.Lock()

    def hold(self) -> Held:
        """A reservation for one request, released as a whole when the request is answered."""
        return Held(self)

    def _take(self, n: int, total: int, what: str) -> None:
        """Reserve ``n`` more bytes for a request that then holds ``total``."""
        if total > self.limit:
            raise PayloadTooLargeError(
                "request_too_large_for_memory",
                f"{what} needs {_mib(total)} in flight, more than the collector's limit of "
                f"{_mib(self.limit)} (--max-inflight-mib); send smaller batches")
        with self._lock:
            if self.used + n > self.limit:
                self.refused += 1
                raise BackpressureError(
                    f"collector is at its memory limit ({_mib(self.used)} of "
                    f"{_mib(self.limit)} in flight; {what} needs {_mib(n)} more); retry",
                    self.retry_after_s)
            self.used += n
            self.peak = max(self.peak, self.used)

    def _give(self, n: int) -> None:
        with self._lock:
            self.used -= n


class Held:
    """What one request has reserved; ``reserve`` more as it grows, ``release`` when the
    memory is gone, ``close`` (or the ``with`` block) gives back the rest."""

    __slots__ = ("_budget", "bytes")

    def __init__(self, budget: InflightBudget) -> None:
        self._budget = budget
        self.bytes = 0

    def reserve(self, n: int, what: str = "the request") -> None:
        if n > 0:
            self._budget._take(n, self.bytes + n, what)
            self.bytes += n

    def release(self, n: int) -> None:
        n = min(n, self.bytes)
        if n > 0:
            self._budget._give(n)
            self.bytes -= n

    def close(self) -> None:
        self.release(self.bytes)

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB"
