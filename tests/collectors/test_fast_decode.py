"""The compiled trace decoder against the reference decoder (decode.py).

For any body, the compiled decoder either declines (None: the receiver then decodes with the
reference) or gives exactly the reference's result: the same rows in the same tables, nothing
rejected, no message. Random requests (hypothesis) cover every value kind, the promoted keys
with values that fit, are coerced or are refused, invalid ids and times, duplicates and
malformed bytes; the captured Gym deployment, the OpenTelemetry protocol's example trace and the
hostile corpus cover what real senders and attackers send. The receiver is then checked to give
the reference's rejections and messages for what the compiled decoder declines, and the
fallback (no compiled decoder) to decode the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from rolloutscope.collectors.otlp import fastdecode
from rolloutscope.collectors.otlp.counters import CollectorCounters
from rolloutscope.collectors.otlp.decode import JSON, PROTOBUF, decode_request, parse_request
from rolloutscope.collectors.otlp.errors import BadRequestError
from rolloutscope.collectors.otlp.limits import DecodeLimits
from rolloutscope.collectors.otlp.receiver import OtlpReceiver
from rolloutscope.collectors.otlp.signals import Signal
from rolloutscope.store.fit import COPIED
from rolloutscope.vocabulary import Attr, ResourceAttr
from tests.collectors.hostile import otlp_cases

FIXTURES = Path(__file__).parents[1] / "fixtures"
GYM = FIXTURES / "gym-0.7.0-otlp-http"
LIMITS = DecodeLimits()
SMALL = DecodeLimits(max_items_per_request=6, max_attributes=4, max_attribute_value_bytes=12,
                     max_events_per_span=2, max_links_per_span=2)



def test_the_compiled_decoder_is_built() -> None:
    # scripts/setup.sh installs a compiler, so the test environment always has it
    assert fastdecode.available(), fastdecode.unavailable


TABLES = ("spans", "span_events", "span_links")


def rows_of(batch) -> dict[str, list[tuple]]:
    """Each table's rows as tuples, whether the batch holds them as rows (the reference) or
    as columns (the compiled decoder's spans)."""
    return {t: rows for t in TABLES if (rows := batch.row_tuples(t))}


def reference(body: bytes, limits: DecodeLimits):
    """The reference's outcome: (tables, accepted, rejected, message) or the error."""
    try:
        decoded = decode_request(Signal.TRACES, parse_request(Signal.TRACES, body, PROTOBUF),
                                 limits)
    except BadRequestError as exc:
        return ("error", exc.problem, exc.message)
    return (rows_of(decoded.batch), decoded.accepted,
            decoded.rejected, decoded.message("spans"), decoded.batch.rows)


def compiled(body: bytes, limits: DecodeLimits):
    decoded = fastdecode.decode_traces(body, limits)
    if decoded is None:
        return None
    for table in decoded.batch.parts.get("spans", []):
        # every value, not only the layout: offsets in order, text valid UTF-8, null counts
        table.validate(full=True)
    return (rows_of(decoded.batch), decoded.accepted,
            decoded.rejected, decoded.message("spans"), decoded.batch.rows)


def assert_agrees(body: bytes, limits: DecodeLimits = LIMITS) -> bool:
    """The compiled result equals the reference's, or the compiled decoder declined; returns
    whether it took the body."""
    fast = compiled(body, limits)
    if fast is None:
        return False
    ref = reference(body, limits)
    assert ref[0] != "error", f"compiled decoder took a body the reference refuses: {ref}"
    assert fast == ref
    return True


# -- strategies ---------------------------------------------------------------------------
PROMOTED = [Attr.ROLLOUT_ID, Attr.EPISODE_ROLLOUT_ID, Attr.RL_ATTEMPT, Attr.EPISODE_ATTEMPT,
            Attr.PROMPT_IDX, Attr.CHECKPOINT_ID, Attr.CK_PARTICIPANT_KIND, Attr.SHARD_IDX,
            Attr.RUN_ID, Attr.OPEN_MARKER_FOR, Attr.OPEN_MARKER_PARENT,
            ResourceAttr.SERVICE_NAME]
COPIED_KEYS = [key for copy in COPIED for key in copy.keys]
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=16)
# what an HTTP status sent as text may look like (fit.copy_int takes decimal digits only)
status_texts = st.sampled_from(["200", "+0404", "-7", "2147483647", "2147483648", "-2147483648",
                                "-2147483649", " 200", "2e2", "200.0", "", "+", "\u0663",
                                "0" * 30 + "5"])
keys = st.one_of(st.sampled_from(PROMOTED), st.sampled_from(COPIED_KEYS),
                 st.sampled_from(["a", "b", "http.route", "é"]), texts)
ints = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-2**31 - 2, 2**31 + 2),
                 st.integers(-3, 3))
floats = st.one_of(st.floats(), st.floats(-1e-3, 1e-3), st.sampled_from(
    [1e-5, 1.5e-5, 9.999e-6, 1e16, 1e15, 123.0, -0.0, 5e-324, 1e21, 1e22, 2.5e-10]))


def _scalar(v: common_pb2.AnyValue, kind: str, value) -> None:
    setattr(v, kind, value)


def any_values(depth: int = 2):
    scalars = st.one_of(
        st.tuples(st.just("string_value"), st.one_of(texts, status_texts)),
        st.tuples(st.just("int_value"), ints),
        st.tuples(st.just("double_value"), floats),
        st.tuples(st.just("bool_value"), st.booleans()),
        st.tuples(st.just("bytes_value"), st.binary(max_size=8)),
        st.tuples(st.just("empty"), st.none()),
    )
    if depth == 0:
        return scalars
    nested = any_values(depth - 1)
    return st.one_of(scalars,
                     st.tuples(st.just("array_value"), st.lists(nested, max_size=4)),
                     st.tuples(st.just("kvlist_value"),
                               st.lists(st.tuples(keys, nested), max_size=4,
                                        unique_by=lambda kv: kv[0])))


def fill_value(v: common_pb2.AnyValue, spec) -> None:
    kind, value = spec
    if kind == "empty":
        return
    if kind == "array_value":
        v.array_value.SetInParent()
        for item in value:
            fill_value(v.array_value.values.add(), item)
    elif kind == "kvlist_value":
        v.kvlist_value.SetInParent()
        for key, item in value:
            fill_value(v.kvlist_value.values.add(key=key).value, item)
    else:
        _scalar(v, kind, value)


attr_lists = st.lists(st.tuples(keys, any_values()), max_size=6)


def fill_attrs(kvs, attrs, *, no_value: bool = False) -> None:
    for i, (key, spec) in enumerate(attrs):
        kv = kvs.add(key=key)
        if not (no_value and i == 0):
            fill_value(kv.value, spec)


ids16 = st.one_of(st.binary(min_size=16, max_size=16), st.sampled_from([bytes(16), b"\x01" * 15]))
ids8 = st.one_of(st.binary(min_size=8, max_size=8), st.sampled_from([bytes(8), b"\x02" * 7]))
T0 = 1_700_000_000_000_000_000
times = st.one_of(st.integers(T0, T0 + 10**9), st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1]))

spans = st.fixed_dictionaries({
    "trace_id": ids16, "span_id": ids8,
    "parent": st.one_of(st.just(b""), ids8),
    "name": texts, "kind": st.integers(0, 7), "code": st.integers(0, 4), "message": texts,
    "start": times, "duration": st.one_of(st.integers(0, 10**6), st.just(-1)),
    "attrs": attr_lists, "no_value": st.booleans(),
    "events": st.lists(st.tuples(texts, times, attr_lists), max_size=3),
    "links": st.lists(st.tuples(ids16, ids8, attr_lists), max_size=2),
    "trace_state": st.sampled_from(["", "k=v"]), "flags": st.integers(0, 2**32 - 1),
})
resources = st.fixed_dictionaries({
    "attrs": attr_lists,
    "service": st.one_of(st.none(), st.tuples(st.just("string_value"), texts),
                         st.tuples(st.just("int_value"), ints),
                         st.tuples(st.just("bool_value"), st.booleans())),
    "run": st.one_of(st.none(), st.tuples(st.just("string_value"), st.sampled_from(["r1", "r2"]))),
})
requests = st.lists(st.tuples(resources, st.lists(st.tuples(
    st.one_of(st.none(), texts), st.lists(spans, max_size=4)), max_size=2)), max_size=3)


def build(spec) -> bytes:
    request = ExportTraceServiceRequest()
    for res, scopes in spec:
        rs = request.resource_spans.add()
        fill_attrs(rs.resource.attributes, res["attrs"])
        if res["service"] is not None:
            fill_value(rs.resource.attributes.add(key=ResourceAttr.SERVICE_NAME).value,
                       res["service"])
        if res["run"] is not None:
            fill_value(rs.resource.attributes.add(key=ResourceAttr.RUN_ID).value, res["run"])
        for scope, span_specs in scopes:
            ss = rs.scope_spans.add()
            if scope is not None:
                ss.scope.name = scope
            for s in span_specs:
                span = ss.spans.add(trace_id=s["trace_id"], span_id=s["span_id"],
                                    parent_span_id=s["parent"], name=s["name"], kind=s["kind"],
                                    trace_state=s["trace_state"], flags=s["flags"])
                span.start_time_unix_nano = s["start"]
                end = s["start"] + s["duration"]
                span.end_time_unix_nano = min(max(end, 0), 2**64 - 1)
                if s["code"] or s["message"]:
                    span.status.code = s["code"]
                    span.status.message = s["message"]
                fill_attrs(span.attributes, s["attrs"], no_value=s["no_value"])
                for name, t, attrs in s["events"]:
                    event = span.events.add(name=name, time_unix_nano=t)
                    fill_attrs(event.attributes, attrs)
                for trace_id, span_id, attrs in s["links"]:
                    link = span.links.add(trace_id=trace_id, span_id=span_id)
                    fill_attrs(link.attributes, attrs)
    return request.SerializeToString()


# Requests with nothing to reject or coerce: unique keys, valid ids and times, promoted keys
# with values their columns take as sent. The compiled decoder must take every one of them.
plain_keys = texts.filter(lambda k: k not in PROMOTED)
fitting = st.one_of(
    st.tuples(st.sampled_from([Attr.ROLLOUT_ID, Attr.EPISODE_ROLLOUT_ID, Attr.CHECKPOINT_ID,
                               Attr.CK_PARTICIPANT_KIND, Attr.RUN_ID]),
              st.tuples(st.just("string_value"), texts)),
    st.tuples(st.sampled_from([Attr.RL_ATTEMPT, Attr.EPISODE_ATTEMPT, Attr.SHARD_IDX]),
              st.tuples(st.just("int_value"), st.integers(-2**31, 2**31 - 1))),
    st.tuples(st.just(Attr.PROMPT_IDX), st.tuples(st.just("int_value"), ints)),
    # a copied attribute is stored as sent whatever it holds: its column is NULL if it does
    # not fit
    st.tuples(st.sampled_from(COPIED_KEYS), any_values()))
clean_attrs = st.tuples(st.dictionaries(plain_keys, any_values(), max_size=6),
                        st.lists(fitting, max_size=3, unique_by=lambda kv: kv[0])).map(
    lambda pair: list(pair[0].items()) + pair[1])
clean_times = st.integers(1, 2**63 - 1 - 10**6)
clean_spans = st.fixed_dictionaries({
    "trace_id": st.binary(min_size=16, max_size=16).filter(any),
    "span_id": st.binary(min_size=8, max_size=8).filter(any),
    "parent": st.one_of(st.just(b""), st.binary(min_size=8, max_size=8)),
    "name": texts, "kind": st.integers(0, 7), "code": st.integers(0, 4), "message": texts,
    "start": clean_times, "duration": st.integers(0, 10**6), "attrs": clean_attrs,
    "no_value": st.booleans(),
    "events": st.lists(st.tuples(texts, clean_times, st.dictionaries(
        plain_keys, any_values(), max_size=3).map(lambda d: list(d.items()))), max_size=3),
    "links": st.lists(st.tuples(st.binary(min_size=16, max_size=16),
                                st.binary(min_size=8, max_size=8),
                                clean_attrs), max_size=2),
    "trace_state": st.sampled_from(["", "k=v"]), "flags": st.integers(0, 2**32 - 1),
})
clean_resources = st.fixed_dictionaries({
    "attrs": st.dictionaries(plain_keys, any_values(), max_size=4).map(lambda d: list(d.items())),
    "service": st.one_of(st.none(), st.tuples(st.just("string_value"), texts)),
    "run": st.one_of(st.none(), st.tuples(st.just("string_value"), st.sampled_from(["r1", "r2"]))),
})
clean_requests = st.lists(st.tuples(clean_resources, st.lists(st.tuples(
    st.one_of(st.none(), texts), st.lists(clean_spans, max_size=4)), max_size=2)),
    max_size=3).filter(lambda spec: len({s["span_id"] for _, scopes in spec for _, ss in scopes
                                         for s in ss}) == sum(len(ss) for _, scopes in spec
                                                              for _, ss in scopes))

PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPERTY
@given(requests)
def test_random_requests_decode_as_the_reference_does(spec) -> None:
    body = build(spec)
    assert_agrees(body)
    assert_agrees(body, SMALL)


@PROPERTY
@given(clean_requests)
def test_requests_with_nothing_to_reject_take_the_compiled_path(spec) -> None:
    assert assert_agrees(build(spec)), "declined a request with nothing to reject"


@PROPERTY
@given(requests, st.data())
def test_random_bytes_are_declined_or_decoded_as_the_reference_does(spec, data) -> None:
    body = bytearray(build(spec))
    if body:
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(body) - 1))
            body[at] = data.draw(st.integers(0, 255))
        body = body[:data.draw(st.integers(0, len(body)))]
    assert_agrees(bytes(body))


@settings(max_examples=300, deadline=None)
@given(floats)
def test_doubles_are_written_as_the_reference_writes_them(x: float) -> None:
    assert fastdecode._module.format_double(x) == orjson.dumps(x).decode()


# -- what real senders send ---------------------------------------------------------------
def _clean_request(n: int) -> bytes:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.add(key=ResourceAttr.SERVICE_NAME).value.string_value = "gym"
    rs.resource.attributes.add(key=ResourceAttr.RUN_ID).value.string_value = "run-1"
    ss = rs.scope_spans.add()
    ss.scope.name = "s"
    for i in range(n):
        span = ss.spans.add(trace_id=(i + 1).to_bytes(16, "big"),
                            span_id=(i + 1).to_bytes(8, "big"), name="gym.rollout", kind=1,
                            start_time_unix_nano=T0 + i, end_time_unix_nano=T0 + i + 5)
        span.attributes.add(key=Attr.ROLLOUT_ID).value.string_value = f"{i}-0"
        span.attributes.add(key=Attr.RL_ATTEMPT).value.int_value = 2
        span.attributes.add(key="ratio").value.double_value = i / 7
        span.events.add(name="e", time_unix_nano=T0 + i).attributes.add(
            key="k").value.int_value = i
        span.links.add(trace_id=b"\x03" * 16, span_id=b"\x04" * 8)
    return request.SerializeToString()


def test_ints_and_texts_at_their_edges_decode_as_the_reference_does() -> None:
    # the compiled decoder writes an int's digits itself and checks UTF-8 eight bytes at a
    # time: every int width and sign, and text with its first non-ASCII byte at each place
    ints = [0, 1, -1, 9, 10, -10, 99, 100, 2**31 - 1, -2**31, 2**53 + 1, 10**18,
            2**63 - 1, -2**63, -2**63 + 1]
    texts = ["a" * k + "é" + "b" * (15 - k) for k in range(16)]
    texts += ["x" * 8, "x" * 16, "x" * 7 + "\u20ac", "\U0001f600" * 3, "", "ascii-only text"]
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.add(key=ResourceAttr.SERVICE_NAME).value.string_value = "gym"
    ss = rs.scope_spans.add()
    for i, text in enumerate(texts):
        span = ss.spans.add(trace_id=(i + 1).to_bytes(16, "big"),
                            span_id=(i + 1).to_bytes(8, "big"), name=text, kind=1,
                            start_time_unix_nano=T0 + i, end_time_unix_nano=T0 + i + 5)
        span.attributes.add(key=text or "k").value.string_value = text
        for j, v in enumerate(ints):
            span.attributes.add(key=f"i{j}").value.int_value = v
    body = request.SerializeToString()
    assert assert_agrees(body)
    attributes = [row[17] for row in compiled(body, LIMITS)[0]["spans"]]
    assert orjson.loads(attributes[0])["i12"] == 2**63 - 1
    assert orjson.loads(attributes[0])["i13"] == -2**63


def test_clean_requests_take_the_compiled_path() -> None:
    body = _clean_request(50)
    assert assert_agrees(body)
    rows = compiled(body, LIMITS)[0]
    assert len(rows["spans"]) == len(rows["span_events"]) == len(rows["span_links"]) == 50
    assert rows["spans"][3][11:13] == ("3-0", 2)  # promoted rollout id and attempt
    assert rows["span_events"][3][6:8] == ("3-0", 2)  # inherited by the event


def test_the_gym_capture_decodes_as_the_reference_does() -> None:
    bodies = sorted(GYM.glob("*-traces-pb.bin"))
    assert len(bodies) == 6
    for path in bodies:
        assert assert_agrees(path.read_bytes()), f"{path.name} was declined"


def test_the_protocol_example_trace_decodes_as_the_reference_does() -> None:
    # the example is OTLP/JSON; its protobuf form is what an SDK would send
    request = parse_request(Signal.TRACES, (FIXTURES / "otel-proto-examples" / "trace.json")
                            .read_bytes(), JSON)
    assert assert_agrees(request.SerializeToString())


def test_the_hostile_corpus_is_declined_or_decoded_as_the_reference_does() -> None:
    cases = [c for c in otlp_cases() if c.path == "/v1/traces" and c.content_type ==
             "application/x-protobuf"]
    assert len(cases) >= 10
    for case in cases:
        assert_agrees(case.body)


# -- the receiver: rejections from the reference, and the fallback --------------------------
def _receiver() -> OtlpReceiver:
    async def enqueue(batch) -> None:  # decode only; nothing is committed
        raise AssertionError("not used")

    return OtlpReceiver(enqueue=enqueue, limits=LIMITS, counters=CollectorCounters())


def test_the_receiver_answers_rejections_as_the_reference_does() -> None:
    request = ExportTraceServiceRequest.FromString(_clean_request(3))
    bad = request.resource_spans[0].scope_spans[0].spans[1]
    bad.attributes.add(key=Attr.SHARD_IDX).value.int_value = 2**40
    request.resource_spans[0].scope_spans[0].spans[2].end_time_unix_nano = 2**63
    body = request.SerializeToString()
    assert fastdecode.decode_traces(body, LIMITS) is None
    decoded = _receiver().decode(Signal.TRACES, body, PROTOBUF)
    ref = reference(body, LIMITS)
    assert (decoded.accepted, decoded.rejected, decoded.message("spans")) == ref[1:4]
    assert decoded.rejected == 2 and "does not fit column shard_idx" in decoded.message("spans")
    assert "past the latest time the store holds" in decoded.message("spans")


def test_the_receiver_decodes_clean_bodies_with_the_compiled_decoder() -> None:
    body = _clean_request(4)
    decoded = _receiver().decode(Signal.TRACES, body, PROTOBUF)
    assert rows_of(decoded.batch) == rows_of(fastdecode.decode_traces(body, LIMITS).batch)


FALLBACK = """
import logging, sys
from rolloutscope.collectors.otlp import fastdecode
from rolloutscope.collectors.otlp.counters import CollectorCounters
from rolloutscope.collectors.otlp.limits import DecodeLimits
from rolloutscope.collectors.otlp.receiver import OtlpReceiver
from rolloutscope.collectors.otlp.signals import Signal
import orjson
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
assert not fastdecode.available()
fastdecode.warn_if_unavailable()
r = OtlpReceiver(enqueue=None, limits=DecodeLimits(), counters=CollectorCounters())
d = r.decode(Signal.TRACES, open(sys.argv[1], "rb").read(), "protobuf")
print(orjson.dumps({t: d.batch.row_tuples(t) for t in ("spans", "span_events", "span_links")
                    if d.batch.row_tuples(t)}).decode())
"""


def test_the_python_decoder_is_the_fallback_and_says_what_it_costs(tmp_path) -> None:
    body = _clean_request(5)
    path = tmp_path / "body.bin"
    path.write_bytes(body)
    env = dict(os.environ, **{fastdecode.FORCE_PYTHON_ENV: "1"})
    out = subprocess.run([sys.executable, "-c", FALLBACK, str(path)], env=env,
                         capture_output=True, text=True, check=True, timeout=120)
    assert "OTLP traces are decoded in Python" in out.stderr
    assert "ROLLOUTSCOPE_PYTHON_DECODER is set" in out.stderr
    assert "receiver CPU per span" in out.stderr
    fast = rows_of(fastdecode.decode_traces(body, LIMITS).batch)
    assert json.loads(out.stdout) == json.loads(orjson.dumps(fast))


def test_the_decoder_models_every_field_protobuf_knows() -> None:
    # a field added to these messages by a newer opentelemetry-proto is one the compiled
    # decoder does not parse: it declines such bodies, and this says it is time to model it
    known = {
        trace_pb2.ResourceSpans: {1, 2, 3}, trace_pb2.ScopeSpans: {1, 2, 3},
        trace_pb2.Span: set(range(1, 17)), trace_pb2.Span.Event: {1, 2, 3, 4},
        trace_pb2.Span.Link: {1, 2, 3, 4, 5, 6}, trace_pb2.Status: {2, 3},
        resource_pb2.Resource: {1, 2, 3}, common_pb2.InstrumentationScope: {1, 2, 3, 4},
        common_pb2.KeyValue: {1, 2, 3}, common_pb2.AnyValue: set(range(1, 9)),
    }
    for message, numbers in known.items():
        assert {f.number for f in message.DESCRIPTOR.fields} <= numbers, message.DESCRIPTOR.name
