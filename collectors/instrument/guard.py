"""The one rule every instrument here keeps: never raise into the observed process.

Instrumentation code runs inside someone else's call (a fleet-health method, a deadline, an HTTP
request). Whatever goes wrong in it — an unexpected snapshot shape, a body that is not what the
protocol says, an exporter that is shut down — is counted and logged at most once per
``LOG_INTERVAL_S``, and the observed call carries on as if nothing was watching. The observed
call's own exceptions are never touched: they are raised outside any guard.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("rolloutscope.collectors.instrument")

LOG_INTERVAL_S = 10.0


class InstrumentFailures:
    """Counts what an instrument could not record, and logs a burst once."""

    __slots__ = ("_name", "_lock", "count", "last", "_last_log")

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self.count = 0
        self.last: str | None = None
        self._last_log = float("-inf")

    def record(self, exc: BaseException) -> None:
        """Call from an ``except Exception`` block; never raises itself."""
        try:
            why = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self.count += 1
                self.last = why
                now = time.monotonic()
                if now - self._last_log < LOG_INTERVAL_S:
                    return
                self._last_log = now
                total = self.count
            log.warning("rolloutscope %s could not record an observation (%d so far): %s",
                        self._name, total, why)
        except Exception:  # noqa: BLE001 - logging itself failed; there is nowhere left to go
            pass
