"""Spans made with the OTel SDK land in the run store with every field intact."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from rolloutscope.collectors.exporter import instrument
from rolloutscope.store import RunStore
from rolloutscope.vocabulary import Attr

from .conftest import S, T0


def test_every_span_field_survives_the_trip_into_the_store(kit):
    tracer = kit.tracer
    root = tracer.start_span("rl.rollout.prompt", kind=SpanKind.SERVER, start_time=T0,
                             attributes={Attr.PROMPT_IDX: 7, Attr.ROLLOUT_ID: "p7"})
    attrs = {
        Attr.ROLLOUT_ID: "p7-0", Attr.RL_ATTEMPT: 2, Attr.PROMPT_IDX: 7,
        Attr.CHECKPOINT_ID: "rollout-step-0-snapshot-1", Attr.CK_PARTICIPANT_KIND: "agent",
        Attr.SHARD_IDX: 3, "str": "x", "bool": True, "int": -5, "float": 2.5,
        "str_list": ("a", "b"), "bool_list": (True, False), "int_list": (1, 2, 3),
        "float_list": (0.5, 1.5),
    }
    child = tracer.start_span("gym.agent.execution", context=trace.set_span_in_context(root),
                              kind=SpanKind.CLIENT, start_time=T0 + 1 * S, attributes=attrs,
                              links=[Link(root.get_span_context(), {"why": "caused"})])
    child.add_event("gym.agent.completed", {Attr.RESULT_ID: "res-1"}, timestamp=T0 + 2 * S)
    child.set_status(Status(StatusCode.ERROR, "boom"))
    child.end(end_time=T0 + 3 * S)
    root.end(end_time=T0 + 4 * S)
    store = kit.flush()

    row = store.query_df("SELECT * FROM spans WHERE name = 'gym.agent.execution'").iloc[0]
    ctx = child.get_span_context()
    assert row.trace_id == format(ctx.trace_id, "032x")
    assert row.span_id == format(ctx.span_id, "016x")
    assert row.parent_span_id == format(root.get_span_context().span_id, "016x")
    assert (row.start_ns, row.end_ns) == (T0 + S, T0 + 3 * S)
    assert (row.kind, row.status_code, row.status_message) == ("CLIENT", "ERROR", "boom")
    assert (row.run_id, row.service, row.scope) == ("run-1", "tests", "tests")
    assert (row.rollout_id, row.attempt, row.prompt_idx) == ("p7-0", 2, 7)
    assert (row.checkpoint_id, row.participant_kind, row.shard_idx) == (
        "rollout-step-0-snapshot-1", "agent", 3)
    stored = json.loads(row.attributes)
    assert stored == {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}
    assert isinstance(stored["float"], float) and isinstance(stored["int"], int)
    assert json.loads(row.resource)["service.name"] == "tests"

    ev = store.query_df("SELECT * FROM span_events").iloc[0]
    assert (ev["name"], ev.ts_ns, ev.span_id, ev.span_name) == (
        "gym.agent.completed", T0 + 2 * S, row.span_id, "gym.agent.execution")
    assert (ev.rollout_id, ev.attempt, ev.prompt_idx) == ("p7-0", 2, 7)  # inherited from span
    assert json.loads(ev.attributes) == {Attr.RESULT_ID: "res-1"}

    link = store.query_df("SELECT * FROM span_links").iloc[0]
    assert link.linked_span_id == format(root.get_span_context().span_id, "016x")
    assert json.loads(link.attributes) == {"why": "caused"}

    run = store.query_df("SELECT * FROM runs").iloc[0]
    assert (run.run_id, run.first_seen_ns, run.last_seen_ns) == ("run-1", T0, T0 + 4 * S)


def test_a_span_level_run_id_overrides_the_resource_one(kit):
    kit.span("rl.train_step", 0, 1, {Attr.RUN_ID: "replay-9"})
    store = kit.flush()
    assert store.run_ids() == ["replay-9"]


_scalar = st.one_of(
    st.text(max_size=20), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False))
_value = st.one_of(
    _scalar,
    st.lists(st.text(max_size=5), max_size=4).map(tuple),
    st.lists(st.booleans(), max_size=4).map(tuple),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4).map(tuple),
    st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=4).map(tuple),
)
_attrs = st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda k: not k.startswith(
    ("nemo.", "rolloutscope."))), _value, max_size=8)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attrs=_attrs)
def test_attributes_of_every_otlp_type_round_trip(tmp_path_factory, attrs):
    path = tmp_path_factory.mktemp("rt") / "run.duckdb"
    inst = instrument(path, service_name="prop", run_id="r")
    span = inst.tracer().start_span("x", attributes=attrs, start_time=T0)
    span.end(end_time=T0 + 1)
    inst.flush()
    stored = json.loads(inst.store.query("SELECT attributes FROM spans")[0][0] or "{}")
    inst.shutdown()
    expected = {k: list(v) if isinstance(v, tuple) else v for k, v in span.attributes.items()}
    assert stored.keys() == expected.keys()
    for key, value in expected.items():
        got = stored[key]
        if isinstance(value, float):
            assert math.isclose(got, value, rel_tol=0, abs_tol=0) and isinstance(got, float)
        else:
            assert got == value


def test_reopening_a_closed_run_read_only_shows_the_same_data(store_path):
    inst = instrument(store_path, service_name="svc", run_id="r1")
    for i in range(50):
        inst.tracer().start_span("rl.rollout.attempt", start_time=T0 + i,
                                 attributes={Attr.PROMPT_IDX: i}).end(end_time=T0 + i + 1)
    inst.shutdown()
    with RunStore(store_path, read_only=True) as ro:
        assert ro.query("SELECT count(*), min(prompt_idx), max(prompt_idx) FROM spans") == [
            (50, 0, 49)]
        assert len(ro.view("rollout_attempts")) == 50
