"""Limits on what one OTLP request may carry. Defaults are generous for real SDK batches (the
stock exporters send at most a few MiB) and small enough that one request cannot exhaust the
collector's memory."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class DecodeLimits:
    max_body_bytes: int = 32 * MiB
    """Body as received (compressed or not); over it → 413 without reading further."""
    max_decoded_bytes: int = 64 * MiB
    """What a gzip body may expand to; over it → 413 (a gzip bomb stops here)."""
    max_items_per_request: int = 1_000_000
    """Spans, data points or log records in one request."""
    max_attributes: int = 1_024
    """Attributes on one span, event, link, data point, log record or resource."""
    max_attribute_value_bytes: int = 1 * MiB
    """Characters of one string value (or bytes of a bytes value); arrays count their sum."""
    max_events_per_span: int = 10_000
    max_links_per_span: int = 1_000

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"limit {name} must be a positive integer, got {value!r}")
