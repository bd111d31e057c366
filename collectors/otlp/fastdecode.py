"""The compiled trace decoder (``_fastdecode.c``), or the reason it is not in use.

``decode_traces`` returns a ``Decoded`` for a protobuf ``ExportTraceServiceRequest`` body when
the compiled decoder can take it (every span stored as sent), and None when the caller must
decode the body with the reference decoder in ``decode.py``: a request with anything to reject,
coerce or dedupe, a malformed body, or a field the compiled decoder does not model. The rows are
the ones the reference decoder gives for the same body (tests/collectors/test_fast_decode.py).

Without a C compiler at install time the extension is not built; the collector then decodes
every request in Python and warns once with what that costs. ``ROLLOUTSCOPE_PYTHON_DECODER=1``
forces the Python decoder (for comparison, and to test that path).
"""

from __future__ import annotations

import logging
import os

from rolloutscope.collectors.otlp.limits import DecodeLimits
from rolloutscope.store.fit import COPIED, INDEXED_KEYS
from rolloutscope.store.rows import RowBatch, arrow_from_buffers
from rolloutscope.store.schema import ARROW_SCHEMAS

log = logging.getLogger(__name__)

FORCE_PYTHON_ENV = "ROLLOUTSCOPE_PYTHON_DECODER"
FALLBACK_COST = ("decoding OTLP traces in Python costs more than twice the receiver CPU per span "
                 "(about 15 us instead of 6.5, and 5-14 times the decode alone; "
                 "benchmarks/bench_ingest.py and bench_decode.py measure it)")

# in the order _fastdecode.c indexes them: the promoted keys (fit.INDEXED_KEYS, its K_ enum),
# then the copied ones as fit.COPIED lists them (its columns in their order, each column's keys
# in theirs)
_KEYS = (*INDEXED_KEYS, *(key for copy in COPIED for key in copy.keys))


def _load():
    if os.environ.get(FORCE_PYTHON_ENV, "") not in ("", "0"):
        return None, f"{FORCE_PYTHON_ENV} is set"
    try:
        from rolloutscope.collectors.otlp import _fastdecode
    except ImportError as exc:
        return None, f"the compiled decoder is not built ({exc})"
    _fastdecode.set_keys(_KEYS)
    return _fastdecode, None


_module, unavailable = _load()
_SPANS = ARROW_SCHEMAS["spans"]
_warned = False


def available() -> bool:
    return _module is not None


def warn_if_unavailable() -> None:
    """Log once, at service start, that traces are decoded in Python and what that costs."""
    global _warned
    if _module is None and not _warned:
        _warned = True
        log.warning("OTLP traces are decoded in Python: %s; %s. Install a C compiler and "
                    "the Python headers (scripts/setup.sh does) and reinstall to build it.",
                    unavailable, FALLBACK_COST)


def decode_traces(body: bytes, limits: DecodeLimits):
    """A ``Decoded`` for a protobuf trace request, or None (decode it with ``decode.py``)."""
    if _module is None:
        return None
    out = _module.decode_traces(body, limits.max_items_per_request, limits.max_attributes,
                                limits.max_attribute_value_bytes, limits.max_events_per_span,
                                limits.max_links_per_span)
    if out is None:
        return None
    span_columns, events, links, accepted = out
    from rolloutscope.collectors.otlp.decode import Decoded  # decode imports nothing of ours

    batch = RowBatch()
    if accepted:
        batch.add_arrow("spans", arrow_from_buffers(span_columns, accepted, _SPANS))
    if events:
        batch.tables["span_events"] = events
    if links:
        batch.tables["span_links"] = links
    batch.rows += len(events) + len(links)
    return Decoded(batch, accepted=accepted)
