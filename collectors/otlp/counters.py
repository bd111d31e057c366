"""The collector's own metrics: items accepted, rejected (invalid / backpressure) and retried,
per signal, plus requests by outcome. Updated on the event loop thread only."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rolloutscope.collectors.otlp.signals import Signal

# Names of the collector's own metrics, as they appear at /metrics and in the metrics table.
METRIC_ACCEPTED = "rolloutscope.collector.items.accepted"
METRIC_REJECTED_INVALID = "rolloutscope.collector.items.rejected_invalid"
METRIC_REJECTED_BACKPRESSURE = "rolloutscope.collector.items.rejected_backpressure"
METRIC_RETRIED = "rolloutscope.collector.items.retried"
METRIC_REQUESTS = "rolloutscope.collector.requests"
COLLECTOR_SERVICE = "rolloutscope-collector"


@dataclass
class CollectorCounters:
    accepted: Counter = field(default_factory=Counter)
    rejected_invalid: Counter = field(default_factory=Counter)
    rejected_backpressure: Counter = field(default_factory=Counter)
    retried: Counter = field(default_factory=Counter)
    requests: Counter = field(default_factory=Counter)  # by (transport, outcome)
    problems: Counter = field(default_factory=Counter)  # by BadRequestError.problem

    def snapshot(self) -> dict:
        """A JSON-ready copy: {metric name: {signal: value}} and requests by outcome."""
        per_signal = {
            METRIC_ACCEPTED: self.accepted, METRIC_REJECTED_INVALID: self.rejected_invalid,
            METRIC_REJECTED_BACKPRESSURE: self.rejected_backpressure, METRIC_RETRIED: self.retried,
        }
        out: dict = {name: {s.value: counter.get(s, 0) for s in Signal}
                     for name, counter in per_signal.items()}
        out[METRIC_REQUESTS] = {f"{t}/{o}": n for (t, o), n in sorted(self.requests.items())}
        out["problems"] = dict(sorted(self.problems.items()))
        return out

    def rows(self) -> list[tuple[str, str, int]]:
        """(metric name, signal, cumulative value) for every per-signal counter."""
        snap = self.snapshot()
        return [(name, signal, value) for name, by_signal in snap.items()
                if name.startswith("rolloutscope.collector.items.")
                for signal, value in by_signal.items()]
