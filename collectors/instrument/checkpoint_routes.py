"""What the Gym checkpoint traffic means: routes, and span attributes read from JSON bodies.

Pure functions over paths and already-decoded JSON values; ``gym_asgi`` does the transport.

Both protocol generations (docs/domain/checkpoint-protocol.md) map onto the draft's operation
spans ``gym.checkpoint.<op>`` so that ``checkpoint_ops`` reads them alike:

- ``/ng-control/v1/checkpoint/{prepare,renew,retire,forget,commit,restore,resume}`` as named;
  the participant kind comes from the middleware's configuration or a reply's ``kind``;
- ``/ng-control/v1/agent-checkpoint/{prepare,commit,restore,resume,retire}`` as named, kind
  ``agent``; ``acknowledge-completed`` is ``gym.checkpoint.acknowledge``;
- ``/ng-control/v1/model-admission/pause`` is the model's prepare (it closes admission and
  waits for the drain), ``abort_inflight`` its retire (it tombstones an attempt), ``resume``
  its resume; kind ``model``;
- every generation's ``status`` is ``gym.checkpoint.status`` (a poll, not an operation, so it
  stays out of ``checkpoint_ops``; its replies carry the readiness, blockers and counters).

Anything else under the control prefix is not recognised and passes unobserved: span names
never come from the wire. The route actually called is kept in ``http.route``.

Everything read from a body is type-checked: a body that is valid JSON but not the protocol's
shape yields fewer attributes, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rolloutscope.vocabulary import (
    Attr,
    CheckpointOp,
    ErrorCode,
    ParticipantKind,
    SpanName,
)

CONTROL_PREFIX = "/ng-control/v1/"
# ROLLOUT_PATH_PREFIX (docs/domain/checkpoint-protocol.md#identity)
ROLLOUT_PREFIX = "/ng-rollout/"
MAX_BLOCKER_KEYS = 100
MAX_DETAIL_CHARS = 512
MAX_ID_CHARS = 256
# every protocol code either generation sends; a data-plane error body with any other code
# (an OpenAI-style {"error":{"code":"context_length_exceeded"}}, say) is not a refusal
PROTOCOL_CODES = frozenset(code.value for code in ErrorCode)
STATUS_OP = "status"
_KINDS = frozenset(kind.value for kind in ParticipantKind)
ACKNOWLEDGE_OP = "acknowledge"


@dataclass(frozen=True, slots=True)
class ControlRoute:
    path: str
    span_name: str
    op: str
    participant_kind: ParticipantKind | None  # fixed by the route in the first generation
    # an operation (visible in checkpoint_ops, open while it runs), not a poll; decided once
    is_operation: bool = field(init=False)
    # ``participant_kind.value``, read once (an enum's ``value`` is a Python-level property)
    kind_value: str | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_operation", self.op not in (STATUS_OP, ACKNOWLEDGE_OP))
        object.__setattr__(self, "kind_value", None if self.participant_kind is None
                           else self.participant_kind.value)


_OP_SPANS = {
    CheckpointOp.PREPARE: SpanName.CK_PREPARE, CheckpointOp.COMMIT: SpanName.CK_COMMIT,
    CheckpointOp.RESTORE: SpanName.CK_RESTORE, CheckpointOp.RESUME: SpanName.CK_RESUME,
    CheckpointOp.RETIRE: SpanName.CK_RETIRE, CheckpointOp.FORGET: SpanName.CK_FORGET,
    CheckpointOp.RENEW: SpanName.CK_RENEW,
}


def _routes() -> dict[str, ControlRoute]:
    table: dict[str, ControlRoute] = {}

    def add(path: str, span: str, op: str, kind: ParticipantKind | None) -> None:
        table[path] = ControlRoute(path, span, op, kind)

    base = CONTROL_PREFIX + "checkpoint/"
    for op, span in _OP_SPANS.items():
        add(base + op.value, span, op.value, None)
    add(base + STATUS_OP, SpanName.CK_STATUS, STATUS_OP, None)

    agent = CONTROL_PREFIX + "agent-checkpoint/"
    for op in (CheckpointOp.PREPARE, CheckpointOp.COMMIT, CheckpointOp.RESTORE,
               CheckpointOp.RESUME, CheckpointOp.RETIRE):
        add(agent + op.value, _OP_SPANS[op], op.value, ParticipantKind.AGENT)
    add(agent + STATUS_OP, SpanName.CK_STATUS, STATUS_OP, ParticipantKind.AGENT)
    add(agent + "acknowledge-completed", SpanName.CK_ACKNOWLEDGE, ACKNOWLEDGE_OP,
        ParticipantKind.AGENT)

    model = CONTROL_PREFIX + "model-admission/"
    add(model + "pause", SpanName.CK_PREPARE, CheckpointOp.PREPARE.value, ParticipantKind.MODEL)
    add(model + "abort_inflight", SpanName.CK_RETIRE, CheckpointOp.RETIRE.value,
        ParticipantKind.MODEL)
    add(model + "resume", SpanName.CK_RESUME, CheckpointOp.RESUME.value, ParticipantKind.MODEL)
    add(model + STATUS_OP, SpanName.CK_STATUS, STATUS_OP, ParticipantKind.MODEL)
    return table


CONTROL_ROUTES: Mapping[str, ControlRoute] = _routes()


def control_route(path: str) -> ControlRoute | None:
    route = CONTROL_ROUTES.get(path)
    if route is None and path.endswith("/"):
        route = CONTROL_ROUTES.get(path.rstrip("/"))
    return route


# -- the data plane --------------------------------------------------------------------------


def rollout_attributes(path: str) -> dict[str, Any] | None:
    """``/ng-rollout/{capture key}/rest`` -> the rollout join keys and the route template.

    The capture key is ``rollout_id`` for attempt 0 and ``{rollout_id}-a{N}`` after; a rollout id
    may not itself end in ``-a<N>``, so the split is unambiguous
    (docs/domain/checkpoint-protocol.md#identity).
    """
    rest = path[len(ROLLOUT_PREFIX):]
    key, _, tail = rest.partition("/")
    if not key or len(key) > MAX_ID_CHARS:
        return None
    rollout_id, attempt = key, 0
    head, sep, suffix = key.rpartition("-a")
    if sep and head and suffix.isdigit():
        rollout_id, attempt = head, int(suffix)
    return {
        Attr.ROLLOUT_ID: key,
        Attr.EPISODE_ROLLOUT_ID: rollout_id,
        Attr.EPISODE_ATTEMPT: attempt,
        Attr.HTTP_ROUTE: ROLLOUT_PREFIX + "{rollout_id}/" + tail,
    }


# -- bodies ----------------------------------------------------------------------------------


def _is_mapping(value: Any) -> bool:
    # what a JSON body decodes to is a dict, and a field it lacks is None: neither answer costs
    # an ABC instance check
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any, limit: int = MAX_ID_CHARS) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    kind = type(value)
    if kind is float or kind is int or (
            isinstance(value, (int, float)) and not isinstance(value, bool)):
        return float(value)
    return None


def protocol_error(body: Any) -> tuple[str, str | None] | None:
    """``{"error": {"code", "detail"}}`` -> (code, detail), if the body is one."""
    if not _is_mapping(body):
        return None
    error = body.get("error")
    if not _is_mapping(error):
        return None
    code = _text(error.get("code"))
    if code is None:
        return None
    return code, _text(error.get("detail"), MAX_DETAIL_CHARS)


def request_attributes(body: Any) -> dict[str, Any]:
    """``CheckpointRequest`` and its kin: the id, the deadline, the scope
    (docs/domain/checkpoint-protocol.md#participants-and-phases)."""
    if type(body) is not dict and not _is_mapping(body):
        return {}
    attrs: dict[str, Any] = {}
    get = body.get
    ck = get("checkpoint_id")
    if isinstance(ck, str) and ck:  # _text, read inline: every request names its checkpoint
        attrs[Attr.CHECKPOINT_ID] = ck[:MAX_ID_CHARS]
    deadline = get("deadline_ts")
    if deadline is not None:
        deadline = deadline if type(deadline) is float else _number(deadline)
        if deadline is not None:
            attrs[Attr.CK_DEADLINE_TS] = deadline
    # most requests name no episodes, rollouts or attempt: one set test says so
    if not body.keys().isdisjoint(_SCOPE_KEYS):
        for key, attr in (("episode_ids", Attr.CK_EPISODES), ("rollout_ids", Attr.CK_ROLLOUTS)):
            value = get(key)
            if isinstance(value, list):
                attrs[attr] = len(value)
        # the first generation's abort_inflight / retire name one attempt
        if "rollout_id" in body:
            rollout = _text(body["rollout_id"])
            attempt = _count(get("attempt_index"))
            if rollout is not None:
                attrs[Attr.EPISODE_ROLLOUT_ID] = rollout
                if attempt is not None:
                    attrs[Attr.EPISODE_ATTEMPT] = attempt
    return attrs


_SCOPE_KEYS = frozenset(("episode_ids", "rollout_ids", "rollout_id"))
_COUNT_KEYS = {
    "inflight": Attr.CK_COUNT_INFLIGHT, "held": Attr.CK_COUNT_HELD, "cut": Attr.CK_COUNT_CUT,
    "cut_failed": Attr.CK_COUNT_CUT_FAILED, "cut_skipped": Attr.CK_COUNT_CUT_SKIPPED,
    "running": Attr.CK_COUNT_RUNNING,
    "parked_with_boundary": Attr.CK_COUNT_PARKED_WITH_BOUNDARY,
    "parked_without_boundary": Attr.CK_COUNT_PARKED_WITHOUT_BOUNDARY,
    "completed_unacknowledged": Attr.CK_COUNT_COMPLETED_UNACKED,
}


def capture_key(item: Any) -> str | None:
    """A blocker as a capture key: already one, or ``{rollout_id, attempt_index}``."""
    if isinstance(item, str):
        return item[:MAX_ID_CHARS] or None
    if _is_mapping(item):
        rollout = _text(item.get("rollout_id"))
        attempt = _count(item.get("attempt_index", item.get("attempt")))
        if rollout is None:
            return None
        return rollout if not attempt else f"{rollout}-a{attempt}"
    return None


def _blockers(attrs: dict[str, Any], items: Any, total: Any) -> None:
    if isinstance(items, list):
        keys = [k for k in map(capture_key, items[:MAX_BLOCKER_KEYS]) if k is not None]
        attrs[Attr.CK_BLOCKERS] = len(items)
        attrs[Attr.CK_BLOCKER_KEYS] = tuple(keys)
    count = _count(total)
    if count is not None:
        attrs[Attr.CK_BLOCKER_COUNT] = count
    elif isinstance(items, list):
        attrs[Attr.CK_BLOCKER_COUNT] = len(items)


def _counts(attrs: dict[str, Any], counts: Any) -> None:
    # most replies carry none of the counter keys at this level: one set test says so
    if _is_mapping(counts) and not counts.keys().isdisjoint(_COUNT_KEYS):
        for key, attr in _COUNT_KEYS.items():
            value = _count(counts.get(key))
            if value is not None:
                attrs[attr] = value


def _kind(value: Any) -> str | None:
    kind = _text(value)
    return kind if kind in _KINDS else None


# The top-level fields of a reply that map one-to-one onto an attribute, in attribute order;
# of two fields for one attribute the first one present and valid wins (``phase``, then the
# first generation's ``state``). Only the keys a body has are read.
_REPLY_FIELDS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("kind", Attr.CK_PARTICIPANT_KIND, _kind),
    ("instance", Attr.CK_INSTANCE, _text),
    ("phase", Attr.CK_PHASE, _text),
    ("state", Attr.CK_PHASE, _text),
    ("checkpoint_id", Attr.CHECKPOINT_ID, _text),
    ("lease_expires_at", Attr.CK_LEASE_EXPIRES_AT, _number),
    ("records", Attr.CK_RECORDS, _count),
    ("bytes", Attr.CK_BYTES, _count),
)


def reply_attributes(body: Any) -> dict[str, Any]:
    """A reply of either generation -> phase, readiness, blockers, counters, identity.

    Second generation: ``{kind, instance, phase, checkpoint_id, lease_expires_at,
    report: {ready, blockers, blocker_count, counts}}``. First generation (agent status):
    ``{state, ready_to_commit, running, parked_*, completed_unacknowledged,
    blocking_attempts[]}`` at the top level.
    """
    if type(body) is not dict and not _is_mapping(body):
        return {}
    attrs: dict[str, Any] = {}
    keys = body.keys()
    fields = keys & _REPLY_KEYS  # read in the order of _REPLY_FIELDS, only those it has
    if fields:
        for key in sorted(fields, key=_REPLY_ORDER.__getitem__) if len(fields) > 1 else fields:
            attr, read = _REPLY_FIELD[key]
            if attr not in attrs:
                value = read(body[key])
                if value is not None:
                    attrs[attr] = value
    if keys.isdisjoint(_NESTED_KEYS):  # most replies: no report, readiness, blockers, counters
        return attrs
    report = body.get("report")
    if _is_mapping(report):
        ready = report.get("ready")
        if ready is True or ready is False:
            attrs[Attr.CK_READY] = ready
        _blockers(attrs, report.get("blockers"), report.get("blocker_count"))
        _counts(attrs, report.get("counts"))
    ready = body.get("ready_to_commit")
    if ready is True or ready is False:
        attrs[Attr.CK_READY] = ready
    if "blocking_attempts" in body:
        _blockers(attrs, body.get("blocking_attempts"), None)
    _counts(attrs, body)
    return attrs


_REPLY_KEYS = frozenset(key for key, _, _ in _REPLY_FIELDS)
_REPLY_FIELD = {key: (attr, read) for key, attr, read in _REPLY_FIELDS}  # one entry per key
_REPLY_ORDER = {key: at for at, (key, _, _) in enumerate(_REPLY_FIELDS)}
# what the rest of ``reply_attributes`` reads at the top level of a reply
_NESTED_KEYS = frozenset(("report", "ready_to_commit", "blocking_attempts", *_COUNT_KEYS))


def acknowledged_receipts(body: Any) -> list[dict[str, Any]]:
    """``{"schema_version": 1, "executions": [AgentCompletionReceipt...]}`` -> one attribute
    set per receipt, for ``gym.agent.acknowledged`` events
    (docs/domain/checkpoint-protocol.md#the-first-generation)."""
    if not _is_mapping(body) or not isinstance(body.get("executions"), list):
        return []
    receipts = []
    for receipt in body["executions"]:
        key = capture_key(receipt) if _is_mapping(receipt) else None
        if key is None:
            continue
        attempt = _count(receipt.get("attempt_index")) or 0
        attrs: dict[str, Any] = {Attr.ROLLOUT_ID: key,
                                 Attr.EPISODE_ROLLOUT_ID: receipt["rollout_id"][:MAX_ID_CHARS],
                                 Attr.EPISODE_ATTEMPT: attempt}
        generation = _count(receipt.get("execution_generation"))
        if generation is not None:
            attrs[Attr.EXECUTION_GENERATION] = generation
        result_id = _text(receipt.get("result_id"))
        if result_id is not None:
            attrs[Attr.RESULT_ID] = result_id
        receipts.append(attrs)
    return receipts
