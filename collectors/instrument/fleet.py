"""Generation fleet health, observed from outside (docs/domain/fleet-health.md).

``ObservedFleetHealth`` wraps any object with the public API of NeMo-RL's
``GenerationFleetHealth`` — ``record_probe``, ``report_failure``, ``report_success``,
``mark_restarting``, ``mark_loaded``, ``report_refit``, ``retire``, ``snapshot``,
``serving_shards``, ``membership_epoch`` — without subclassing or editing it, and turns what the
fleet does into spans:

- each stay of a shard in one state is an ``rl.gen_fleet.shard_state`` span, started with an
  open marker (so live views show the current state) and ended at the next transition;
- each transition is an ``rl.gen_fleet.transition`` event (trigger, streaks, epoch, last error);
- each probe result is an ``rl.gen_fleet.probe`` event, each reported failure an
  ``rl.gen_fleet.reported_failure`` event.

The real class has no observer hook, so changes are found by diffing states. The rule: one
read per mutating call, after the call, compared with the states seen after the previous call.
When every mutation goes through the wrapper (the controller keeps only the wrapper), that is
exactly a before/after diff at half the cost; ``exclusive=False`` also reads a ``snapshot()``
before each call, so changes made behind the wrapper's back are recorded too, with the trigger
read from the edge. Readers (``snapshot``, ``serving_shards``, ``membership_epoch`` and anything
else) pass straight through.

The read after a call is of the one shard the call names, when the fleet offers a one-shard read
(``_FleetReader``): every mutator of the API takes the shard index first and changes only that
shard (docs/domain/fleet-health.md#transitions), so a call that leaves its shard's state alone
has moved nothing, and a whole ``snapshot()`` (one record copied per shard) is read only when it
has moved. A call whose index is not a known shard, and a fleet without a one-shard read, read
the whole snapshot as before.

Events go on a short span, never on the long state spans: a shard can stay healthy for days
and OTel keeps 128 events per span. Probes made inside ``with fleet.probe_tick():`` share one
``rl.gen_fleet.probe_tick`` span; any other call that has something to record gets a
zero-length ``rl.gen_fleet.call`` span. State spans are roots: a stay outlives whatever span
was current when it began.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Tracer

from rolloutscope.collectors.instrument.guard import InstrumentFailures
from rolloutscope.collectors.instrument.markers import emit_open_marker
from rolloutscope.vocabulary import (
    Attr,
    EventName,
    ShardState,
    ShardTrigger,
    SpanName,
)

TRACER_NAME = "rolloutscope.instrument.fleet"
# the mutators of the real API; everything else is a reader and passes through untouched
MUTATORS = ("record_probe", "report_failure", "report_success", "mark_restarting",
            "mark_loaded", "report_refit", "retire")
_ROOT = Context()  # an empty context: state spans start their own trace
# the mutators whose every call is itself an event (a probe result, a reported failure)
_OBSERVATIONS = frozenset({"record_probe", "report_failure"})
# how the real API and its look-alikes name the shard index argument
_IDX_NAMES = ("idx", "dp_shard_idx", "shard", "shard_idx")
_OP_TRIGGER = {
    "mark_restarting": ShardTrigger.RESTART, "mark_loaded": ShardTrigger.LOADED,
    "report_refit": ShardTrigger.REFIT, "retire": ShardTrigger.RETIRE,
    "report_failure": ShardTrigger.REPORTED_FAILURE,
}
# ShardHealth field names of the real record, and the keys the span attributes use
_STREAKS = (("consecutive_probe_failures", Attr.FLEET_PROBE_FAILURES),
            ("consecutive_reported_failures", Attr.FLEET_REPORTED_FAILURES),
            ("restart_attempts", Attr.FLEET_RESTART_ATTEMPTS))


def _value(state: Any) -> str:
    """A state as its wire string, whether the class uses an Enum or plain strings."""
    return str(getattr(state, "value", state))


def _argument(args: tuple, kwargs: Mapping[str, Any], position: int,
              names: tuple[str, ...]) -> Any:
    if len(args) > position:
        return args[position]
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return None


def _describe(error: Any) -> str | None:
    """The controller's own ``last_error`` spelling: ``"{ExcType}: {msg}"``."""
    if error is None or isinstance(error, str):
        return error
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)


class _FleetReader:
    """Everything the wrapper reads from the fleet object, in one place.

    ``read()`` is the whole fleet (``snapshot()`` and its shard records), ``field`` one field
    of a record, ``epoch`` the membership epoch, and, where ``one_shard`` is true, ``row_of`` /
    ``state_of`` one shard's record or state without copying the others. A fleet class that
    spells these differently (a ``state_of(idx)`` method, say) needs only another reader.

    Snapshots accepted: an object with ``.shards`` (the project's ``FleetSnapshot``), a mapping
    with a ``"shards"`` key, a mapping of shard index -> shard, or a plain sequence of shards;
    each shard an object with ``ShardHealth``'s attribute names or a mapping with those keys.
    The one-shard read is a ``shard(idx)`` accessor, trusted only if, on the snapshot read at
    wrap time, every shard sits at its own index and ``shard(idx)`` returns a record of the
    snapshot's shape with the snapshot's state.
    """

    __slots__ = ("_fleet", "rows", "field", "_epoch", "_shard", "one_shard")

    def __init__(self, fleet: Any, snapshot: Any) -> None:
        self._fleet = fleet
        if hasattr(snapshot, "shards"):
            self.rows: Callable[[Any], Sequence[Any]] = lambda s: s.shards
        elif isinstance(snapshot, Mapping) and "shards" in snapshot:
            self.rows = lambda s: s["shards"]
        elif isinstance(snapshot, Mapping):
            self.rows = lambda s: [s[k] for k in sorted(s)]
        else:
            self.rows = lambda s: s
        rows = self.rows(snapshot)
        keyed = bool(rows) and isinstance(rows[0], Mapping)
        self.field: Callable[[Any, str], Any] = (
            (lambda row, name: row.get(name)) if keyed
            else (lambda row, name: getattr(row, name, None)))
        if hasattr(snapshot, "membership_epoch"):
            self._epoch: Callable[[Any], Any] | None = lambda s: s.membership_epoch
        elif isinstance(snapshot, Mapping) and "membership_epoch" in snapshot:
            self._epoch = lambda s: s["membership_epoch"]
        else:
            self._epoch = None
        self._shard: Callable[[int], Any] | None = None
        self.one_shard = False
        accessor = getattr(fleet, "shard", None)
        if callable(accessor) and rows:
            self._shard = accessor
            try:
                self.one_shard = all(self._agrees(position, row, keyed)
                                     for position, row in enumerate(rows))
            except Exception:  # noqa: BLE001 - an accessor we cannot trust is not used
                self.one_shard = False
            if not self.one_shard:
                self._shard = None

    def _agrees(self, position: int, row: Any, keyed: bool) -> bool:
        field = self.field
        one = self._shard(position)
        return (field(row, "dp_shard_idx") == position
                and isinstance(one, Mapping) == keyed
                and field(one, "dp_shard_idx") == position
                and field(one, "state") == field(row, "state"))

    def read(self) -> tuple[Any, Sequence[Any]]:
        """The whole fleet: the snapshot and its shard records, in position order."""
        snapshot = self._fleet.snapshot()
        return snapshot, self.rows(snapshot)

    def row_of(self, idx: int) -> Any:
        """One shard's record, as the snapshot would hold it; only where ``one_shard``."""
        return self._shard(idx)

    def state_of(self, idx: int) -> Any:
        """One shard's state; only where ``one_shard``."""
        return self.field(self._shard(idx), "state")

    def epoch(self, snapshot: Any) -> Any:
        if self._epoch is not None:
            return self._epoch(snapshot)
        epoch = getattr(self._fleet, "membership_epoch", None)
        return epoch() if callable(epoch) else epoch


class ObservedFleetHealth:
    """A fleet-health object that records its state changes as spans; see the module rule."""

    __slots__ = ("_fleet", "_tracer", "_exclusive", "_time_ns", "_attributes", "_reader",
                 "_states", "_spans", "_tick", "failures")

    def __init__(self, fleet: Any, *, tracer: Tracer | None = None, exclusive: bool = True,
                 attributes: Mapping[str, Any] | None = None,
                 time_ns: Callable[[], int] = time.time_ns) -> None:
        self._fleet = fleet
        self._tracer = tracer if tracer is not None else trace.get_tracer(TRACER_NAME)
        self._exclusive = exclusive
        self._time_ns = time_ns
        self._attributes = dict(attributes or {})
        self._reader: _FleetReader | None = None
        self._states: tuple[Any, ...] = ()
        self._spans: list[Span] = []
        self._tick: Span | None = None
        self.failures = InstrumentFailures("fleet-health wrapper")
        try:
            self._begin()
        except Exception as exc:  # noqa: BLE001 - never raise into the observed process
            self.failures.record(exc)

    @property
    def wrapped(self) -> Any:
        """The fleet-health object itself."""
        return self._fleet

    def __getattr__(self, name: str) -> Any:
        # readers (snapshot, serving_shards, membership_epoch, shard, config, ...) pass through
        return getattr(self._fleet, name)

    # -- the mutators of the real API -----------------------------------------------------------

    def record_probe(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("record_probe", args, kwargs)

    def report_failure(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("report_failure", args, kwargs)

    def report_success(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("report_success", args, kwargs)

    def mark_restarting(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("mark_restarting", args, kwargs)

    def mark_loaded(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("mark_loaded", args, kwargs)

    def report_refit(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("report_refit", args, kwargs)

    def retire(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("retire", args, kwargs)

    @contextmanager
    def probe_tick(self) -> Iterator[None]:
        """Group one probe round's events under one ``rl.gen_fleet.probe_tick`` span."""
        if self._tick is not None:  # nested: the outer tick already collects
            yield
            return
        try:
            self._tick = self._tracer.start_span(SpanName.FLEET_PROBE_TICK,
                                                 attributes=self._attributes,
                                                 start_time=self._time_ns())
        except Exception as exc:  # noqa: BLE001
            self.failures.record(exc)
        try:
            yield
        finally:
            tick, self._tick = self._tick, None
            if tick is not None:
                try:
                    tick.end(end_time=self._time_ns())
                except Exception as exc:  # noqa: BLE001
                    self.failures.record(exc)

    # -- internals ------------------------------------------------------------------------------

    def _call(self, op: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        method = getattr(self._fleet, op)
        if not self._exclusive:
            self._observe(None, args, kwargs)
        try:
            return method(*args, **kwargs)  # its own exceptions reach the caller unchanged
        finally:
            self._observe(op, args, kwargs)

    def _begin(self) -> None:
        snapshot = self._fleet.snapshot()
        reader = _FleetReader(self._fleet, snapshot)
        self._transitions(snapshot, reader.rows(snapshot), reader, "initial", (), {}, None, 0)
        self._reader = reader

    def _observe(self, op: str | None, args: tuple, kwargs: dict[str, Any]) -> None:
        try:
            reader = self._reader
            if reader is None:
                self._begin()
                return
            if op is not None and reader.one_shard:
                idx = args[0] if args else _argument(args, kwargs, 0, _IDX_NAMES)
                if type(idx) is int and 0 <= idx < len(self._states):
                    self._observe_one(reader, idx, op, args, kwargs)
                    return
            self._observe_all(reader, op, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - never raise into the observed process
            self.failures.record(exc)

    def _observe_one(self, reader: _FleetReader, idx: int, op: str, args: tuple,
                     kwargs: dict[str, Any]) -> None:
        """After a call on shard ``idx``: read that shard alone, and the whole fleet only if
        its state moved (the call changed nothing else; see the module rule)."""
        carrier: Span | None = None
        now = 0
        if op in _OBSERVATIONS:
            row = reader.row_of(idx)
            state = reader.field(row, "state")
            now = self._time_ns()
            carrier = self._carrier(op, idx, now)
            carrier.add_event(*self._observation(reader, op, idx, row, args, kwargs),
                              timestamp=now)
        else:
            state = reader.state_of(idx)
        if state == self._states[idx]:  # the hot path: nothing moved
            if carrier is not None and carrier is not self._tick:
                carrier.end(end_time=now)
            return
        snapshot, rows = reader.read()
        self._transitions(snapshot, rows, reader, op, args, kwargs, carrier, now)

    def _observe_all(self, reader: _FleetReader, op: str | None, args: tuple,
                     kwargs: dict[str, Any]) -> None:
        """Read the whole fleet: the observation's event, then every state that moved."""
        snapshot, rows = reader.read()
        carrier: Span | None = None
        now = 0
        if op in _OBSERVATIONS:
            idx = _argument(args, kwargs, 0, _IDX_NAMES)
            row = self._row_for(reader, rows, idx)
            if row is not None:
                now = self._time_ns()
                carrier = self._carrier(op, idx, now)
                carrier.add_event(*self._observation(reader, op, idx, row, args, kwargs),
                                  timestamp=now)
        self._transitions(snapshot, rows, reader, op, args, kwargs, carrier, now)

    def _transitions(self, snapshot: Any, rows: Sequence[Any], reader: _FleetReader,
                     op: str | None, args: tuple, kwargs: dict[str, Any],
                     carrier: Span | None, now: int) -> None:
        """Diff the states in ``rows`` against the last seen: end and open stays, and put a
        transition event on ``carrier`` (made here if the observation made none)."""
        field = reader.field
        states = tuple(field(row, "state") for row in rows)
        if states == self._states:
            if carrier is not None and carrier is not self._tick:
                carrier.end(end_time=now)
            return
        if not now:
            now = self._time_ns()
        epoch = reader.epoch(snapshot)
        ok = bool(_argument(args, kwargs, 1, ("ok",))) if op == "record_probe" else None
        for position, state in enumerate(states):
            previous = self._states[position] if position < len(self._states) else None
            if previous is not None and state == previous:
                continue
            row = rows[position]
            idx = field(row, "dp_shard_idx")
            idx = position if idx is None else idx
            trigger = (ShardTrigger.INITIAL if previous is None
                       else _trigger(op, ok, previous, state, row, field))
            attrs = self._state_attributes(field, idx, row, state, previous, trigger, epoch)
            if previous is not None:
                if carrier is None:
                    carrier = self._carrier(op or "unobserved", idx, now)
                carrier.add_event(EventName.FLEET_TRANSITION, attrs, timestamp=now)
                self._spans[position].end(end_time=now)
            span = self._tracer.start_span(SpanName.SHARD_STATE, context=_ROOT,
                                           attributes=attrs, start_time=now)
            if span.is_recording():  # a sampled-out or no-op span has nothing to show
                emit_open_marker(self._tracer, span)
            if position < len(self._spans):
                self._spans[position] = span
            else:
                self._spans.append(span)
        self._states = states
        if carrier is not None and carrier is not self._tick:
            carrier.end(end_time=now)

    def _carrier(self, op: str, idx: Any, now: int) -> Span:
        """The span an observation's events go on: the open probe tick, or a call span."""
        if self._tick is not None:
            return self._tick
        attrs = dict(self._attributes)
        attrs[Attr.FLEET_OPERATION] = op
        if isinstance(idx, int):
            attrs[Attr.SHARD_IDX] = idx
        return self._tracer.start_span(SpanName.FLEET_CALL, attributes=attrs, start_time=now)

    @staticmethod
    def _row_for(reader: _FleetReader, rows: Sequence[Any], idx: Any) -> Any:
        if not isinstance(idx, int) or not 0 <= idx < len(rows):
            return None
        row = rows[idx]
        at = reader.field(row, "dp_shard_idx")
        if at is None or at == idx:
            return row
        return next((r for r in rows if reader.field(r, "dp_shard_idx") == idx), None)

    @staticmethod
    def _observation(reader: _FleetReader, op: str, idx: int, row: Any, args: tuple,
                     kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        field = reader.field
        attrs: dict[str, Any] = {Attr.SHARD_IDX: idx}
        url = field(row, "base_url")
        if url is not None:
            attrs[Attr.BACKEND_URL] = url
        attrs[Attr.FLEET_STATE] = _value(field(row, "state"))
        for name, key in _STREAKS:
            value = field(row, name)
            if value is not None:
                attrs[key] = value
        if op == "record_probe":
            attrs[Attr.PROBE_OK] = bool(_argument(args, kwargs, 1, ("ok",)))
            error = _describe(_argument(args, kwargs, 2, ("error",)))
            if error is not None:
                attrs[Attr.PROBE_ERROR] = error
            return EventName.FLEET_PROBE, attrs
        error = _describe(_argument(args, kwargs, 1, ("error",)))
        if error is not None:
            attrs[Attr.FLEET_LAST_ERROR] = error
        return EventName.FLEET_REPORTED_FAILURE, attrs

    def _state_attributes(self, field: Callable[[Any, str], Any], idx: Any, row: Any,
                          state: Any, previous: Any, trigger: ShardTrigger,
                          epoch: Any) -> dict[str, Any]:
        attrs = dict(self._attributes)
        attrs[Attr.SHARD_IDX] = idx
        url = field(row, "base_url")
        if url is not None:
            attrs[Attr.BACKEND_URL] = url
        attrs[Attr.FLEET_STATE] = _value(state)
        if previous is not None:
            attrs[Attr.FLEET_PREVIOUS_STATE] = _value(previous)
        attrs[Attr.FLEET_TRIGGER] = trigger.value
        if epoch is not None:
            attrs[Attr.FLEET_MEMBERSHIP_EPOCH] = int(epoch)
        weight_version = field(row, "weight_version")
        if weight_version is not None:
            attrs[Attr.FLEET_WEIGHT_VERSION] = weight_version
        for name, key in _STREAKS:
            value = field(row, name)
            if value is not None:
                attrs[key] = value
        last_error = field(row, "last_error")
        if last_error is not None:
            attrs[Attr.FLEET_LAST_ERROR] = str(last_error)
        return attrs


def _trigger(op: str | None, ok: bool | None, previous: Any, state: Any, row: Any,
             field: Callable[[Any, str], Any]) -> ShardTrigger:
    """What moved a shard: the call that did it, or, for a change made behind the wrapper's
    back, the edge itself (docs/domain/fleet-health.md#transitions)."""
    to = _value(state)
    if to == ShardState.RETIRED:
        return ShardTrigger.RETIRE  # retire(), or mark_restarting past the restart budget
    if op == "record_probe":
        return ShardTrigger.PROBE_SUCCESS if ok else ShardTrigger.PROBE_FAILURE
    if op in _OP_TRIGGER:
        return _OP_TRIGGER[op]
    if to == ShardState.RESTARTING:
        return ShardTrigger.RESTART
    if to == ShardState.STALE:
        return ShardTrigger.LOADED
    if to == ShardState.HEALTHY:
        return (ShardTrigger.PROBE_SUCCESS if _value(previous) == ShardState.SUSPECT
                else ShardTrigger.REFIT)
    probes = field(row, "consecutive_probe_failures") or 0
    reported = field(row, "consecutive_reported_failures") or 0
    return ShardTrigger.REPORTED_FAILURE if reported > probes else ShardTrigger.PROBE_FAILURE


def observe_fleet_health(fleet: Any, **kwargs: Any) -> ObservedFleetHealth:
    """Wrap ``fleet``; keyword arguments as ``ObservedFleetHealth``."""
    return ObservedFleetHealth(fleet, **kwargs)
