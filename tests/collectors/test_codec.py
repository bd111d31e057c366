"""The pure decoder and its encoder: round trips (Hypothesis), JSON ≡ protobuf, the rules."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutscope.collectors.otlp.decode import JSON, PROTOBUF, decode_body, decode_request
from rolloutscope.collectors.otlp.encode import encode_spans, to_json
from rolloutscope.collectors.otlp.errors import BadRequestError
from rolloutscope.collectors.otlp.limits import DecodeLimits
from rolloutscope.collectors.otlp.signals import Signal
from rolloutscope.store.rows import RowBatch
from rolloutscope.vocabulary import Attr
from tests.collectors.otlp_fixtures import span_request

TABLES = ("spans", "open_spans", "span_events", "span_links")
LIMITS = DecodeLimits()

keys = st.text(string.ascii_lowercase + ".", min_size=1, max_size=12)
scalars = st.one_of(st.text(max_size=20), st.integers(-2**63, 2**63 - 1), st.booleans(),
                    st.floats(allow_nan=False, allow_infinity=False))
attr_values = st.one_of(scalars, st.lists(st.integers(-1000, 1000), max_size=4))
attrs = st.dictionaries(keys, attr_values, max_size=6)
hex16 = st.binary(min_size=8, max_size=8).filter(any).map(bytes.hex)
hex32 = st.binary(min_size=16, max_size=16).filter(any).map(bytes.hex)


@st.composite
def batches(draw) -> RowBatch:
    batch = RowBatch()
    resource = draw(st.sampled_from([None, '{"service.name":"a"}', '{"service.name":"b"}']))
    ids = draw(st.lists(st.tuples(hex32, hex16), min_size=1, max_size=5, unique=True))
    for trace_id, span_id in ids:
        start = draw(st.integers(1, 2**62))
        span_attrs = draw(attrs)
        if draw(st.booleans()):
            span_attrs[Attr.ROLLOUT_ID] = draw(st.text(string.ascii_lowercase, min_size=1))
        batch.add_span(
            run_id=None, trace_id=trace_id, span_id=span_id,
            parent_span_id=draw(st.none() | hex16), name=draw(st.text(max_size=10)),
            kind=draw(st.sampled_from(["INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"])),
            service=None if resource is None else resource[17:18], start_ns=start,
            end_ns=start + draw(st.integers(0, 10**9)),
            status_code=draw(st.sampled_from(["UNSET", "OK", "ERROR"])),
            status_message=draw(st.none() | st.text(min_size=1, max_size=10)),
            attributes=span_attrs, resource_json=resource,
            scope=draw(st.none() | st.just("scope")),
            events=[(draw(st.text(max_size=5)), start, draw(attrs))
                    for _ in range(draw(st.integers(0, 2)))],
            links=[(draw(hex32), draw(hex16), draw(attrs)) for _ in range(draw(st.integers(0, 2)))],
        )
    return batch


def _tables(batch: RowBatch) -> dict:
    """Each table's rows, order-free: OTLP groups spans by resource and scope."""
    out = {}
    for table in TABLES:
        arrow = batch.arrow(table)
        rows = [] if arrow is None else arrow.to_pylist()
        out[table] = sorted(rows, key=repr)
    return out


@settings(max_examples=60, deadline=None)
@given(batches())
def test_encoding_then_decoding_gives_back_the_same_rows(batch):
    request = encode_spans(batch)
    decoded = decode_request(Signal.TRACES, request, LIMITS)
    assert decoded.rejected == 0
    assert _tables(decoded.batch) == _tables(batch)


@settings(max_examples=40, deadline=None)
@given(batches())
def test_otlp_json_and_protobuf_decode_to_the_same_rows(batch):
    request = encode_spans(batch)
    from_pb = decode_body(Signal.TRACES, request.SerializeToString(), PROTOBUF, LIMITS)
    from_json = decode_body(Signal.TRACES, to_json(request), JSON, LIMITS)
    assert _tables(from_json.batch) == _tables(from_pb.batch)


def test_an_open_interval_marker_is_filed_as_an_open_span_under_the_id_it_names():
    request = span_request(1, attributes={Attr.OPEN_MARKER_FOR: "00000000000000aa", "x": 1})
    decoded = decode_request(Signal.TRACES, request, LIMITS)
    assert decoded.batch.arrow("spans") is None
    open_spans = decoded.batch.arrow("open_spans").to_pydict()
    assert open_spans["span_id"] == ["00000000000000aa"]
    assert open_spans["end_ns"] == [None]


def test_hot_attributes_are_promoted_to_columns():
    request = span_request(1, attributes={Attr.ROLLOUT_ID: "r-7", Attr.PROMPT_IDX: 7})
    spans = decode_request(Signal.TRACES, request, LIMITS).batch.arrow("spans").to_pydict()
    assert spans["rollout_id"] == ["r-7"] and spans["prompt_idx"] == [7]


def test_a_request_over_the_item_limit_is_refused_whole():
    with pytest.raises(BadRequestError, match="carries 3 spans, limit 2"):
        decode_request(Signal.TRACES, span_request(3), DecodeLimits(max_items_per_request=2))


def test_an_invalid_span_among_valid_ones_is_counted_and_named():
    request = span_request(3)
    request.resource_spans[0].scope_spans[0].spans[2].span_id = b"\x01\x02"
    decoded = decode_request(Signal.TRACES, request, LIMITS)
    assert (decoded.accepted, decoded.rejected) == (2, 1)
    assert decoded.message("spans") == ("rejected 1 of 3 spans: span 0102: span_id must be 8 "
                                        "bytes, got 2")


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="max_attributes must be a positive integer"):
        DecodeLimits(max_attributes=0)
