"""Pluggable participants: replay real NeMo-RL / NeMo-Gym code in place of a reference model.

Each kind names the real upstream class it stands for, and the replay drives that class with its
real calling conventions (``replay.real``):

=================== ============================================================ ============
kind                real class                                                   upstream
=================== ============================================================ ============
fleet_health        ``nemo_rl.models.generation.fleet_health.GenerationFleetHealth``  NeMo-RL
router              ``nemo_rl.models.generation.generation_router.GenerationRouterImpl``
deadline            ``nemo_rl.experience.rollout_manager._Deadline``             NeMo-RL
deadline_registry   ``nemo_rl.experience.rollout_manager.RequestDeadlineRegistry``  (branch)
agent_participant   ``nemo_gym._checkpoint.agent.AgentSessionParticipant``       NeMo-Gym
=================== ============================================================ ============

A ``--participant KIND=REF`` names what to plug:

- ``nemo_rl`` / ``nemo_gym``: the real class, from the upstream code in the user's environment
  (``--participant-path nemo_rl=CHECKOUT``, ``ROLLOUTSCOPE_NEMO_RL_SRC``, or an installed
  checkout; ``--participant-path nemo_rl=doubles`` for this project's stand-ins);
- ``module:Class``: a class with the real constructor (the upstream class by its dotted path,
  or a user's patched copy), built from the scenario's config as upstream builds it;
- ``module:factory``: a function returning an object with the real API (the engine calls it
  with the keyword arguments its signature names); for ``deadline_registry``, also a factory
  of the reference registry surface (``clock``, ``counted``);
- ``NAME``: an entry point ``KIND.NAME`` in the group ``rolloutscope.participants``.

What is plugged is checked when it is built: a member missing, or one whose parameters differ
from the recorded upstream signature (a positional ``weight_version`` where the real one is
keyword-only, say), is a ``ProtocolMismatchError`` naming each one.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import entry_points
from typing import Any

from rolloutscope.replay.errors import ReplayError
from rolloutscope.replay.real import signatures
from rolloutscope.replay.real.records import ImplementationRecord, plugin_record, upstream_record
from rolloutscope.replay.real.sources import Upstream, UpstreamCode

ENTRY_POINT_GROUP = "rolloutscope.participants"
Factory = Callable[..., Any]


class PluginKind(StrEnum):
    FLEET_HEALTH = "fleet_health"
    ROUTER = "router"
    DEADLINE = "deadline"
    DEADLINE_REGISTRY = "deadline_registry"
    AGENT_PARTICIPANT = "agent_participant"


@dataclass(frozen=True)
class RealClass:
    upstream: Upstream
    module: str
    qualname: str


REAL_CLASSES = {
    PluginKind.FLEET_HEALTH: RealClass(Upstream.NEMO_RL, "nemo_rl.models.generation.fleet_health",
                                       "GenerationFleetHealth"),
    PluginKind.ROUTER: RealClass(Upstream.NEMO_RL, "nemo_rl.models.generation.generation_router",
                                 "GenerationRouterImpl"),
    PluginKind.DEADLINE: RealClass(Upstream.NEMO_RL, "nemo_rl.experience.rollout_manager",
                                   "_Deadline"),
    PluginKind.DEADLINE_REGISTRY: RealClass(Upstream.NEMO_RL,
                                            "nemo_rl.experience.rollout_manager",
                                            "RequestDeadlineRegistry"),
    PluginKind.AGENT_PARTICIPANT: RealClass(Upstream.NEMO_GYM, "nemo_gym._checkpoint.agent",
                                            "AgentSessionParticipant"),
}
# the replay() keyword each kind is handed to
ENGINE_SLOT = {PluginKind.FLEET_HEALTH: "fleet_health_factory",
               PluginKind.ROUTER: "router_factory",
               PluginKind.DEADLINE: "deadline_registry_factory",
               PluginKind.DEADLINE_REGISTRY: "deadline_registry_factory",
               PluginKind.AGENT_PARTICIPANT: "agent_participant_factory"}
# members the adapters call, beyond the constructor (the rest of the table is for the doubles)
_DRIVEN = {
    PluginKind.FLEET_HEALTH: ("membership_epoch", "snapshot", "serving_shards",
                              "serving_base_urls", "record_probe", "report_failure",
                              "report_success", "shard_for_base_url", "mark_restarting",
                              "mark_loaded", "report_refit", "retire", "raise_if_exhausted"),
    PluginKind.ROUTER: ("set_serving_backends", "drain_backend_failures", "metrics", "_handle",
                        "_on_backend_error"),
    PluginKind.DEADLINE: ("__aenter__", "__aexit__"),
    PluginKind.DEADLINE_REGISTRY: ("add", "discard", "suspend", "resume"),
    PluginKind.AGENT_PARTICIPANT: ("open_session", "close_session", "activation",
                                   "close_admission", "open_admission", "readiness", "retire",
                                   "export"),
}


# -- errors -------------------------------------------------------------------------------------
class PluginError(ReplayError):
    """A participant plug-in that cannot be used; always the user's input, never a bug here."""


class UnknownPluginKindError(PluginError):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(f"unknown participant kind {kind!r}; known: "
                         f"{', '.join(k.value for k in PluginKind)}")


# Gym participants the replay does not drive with real code, and why (docs/replaying-real-code.md)
NOT_PLUGGABLE = {
    "model_participant": (
        "no revision of NeMo-Gym's PolicyModelParticipant (nemo_gym/_checkpoint/model.py) loads "
        "with a checkpoint stack it agrees with: at b58bb4f it imports nemo_gym._checkpoint."
        "generation_cut and nemo_gym.token_id_capture (fingerprint, sink, staging.records), "
        "found at other commits, and errors.InvalidRolloutIdError and telemetry.gym_metrics."
        "record_checkpoint_event, which no version read defines; at 1a003fe, control."
        "RetiringAttempts (docs/replaying-real-code.md, 'The policy-model participant's "
        "revisions'); the replay keeps the reference policy-model participant"),
    "environment_participant": (
        "NeMo-Gym's EnvironmentParticipant is driven by an environment server's episode steps "
        "(begin(episode, task, deadline: asyncio.Timeout), step(...), boundary(...)); the "
        "replayed runs are agent /run executions with no environment-server steps to drive it"),
    "resources_participant": (
        "NeMo-Gym's ResourcesParticipant is not wired: the replayed tool calls carry no MCP "
        "session ids for admit()/request_started()/request_ended(); the replay keeps the "
        "reference resources participant"),
    "checkpoint_participant": (
        "name the participant: agent_participant is the NeMo-Gym checkpoint participant the "
        "replay drives with real code"),
}


class UnsupportedPluginKindError(PluginError):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(f"{kind} cannot be plugged: {NOT_PLUGGABLE[kind]}")


class PluginLoadError(PluginError):
    def __init__(self, ref: str, detail: str) -> None:
        self.ref = ref
        super().__init__(f"cannot load participant {ref!r}: {detail}")


class ProtocolMismatchError(PluginError):
    """The plugged object lacks members of the real class, or calls them differently."""

    def __init__(self, kind: PluginKind, obj: Any, missing: Sequence[str],
                 mismatched: Sequence[str] = ()) -> None:
        self.kind = kind
        self.missing = tuple(missing)
        self.mismatched = tuple(mismatched)
        real = REAL_CLASSES[kind]
        parts = []
        if self.missing:
            parts.append(f"lacks {', '.join(self.missing)}")
        if self.mismatched:
            parts.append("calls differently from the real one: " + "; ".join(self.mismatched))
        super().__init__(f"{kind.value} participant {_name(obj)} {' and '.join(parts)} "
                         f"(the real {real.qualname} of {real.module} has "
                         f"{', '.join(protocol_members(kind))})")


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


# -- the protocols: the real classes' recorded signatures ----------------------------------------
def real_signature(kind: PluginKind) -> dict[str, signatures.MemberSig]:
    real = REAL_CLASSES[kind]
    for entry in signatures.entries_for(real.module):
        if real.qualname in entry.objects:
            return dict(entry.objects[real.qualname])
    return {}


def protocol_members(kind: str | PluginKind) -> tuple[str, ...]:
    return _DRIVEN[plugin_kind(kind)]


def plugin_kind(kind: str | PluginKind) -> PluginKind:
    try:
        return PluginKind(kind)
    except ValueError:
        if str(kind) in NOT_PLUGGABLE:
            raise UnsupportedPluginKindError(str(kind)) from None
        raise UnknownPluginKindError(str(kind)) from None


def validate(kind: str | PluginKind, obj: Any) -> Any:
    """``obj`` (an instance or a class) if it has every member the adapter drives, each with the
    real parameters (names and kinds; extra optional parameters are allowed)."""
    kind = plugin_kind(kind)
    expected = real_signature(kind)
    owner = obj if inspect.isclass(obj) else type(obj)
    missing, mismatched = [], []
    for name in protocol_members(kind):
        if not hasattr(obj, name):
            missing.append(name)
            continue
        want = expected.get(name)
        if want is None or want.params is None:
            continue
        try:
            have = signatures.describe_member(owner, name)
        except (AttributeError, TypeError, ValueError):
            continue
        if have.params is None:
            continue
        required = [p for p in have.params if p.default is None]
        if [(p.name, p.kind) for p in have.params[:len(want.params)]] != \
                [(p.name, p.kind) for p in want.params] or len(required) > len(want.params):
            mismatched.append(f"{name}({', '.join(map(str, have.params))}) vs real "
                              f"{name}({', '.join(map(str, want.params))})")
    if missing or mismatched:
        raise ProtocolMismatchError(kind, obj, missing, mismatched)
    return obj


# -- finding what to plug ------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ParticipantSpec:
    kind: PluginKind
    ref: str  # nemo_rl / nemo_gym, module:attr, or the NAME of an entry point KIND.NAME

    @classmethod
    def parse(cls, text: str) -> ParticipantSpec:
        kind, sep, ref = text.partition("=")
        if not sep or not kind.strip() or not ref.strip():
            raise PluginError(f"--participant {text!r}: expected KIND=nemo_rl|nemo_gym, "
                              f"KIND=module:Class or KIND=NAME (an entry point "
                              f"{ENTRY_POINT_GROUP} KIND.NAME)")
        return cls(kind=plugin_kind(kind.strip()), ref=ref.strip())


def parse_paths(values: Iterable[str]) -> dict[str, str]:
    """``--participant-path nemo_rl=CHECKOUT`` options as a mapping."""
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or name.strip() not in {u.value for u in Upstream} or not path.strip():
            raise PluginError(f"--participant-path {value!r}: expected nemo_rl=PATH or "
                              f"nemo_gym=PATH (a checkout root, or 'doubles')")
        out[name.strip()] = path.strip()
    return out


def discover() -> dict[str, str]:
    """Installed participant entry points: ``KIND.NAME`` -> ``module:attr``."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_factory(ref: str) -> Any:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise PluginLoadError(ref, "expected module:attr")
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


def resolve_factory(spec: ParticipantSpec) -> Any:
    """What a ``module:attr`` or entry-point ref names (upstream names: ``resolve``)."""
    if ":" in spec.ref:
        return load_factory(spec.ref)
    name = f"{spec.kind.value}.{spec.ref}"
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = ", ".join(sorted(discover())) or "none installed"
        raise PluginLoadError(spec.ref, f"no entry point {name!r} in group "
                              f"{ENTRY_POINT_GROUP} (installed: {known}); nemo_rl and nemo_gym "
                              f"name the upstream code")
    try:
        factory = found[0].load()
    except Exception as exc:  # an installed plug-in that fails to import is the user's
        raise PluginLoadError(found[0].value, f"{type(exc).__name__}: {exc}") from None
    if not callable(factory):
        raise PluginLoadError(found[0].value, "not a callable")
    return factory


def call_with_accepted(factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
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


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """One plugged participant: what to build and the record of what it is."""

    kind: PluginKind
    label: str
    target: Any  # the class or factory
    module: Any  # the module the target came from (its siblings: FleetHealthPolicy, ...)
    record: ImplementationRecord
    code: UpstreamCode | None = None


def resolve(spec: ParticipantSpec, *, paths: Mapping[str, str] | None = None,
            environ: Mapping[str, str] | None = None) -> Resolved:
    label = f"{spec.kind.value}={spec.ref}"
    if spec.ref in {u.value for u in Upstream}:
        real = REAL_CLASSES[spec.kind]
        if spec.ref != real.upstream.value:
            raise PluginError(f"{label}: {spec.kind.value} is {real.upstream.repository} code "
                              f"({real.module}); use {spec.kind.value}={real.upstream.value}")
        code = UpstreamCode.locate(real.upstream, paths=paths, environ=environ)
        loaded = code.module(real.module, classes=(real.qualname,))
        target = getattr(loaded.module, real.qualname, None)
        if target is None:
            raise PluginLoadError(label, f"{loaded.file} defines no {real.qualname} (it is not "
                                         f"in every {real.upstream.repository} commit: see "
                                         f"docs/replaying-real-code.md)")
        return Resolved(kind=spec.kind, label=label, target=target, module=loaded.module,
                        record=upstream_record(spec.kind.value, code, loaded,
                                               (real.qualname,)), code=code)
    target = resolve_factory(spec)
    module = importlib.import_module(target.__module__) if getattr(
        target, "__module__", None) else None
    return Resolved(kind=spec.kind, label=label, target=target, module=module,
                    record=plugin_record(spec.kind.value, target))


# -- building engine factories ------------------------------------------------------------------
def _keyword_only(cls: Any, *names: str) -> bool:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return all(n in params and params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in names)


def _spec_kwargs(args: tuple[Any, ...], kwargs: dict[str, Any], kind: PluginKind) -> dict:
    if len(args) == 1 and dataclasses.is_dataclass(args[0]) and not kwargs:
        # the fleet side hands its factories one spec record (FleetHealthSpec, RouterSpec)
        return {f.name: getattr(args[0], f.name) for f in dataclasses.fields(args[0])}
    if args:
        raise PluginError(f"the engine called the {kind.value} factory with positional "
                          f"arguments this adapter does not know: {args!r}")
    return kwargs


def engine_factory(kind: str | PluginKind, target: Any, module: Any = None,
                   *, registry: Any = None, gym: UpstreamCode | None = None) -> Factory:
    """The factory the engine calls for ``kind``: builds the plugged code, checks it against the
    real signatures, and wraps it in its adapter."""
    from rolloutscope.replay.real import gym_agent, rl_deadline, rl_fleet, rl_router

    kind = plugin_kind(kind)
    if kind is PluginKind.FLEET_HEALTH:
        if inspect.isclass(target) and _keyword_only(target, "shard_count", "policy"):
            build = rl_fleet.fleet_health_from_class(validate(kind, target),
                                                     module or importlib.import_module(
                                                         target.__module__))
        else:
            build = rl_fleet.fleet_health_from_factory(
                lambda **kw: call_with_accepted(target, kw), lambda obj: validate(kind, obj))
    elif kind is PluginKind.ROUTER:
        if inspect.isclass(target) and _keyword_only(target, "backend_urls"):
            build = rl_router.router_from_class(validate(kind, target))
        else:
            def build(*, backends: Any, config: Any, health_managed: bool) -> Any:
                impl = validate(kind, call_with_accepted(target, {
                    "backends": backends, "config": config, "health_managed": health_managed}))
                return rl_router.RealRouter(impl, backends=backends, config=config,
                                            health_managed=health_managed)
    elif kind is PluginKind.DEADLINE:
        if not inspect.isclass(target):
            raise PluginError(f"deadline: {_name(target)} is not a class; the deadline seam "
                              f"takes the async context manager class itself (_Deadline)")
        build = rl_deadline.deadlines_from(validate(kind, target), registry)
    elif kind is PluginKind.DEADLINE_REGISTRY:
        # the reference registry surface (a factory of clock and counted), kept for users'
        # own registries written against it
        def build(**kw: Any) -> Any:
            return call_with_accepted(target, kw)
    else:
        if not inspect.isclass(target):
            raise PluginError(f"agent_participant: {_name(target)} is not a class")
        validate(kind, target)
        if gym is None:
            raise PluginError("agent_participant needs NeMo-Gym's control plane: give "
                              "agent_participant=nemo_gym, or the Gym checkout with "
                              "--participant-path nemo_gym=CHECKOUT")
        control = gym.module("nemo_gym._checkpoint.control").module
        episodes = gym.module("nemo_gym.episode_types").module
        prefixes = ("nemo_gym.",) if not gym.doubles else ("rolloutscope.replay.doubles.gym_",)
        if not target.__module__.startswith(prefixes):
            prefixes = (*prefixes, target.__module__)
        build = gym_agent.agent_from(control, target, episodes, prefixes)

    def engine_build(*args: Any, **kwargs: Any) -> Any:
        return build(**_spec_kwargs(args, kwargs, kind))

    try:  # the world hands the virtual-time runtime to factories that take one
        engine_build.takes_runtime = "runtime" in inspect.signature(build).parameters
    except (TypeError, ValueError):
        engine_build.takes_runtime = False
    engine_build.__name__ = f"{kind.value}_from_{_name(target)}"
    engine_build.__qualname__ = engine_build.__name__
    return engine_build


def _is_rl_registry(target: Any) -> bool:
    if not inspect.isclass(target):
        return False
    try:
        required = [p for p in inspect.signature(target).parameters.values()
                    if p.default is inspect.Parameter.empty
                    and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return not required and all(callable(getattr(target, m, None))
                                for m in ("add", "discard", "suspend", "resume"))


@dataclass(frozen=True)
class Plugged:
    """Engine factories by kind, and the record of each implementation."""

    factories: Mapping[str, Factory]
    implementations: tuple[ImplementationRecord, ...]
    labels: tuple[str, ...]


def participant_factories(specs: Iterable[ParticipantSpec | str], *,
                          paths: Mapping[str, str] | None = None,
                          environ: Mapping[str, str] | None = None) -> Plugged:
    """Resolve ``--participant`` options into the engine factories ``replay`` takes."""
    resolved: dict[PluginKind, Resolved] = {}
    for spec in specs:
        if isinstance(spec, str):
            spec = ParticipantSpec.parse(spec)
        if spec.kind in resolved:
            raise PluginError(f"two --participant options for {spec.kind.value}")
        resolved[spec.kind] = resolve(spec, paths=paths, environ=environ)
    factories: dict[str, Factory] = {}
    deadline = resolved.get(PluginKind.DEADLINE)
    registry = resolved.get(PluginKind.DEADLINE_REGISTRY)
    rl_registry = registry is not None and _is_rl_registry(registry.target)
    if rl_registry and deadline is None:
        paired = getattr(registry.module, "_Deadline", None)
        if paired is None:
            raise PluginError(f"{registry.label}: a RequestDeadlineRegistry works through the "
                              f"registry-aware _Deadline; add --participant deadline=...")
        deadline = Resolved(kind=PluginKind.DEADLINE, label=f"deadline (with {registry.label})",
                            target=paired, module=registry.module,
                            record=dataclasses.replace(registry.record, kind="deadline",
                                                       implementation=registry.record
                                                       .implementation.rsplit(":", 1)[0]
                                                       + ":_Deadline"))
        resolved[PluginKind.DEADLINE] = deadline
    for kind, r in resolved.items():
        if kind is PluginKind.DEADLINE_REGISTRY and (rl_registry or deadline is not None):
            if not rl_registry:
                raise PluginError(f"{r.label}: with --participant deadline=..., the registry "
                                  f"must be RequestDeadlineRegistry-shaped (add/discard/"
                                  f"suspend/resume of deadlines)")
            continue
        gym = r.code if r.code is not None and r.code.upstream is Upstream.NEMO_GYM else None
        if kind is PluginKind.AGENT_PARTICIPANT and gym is None:
            gym = UpstreamCode.locate(Upstream.NEMO_GYM, paths=paths, environ=environ)
        factories[kind.value] = engine_factory(
            kind, r.target, r.module, gym=gym,
            registry=registry.target if kind is PluginKind.DEADLINE and rl_registry else None)
    labels = tuple(r.label for r in resolved.values())
    if rl_registry and deadline is not None and registry is not None and \
            "registry" not in inspect.signature(deadline.target).parameters:
        resolved[PluginKind.DEADLINE] = dataclasses.replace(deadline, record=dataclasses.replace(
            deadline.record, note="; ".join(filter(None, [
                deadline.record.note, f"made registry-aware by "
                f"{registry.target.__qualname__}.patch (it takes no registry)"]))))
    records = tuple(r.record for k, r in resolved.items())
    return Plugged(factories=factories, implementations=records, labels=labels)


__all__ = [
    "ENGINE_SLOT", "ENTRY_POINT_GROUP", "REAL_CLASSES", "ParticipantSpec", "PluginError",
    "NOT_PLUGGABLE", "PluginKind", "PluginLoadError", "Plugged", "ProtocolMismatchError",
    "Resolved", "UnknownPluginKindError", "UnsupportedPluginKindError", "call_with_accepted", "discover", "engine_factory",
    "load_factory", "parse_paths", "participant_factories", "protocol_members", "resolve",
    "resolve_factory", "validate",
]
