"""What a checkpoint request or reply says, read from any JSON value: the attributes are the ones
a field-by-field reading gives (the fast paths skip only what a body does not have), and a body
that is not the protocol's shape yields fewer attributes, never an exception."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from rolloutscope.collectors.instrument.checkpoint_routes import (
    _COUNT_KEYS,
    _REPLY_FIELDS,
    _blockers,
    _count,
    _text,
    reply_attributes,
    request_attributes,
)
from rolloutscope.vocabulary import Attr


def _mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _request_by_the_fields(body: Any) -> dict[str, Any]:
    if not _mapping(body):
        return {}
    attrs: dict[str, Any] = {}
    if "checkpoint_id" in body and _text(body["checkpoint_id"]) is not None:
        attrs[Attr.CHECKPOINT_ID] = _text(body["checkpoint_id"])
    if "deadline_ts" in body and _number(body["deadline_ts"]) is not None:
        attrs[Attr.CK_DEADLINE_TS] = _number(body["deadline_ts"])
    for key, attr in (("episode_ids", Attr.CK_EPISODES), ("rollout_ids", Attr.CK_ROLLOUTS)):
        if isinstance(body.get(key), list):
            attrs[attr] = len(body[key])
    if "rollout_id" in body and _text(body["rollout_id"]) is not None:
        attrs[Attr.EPISODE_ROLLOUT_ID] = _text(body["rollout_id"])
        if _count(body.get("attempt_index")) is not None:
            attrs[Attr.EPISODE_ATTEMPT] = body["attempt_index"]
    return attrs


def _counts_by_the_fields(attrs: dict[str, Any], counts: Any) -> None:
    if _mapping(counts):
        for key, attr in _COUNT_KEYS.items():
            if _count(counts.get(key)) is not None:
                attrs[attr] = counts[key]


def _reply_by_the_fields(body: Any) -> dict[str, Any]:
    if not _mapping(body):
        return {}
    attrs: dict[str, Any] = {}
    for key, attr, read in _REPLY_FIELDS:
        if key in body and attr not in attrs and read(body[key]) is not None:
            attrs[attr] = read(body[key])
    report = body.get("report")
    if _mapping(report):
        if isinstance(report.get("ready"), bool):
            attrs[Attr.CK_READY] = report["ready"]
        _blockers(attrs, report.get("blockers"), report.get("blocker_count"))
        _counts_by_the_fields(attrs, report.get("counts"))
    if isinstance(body.get("ready_to_commit"), bool):
        attrs[Attr.CK_READY] = body["ready_to_commit"]
    if "blocking_attempts" in body:
        _blockers(attrs, body.get("blocking_attempts"), None)
    _counts_by_the_fields(attrs, body)
    return attrs


_scalars = (st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=False)
            | st.text(max_size=8) | st.sampled_from(["ck-1", "roll-1", "preparing", "model"]))
_keys = st.sampled_from([
    "checkpoint_id", "deadline_ts", "episode_ids", "rollout_ids", "rollout_id", "attempt_index",
    "kind", "instance", "phase", "state", "lease_expires_at", "records", "bytes", "report",
    "ready", "blockers", "blocker_count", "counts", "ready_to_commit", "blocking_attempts",
    "attempt", *_COUNT_KEYS, "other"])
# protocol keys with values of every JSON kind, nested a few levels: most are scalars, so a
# body often holds exactly one field of a kind the fast paths test for
_values = st.deferred(lambda: _scalars | _scalars | st.lists(_scalars | _objects, max_size=3)
                      | _objects)
_objects = st.dictionaries(_keys, _values, max_size=4)
_bodies = _objects | _scalars | st.lists(_objects, max_size=2)


# each field a fast path tests for, alone in its body
_ALONE = ({"rollout_id": "roll-1", "attempt_index": 2}, {"episode_ids": [1]},
          {"rollout_ids": []}, {"ready_to_commit": True}, {"report": {"ready": False}},
          {"blocking_attempts": [{"rollout_id": "r", "attempt_index": 1}]}, {"inflight": 3},
          {"phase": "prepared"}, {"deadline_ts": True}, {"checkpoint_id": None}, None, [])


def _with_examples(test):
    for body in _ALONE:
        test = example(body=body)(test)
    return test


@settings(max_examples=1000, deadline=None)
@given(body=_bodies)
@_with_examples
def test_a_request_body_reads_as_its_fields_do(body):
    assert list(request_attributes(body).items()) == list(_request_by_the_fields(body).items())


@settings(max_examples=1000, deadline=None)
@given(body=_bodies)
@_with_examples
def test_a_reply_body_reads_as_its_fields_do(body):
    assert list(reply_attributes(body).items()) == list(_reply_by_the_fields(body).items())


def test_a_renew_reply_and_request_give_their_few_attributes():
    assert reply_attributes({"phase": "preparing", "checkpoint_id": "ck-1"}) == {
        Attr.CK_PHASE: "preparing", Attr.CHECKPOINT_ID: "ck-1"}
    assert request_attributes({"checkpoint_id": "ck-1", "deadline_ts": 5}) == {
        Attr.CHECKPOINT_ID: "ck-1", Attr.CK_DEADLINE_TS: 5.0}
