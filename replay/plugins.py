"""Pluggable participants: replay a user's real implementation in place of a reference model.

Each participant kind has a documented ``Protocol`` below: the methods the replay engine calls,
with the reference model's meaning. A plug-in is a *factory*: a callable the engine calls with
the reference constructor's keyword arguments (it receives only those its signature names, or
all of them with ``**kwargs``) and that returns an object with the protocol's members. The
object is checked when it is built; a missing member is a ``ProtocolMismatchError`` naming
every one that is missing.

Factories are found two ways:

- ``--participant KIND=module:factory`` (``ParticipantSpec.parse``), and
- the entry-point group ``rolloutscope.participants``: an entry named ``KIND.NAME`` whose value
  is ``module:factory`` is selected with ``--participant KIND=NAME``.

Fleet health is adapted, not merely checked: ``FleetHealthAdapter`` takes an object with only
the real ``GenerationFleetHealth`` public API (docs/domain/fleet-health.md; no observer hook, no
snapshot) and gives the engine the reference model's surface, recovering each state change by
reading the shards before and after every call. A real class replays unchanged.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import entry_points
from typing import Any, Protocol

from rolloutscope.vocabulary import ShardState, ShardTrigger
from rolloutscope.replay.errors import ReplayError
from rolloutscope.replay.participants.fleet_health import (
    FleetSnapshot,
    GenerationFleetExhausted,
    ShardHealth,
    Transition,
)

ENTRY_POINT_GROUP = "rolloutscope.participants"
Factory = Callable[..., Any]


class PluginKind(StrEnum):
    CHECKPOINT_PARTICIPANT = "checkpoint_participant"
    DEADLINE_REGISTRY = "deadline_registry"
    FLEET_HEALTH = "fleet_health"
    ROUTER = "router"


# -- errors -------------------------------------------------------------------------------------
class PluginError(ReplayError):
    """A participant plug-in that cannot be used; always the user's input, never a bug here."""


class UnknownPluginKindError(PluginError):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(f"unknown participant kind {kind!r}; known: "
                         f"{', '.join(k.value for k in PluginKind)}")


class PluginLoadError(PluginError):
    def __init__(self, ref: str, detail: str) -> None:
        self.ref = ref
        super().__init__(f"cannot load participant factory {ref!r}: {detail}")


class ProtocolMismatchError(PluginError):
    """The plugged object lacks members of its kind's protocol."""

    def __init__(self, kind: PluginKind, obj: Any, missing: Sequence[str]) -> None:
        self.kind = kind
        self.missing = tuple(missing)
        super().__init__(f"{kind.value} participant {type(obj).__name__} lacks "
                         f"{', '.join(self.missing)} (the {kind.value} protocol needs "
                         f"{', '.join(protocol_members(kind))})")


# -- the protocols ------------------------------------------------------------------------------
class CheckpointParticipant(Protocol):
    """A Gym checkpoint participant (docs/domain/checkpoint-protocol.md): one phase machine per
    server.

    Every operation answers with a reply carrying ``ok`` and, on refusal, an error ``code``;
    a refusal is data, never an exception. ``drain_notes`` hands over what happened since the
    last call (admission closed/opened, phase changes, lease expiry) for the engine to record.
    """

    kind: Any
    instance: str
    phase: Any
    lease_expires_at: float | None

    def prepare(self, checkpoint_id: str, deadline_ts: float) -> Any: ...
    def poll_ready(self) -> bool: ...
    def commit(self, checkpoint_id: str, deadline_ts: float) -> Any: ...
    def restore(self, checkpoint_id: str, deadline_ts: float, episodes: Any) -> Any: ...
    def resume(self, checkpoint_id: str) -> Any: ...
    def renew(self, checkpoint_id: str, deadline_ts: float) -> Any: ...
    def retire(self, episodes: Iterable[Any]) -> Any: ...
    def forget(self, rollout_ids: Iterable[str]) -> Any: ...
    def report(self) -> Any: ...
    def is_ready(self) -> bool: ...
    def tick(self) -> bool: ...
    def drain_notes(self) -> list[Any]: ...


class DeadlineRegistry(Protocol):
    """``RequestDeadlineRegistry``: live rollout deadlines and their holders
    (docs/domain/rollouts-and-deadlines.md#the-deadline-registry).

    ``add`` returns a deadline exposing ``key``, ``budget_s``, ``outcome``, ``suspended_s``,
    ``remaining_s(now)`` and ``due_at()`` (None while suspended); ``suspend``/``resume`` return
    the change (``holder``, ``holders_count``, ``changed`` deadlines). A suspended deadline
    must never fire.
    """

    @property
    def suspended(self) -> bool: ...
    @property
    def holders_count(self) -> int: ...
    def live(self) -> tuple[Any, ...]: ...
    def add(self, key: Hashable, *, kind: Any, budget_s: float) -> Any: ...
    def complete(self, key: Hashable) -> Any: ...
    def cancel(self, key: Hashable) -> Any: ...
    def fire(self, key: Hashable) -> Any: ...
    def suspend(self, holder: Any) -> Any: ...
    def resume(self, holder: Any) -> Any: ...


class FleetHealth(Protocol):
    """``GenerationFleetHealth``'s public API (docs/domain/fleet-health.md), names unchanged.

    ``shard(idx)`` returns a record with the ``ShardHealth`` fields (``state`` may be the
    implementation's own enum: its value is read). Nothing else is required: transitions, the
    snapshot and the serving URLs are derived by ``FleetHealthAdapter``.
    """

    @property
    def membership_epoch(self) -> int: ...
    def record_probe(self, idx: int, ok: bool, error: Any = None) -> None: ...
    def report_failure(self, idx: int, error: Any = None) -> None: ...
    def report_success(self, idx: int) -> None: ...
    def mark_restarting(self, idx: int) -> None: ...
    def mark_loaded(self, idx: int) -> None: ...
    def report_refit(self, idx: int, weight_version: int) -> None: ...
    def retire(self, idx: int, reason: str) -> None: ...
    def raise_if_exhausted(self) -> None: ...
    def shard_for_base_url(self, url: str) -> int | None: ...
    def serving_shards(self) -> Sequence[int]: ...
    def shard(self, idx: int) -> Any: ...


class Router(Protocol):
    """``GenerationRouterImpl`` as the replay drives it (docs/domain/fleet-health.md#router):
    ``route`` picks a backend or answers at once; ``complete`` gives the status Gym sees."""

    def route(self) -> Any: ...
    def complete(self, backend: str, *, ok: bool, error: BaseException | None = None) -> Any: ...
    def set_serving_backends(self, urls: Iterable[str]) -> tuple[str, ...]: ...
    def drain_failures(self) -> dict[str, int]: ...
    def serving_backends(self) -> tuple[str, ...]: ...
    def metrics(self) -> Any: ...
    def outstanding(self, backend: str) -> int: ...


PROTOCOLS: dict[PluginKind, type] = {
    PluginKind.CHECKPOINT_PARTICIPANT: CheckpointParticipant,
    PluginKind.DEADLINE_REGISTRY: DeadlineRegistry,
    PluginKind.FLEET_HEALTH: FleetHealth,
    PluginKind.ROUTER: Router,
}


def protocol_members(kind: PluginKind) -> tuple[str, ...]:
    proto = PROTOCOLS[kind]
    names = [n for n in vars(proto) if not n.startswith("_")]
    names += [n for n in getattr(proto, "__annotations__", {}) if n not in names]
    return tuple(names)


def plugin_kind(kind: str | PluginKind) -> PluginKind:
    try:
        return PluginKind(kind)
    except ValueError:
        raise UnknownPluginKindError(str(kind)) from None


def validate(kind: str | PluginKind, obj: Any) -> Any:
    """``obj`` if it has every member of ``kind``'s protocol (methods callable)."""
    kind = plugin_kind(kind)
    proto = PROTOCOLS[kind]
    missing = []
    for name in protocol_members(kind):
        declared = vars(proto).get(name)
        if not hasattr(obj, name):
            missing.append(name)
        elif inspect.isfunction(declared) and not callable(getattr(obj, name)):
            missing.append(name)
    if missing:
        raise ProtocolMismatchError(kind, obj, missing)
    return obj


# -- finding factories --------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ParticipantSpec:
    kind: PluginKind
    ref: str  # module:factory, or the NAME of an entry point KIND.NAME

    @classmethod
    def parse(cls, text: str) -> ParticipantSpec:
        kind, sep, ref = text.partition("=")
        if not sep or not kind.strip() or not ref.strip():
            raise PluginError(f"--participant {text!r}: expected KIND=module:factory or "
                              f"KIND=NAME (an entry point {ENTRY_POINT_GROUP} KIND.NAME)")
        return cls(kind=plugin_kind(kind.strip()), ref=ref.strip())


def discover() -> dict[str, str]:
    """Installed participant entry points: ``KIND.NAME`` -> ``module:factory``."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_factory(ref: str) -> Factory:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise PluginLoadError(ref, "expected module:factory")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginLoadError(ref, f"no module {module_name!r} ({exc})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginLoadError(ref, f"{module_name} has no {attr!r}") from None
    if not callable(obj):
        raise PluginLoadError(ref, f"{attr} is a {type(obj).__name__}, not a callable")
    return obj


def resolve_factory(spec: ParticipantSpec) -> Factory:
    if ":" in spec.ref:
        return load_factory(spec.ref)
    name = f"{spec.kind.value}.{spec.ref}"
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = ", ".join(sorted(discover())) or "none installed"
        raise PluginLoadError(spec.ref, f"no entry point {name!r} in group "
                              f"{ENTRY_POINT_GROUP} (installed: {known})")
    try:
        factory = found[0].load()
    except Exception as exc:  # an installed plug-in that fails to import is the user's
        raise PluginLoadError(found[0].value, f"{type(exc).__name__}: {exc}") from None
    if not callable(factory):
        raise PluginLoadError(found[0].value, "not a callable")
    return factory


def call_with_accepted(factory: Factory, kwargs: Mapping[str, Any]) -> Any:
    """Call ``factory`` with the keyword arguments its signature names (all with **kwargs)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return factory(**kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return factory(**kwargs)
    names = {p.name for p in params
             if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    return factory(**{k: v for k, v in kwargs.items() if k in names})


def engine_factory(kind: str | PluginKind, factory: Factory) -> Factory:
    """The factory the engine calls: builds the plug-in, checks it, adapts fleet health."""
    kind = plugin_kind(kind)

    def build(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and dataclasses.is_dataclass(args[0]) and not kwargs:
            # the engine hands some kinds one spec record (FleetHealthSpec, RouterSpec)
            kwargs = {f.name: getattr(args[0], f.name) for f in dataclasses.fields(args[0])}
        elif args:
            raise PluginError(f"the engine called the {kind.value} factory with positional "
                              f"arguments this adapter does not know: {args!r}")
        if kind is PluginKind.FLEET_HEALTH:
            inner = validate(kind, call_with_accepted(
                factory, {k: v for k, v in kwargs.items() if k != "observer"}))
            return FleetHealthAdapter(inner, num_shards=kwargs["num_shards"],
                                      clock=kwargs["clock"], config=kwargs.get("config"),
                                      observer=kwargs.get("observer"))
        return validate(kind, call_with_accepted(factory, kwargs))

    build.__name__ = f"{kind.value}_from_{getattr(factory, '__name__', 'factory')}"
    build.__qualname__ = build.__name__
    return build


def participant_factories(specs: Iterable[ParticipantSpec | str]) -> dict[str, Factory]:
    """Engine factories keyed by kind, for ``replay_into_store(participants=...)``."""
    out: dict[str, Factory] = {}
    for spec in specs:
        if isinstance(spec, str):
            spec = ParticipantSpec.parse(spec)
        if spec.kind.value in out:
            raise PluginError(f"two --participant options for {spec.kind.value}")
        out[spec.kind.value] = engine_factory(spec.kind, resolve_factory(spec))
    return out


# -- the fleet health adapter -------------------------------------------------------------------
_TRIGGERS = {"record_probe_ok": ShardTrigger.PROBE_SUCCESS,
             "record_probe_failed": ShardTrigger.PROBE_FAILURE,
             "report_failure": ShardTrigger.REPORTED_FAILURE,
             "report_success": ShardTrigger.PROBE_SUCCESS,
             "mark_restarting": ShardTrigger.RESTART, "mark_loaded": ShardTrigger.LOADED,
             "report_refit": ShardTrigger.REFIT, "retire": ShardTrigger.RETIRE}


def _state(value: Any) -> ShardState:
    return ShardState(getattr(value, "value", value))


class FleetHealthAdapter:
    """The reference ``GenerationFleetHealth`` surface over an object with only the real API.

    Each mutating call reads every shard's state before and after and tells the observer of
    each change as a ``Transition``, the trigger named by the call (a shard leaving a restart
    budget is ``retire``). The object itself is never given the observer or the engine's types.
    """

    def __init__(self, inner: Any, *, num_shards: int, clock: Callable[[], float],
                 config: Any = None,
                 observer: Callable[[Transition], None] | None = None) -> None:
        self.inner = inner
        self._n = num_shards
        self._clock = clock
        self._config = config
        self._observer = observer
        for idx in range(num_shards):
            self._notify(idx, None, self.shard(idx), ShardTrigger.INITIAL)

    # readers
    @property
    def config(self) -> Any:
        return self._config

    @property
    def membership_epoch(self) -> int:
        epoch = self.inner.membership_epoch
        return int(epoch() if callable(epoch) else epoch)

    def shard(self, idx: int) -> ShardHealth:
        s = self.inner.shard(idx)
        get = lambda name, default=None: getattr(s, name, default)  # noqa: E731
        return ShardHealth(idx, get("base_url"), _state(s.state),
                           int(get("consecutive_probe_failures", 0)),
                           int(get("consecutive_probe_successes", 0)),
                           int(get("consecutive_reported_failures", 0)),
                           int(get("restart_attempts", 0)), get("weight_version"),
                           get("last_ok_at"), get("last_error"))

    def serving_shards(self) -> tuple[int, ...]:
        return tuple(int(i) for i in self.inner.serving_shards())

    def serving_base_urls(self) -> tuple[str, ...]:
        return tuple(url for i in self.serving_shards()
                     if (url := self.shard(i).base_url) is not None)

    def shard_for_base_url(self, url: str) -> int | None:
        return self.inner.shard_for_base_url(url)

    def snapshot(self) -> FleetSnapshot:
        return FleetSnapshot(self._clock(), self.membership_epoch,
                             getattr(self._config, "min_healthy_shards", 1),
                             tuple(self.shard(i) for i in range(self._n)))

    def raise_if_exhausted(self) -> None:
        try:
            self.inner.raise_if_exhausted()
        except Exception as exc:  # the method exists only to raise this one condition
            snap = self.snapshot()
            raise GenerationFleetExhausted(
                serving=len(snap.serving_shards), min_healthy_shards=snap.min_healthy_shards,
                counts=snap.counts) from exc

    # writers
    def record_probe(self, idx: int, ok: bool, error: Any = None) -> None:
        self._call("record_probe_ok" if ok else "record_probe_failed",
                   lambda: self.inner.record_probe(idx, ok, error))

    def report_failure(self, idx: int, error: Any = None) -> None:
        self._call("report_failure", lambda: self.inner.report_failure(idx, error))

    def report_success(self, idx: int) -> None:
        self._call("report_success", lambda: self.inner.report_success(idx))

    def mark_restarting(self, idx: int) -> None:
        self._call("mark_restarting", lambda: self.inner.mark_restarting(idx))

    def mark_loaded(self, idx: int) -> None:
        self._call("mark_loaded", lambda: self.inner.mark_loaded(idx))

    def report_refit(self, idx: int, weight_version: int) -> None:
        self._call("report_refit", lambda: self.inner.report_refit(idx, weight_version))

    def retire(self, idx: int, reason: str) -> None:
        self._call("retire", lambda: self.inner.retire(idx, reason))

    def _call(self, op: str, call: Callable[[], Any]) -> None:
        before = [self.shard(i) for i in range(self._n)] if self._observer else None
        call()
        if before is None:
            return
        for idx, old in enumerate(before):
            new = self.shard(idx)
            if new.state is not old.state:
                trigger = (ShardTrigger.RETIRE if new.state is ShardState.RETIRED
                           else _TRIGGERS[op])
                self._notify(idx, old.state, new, trigger)

    def _notify(self, idx: int, previous: ShardState | None, now: ShardHealth,
                trigger: ShardTrigger) -> None:
        if self._observer is None:
            return
        self._observer(Transition(
            shard=idx, base_url=now.base_url, previous_state=previous, state=now.state,
            trigger=trigger, membership_epoch=self.membership_epoch,
            probe_failures=now.consecutive_probe_failures,
            reported_failures=now.consecutive_reported_failures,
            restart_attempts=now.restart_attempts, weight_version=now.weight_version,
            last_error=now.last_error, at=self._clock()))


__all__ = [
    "ENTRY_POINT_GROUP", "CheckpointParticipant", "DeadlineRegistry",
    "FleetHealth", "FleetHealthAdapter", "ParticipantSpec", "PluginError", "PluginKind",
    "PluginLoadError", "ProtocolMismatchError", "Router", "UnknownPluginKindError",
    "discover", "engine_factory", "load_factory", "participant_factories", "protocol_members",
    "resolve_factory", "validate",
]
