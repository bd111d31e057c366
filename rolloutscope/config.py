"""Config blocks as frozen dataclasses, validated the same way wherever they are built.

A block is a frozen, keyword-only dataclass. A field that has bounds declares them where it is
declared, with ``setting(default, gt=..., ge=..., lt=..., le=..., one_of=...)``. Three checks
serve every block:

- ``build(cls, data)``: a parsed document (JSON, YAML, a dict) onto the dataclass, refusing an
  unknown key by name (a misspelt threshold must never leave its default silently in force), a
  missing required key and a value of the wrong type; into nested blocks, tuples of them, enums
  and optional values. Integers are accepted where a float is expected (and become floats);
  booleans never count as numbers (``True`` as a threshold is a mistake, not 1).
- ``check_types(obj)``: the same type rule on a block built in code, making its integer floats
  floats (for flat blocks of scalars, from ``__post_init__``).
- ``check_bounds(obj)``: the declared bounds of each field, and with ``deep=True`` those of every
  nested block.

A run's recorded config may be nested (a replay's scenario: ``{"watchdog": {"interval_s": 30}}``)
or flat (an importer's derived keys, a ``--config`` file: ``{"watchdog_interval_s": 30}``).
``FLAT_KEYS`` says once where each flat key goes in the nested config; the replay's extractor
reads a run's config through it and the ``run_thresholds`` view's flat fallbacks are held to it
(tests/test_config_keys.py).

A problem is a ``ConfigProblem`` (what kind, the dotted path of the key, the key, the detail),
raised as ``ConfigError`` unless the caller passes ``fail``, which turns it into the owner's own
error with the owner's wording (a scenario's ``ScenarioError``, fleet health's
``FleetHealthConfigError``). Checks that relate several fields stay with their block.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from functools import cache
from types import MappingProxyType
from typing import Any, NoReturn, Union

_BOUNDS = "rolloutscope.config.bounds"


class ProblemKind(StrEnum):
    UNKNOWN_KEY = "unknown_key"
    MISSING_KEY = "missing_key"
    WRONG_TYPE = "wrong_type"
    OUT_OF_BOUNDS = "out_of_bounds"


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigProblem:
    kind: ProblemKind
    path: str  # where: "config.watchdog.stall_timeout", "workload.prompts[0].rows[1]"
    key: str  # the offending key (for a missing one, the key that is missing)
    detail: str  # what is wrong, e.g. "must be positive or null"

    @property
    def message(self) -> str:
        return f"{self.path}: {self.detail}" if self.path else self.detail


class ConfigError(ValueError):
    def __init__(self, problem: ConfigProblem) -> None:
        self.problem = problem
        super().__init__(problem.message)


Fail = Callable[[ConfigProblem], Exception]


def _raise(problem: ConfigProblem, fail: Fail | None) -> NoReturn:
    raise (fail or ConfigError)(problem)


# -- declaring bounds ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Bounds:
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    one_of: tuple[Any, ...] | None = None

    def violation(self, value: Any) -> str | None:
        """What is wrong with ``value``, or None."""
        if self.one_of is not None and value not in self.one_of:
            if len(self.one_of) == 1:
                return f"only {self.one_of[0]!r} exists, got {value!r}"
            return f"must be one of {', '.join(map(repr, self.one_of))}, got {value!r}"
        if self.gt is not None and not value > self.gt:
            return "must be positive" if self.gt == 0 else f"must be > {self.gt:g}"
        if self.ge is not None and not value >= self.ge:
            return f"must be >= {self.ge:g}"
        if self.lt is not None and not value < self.lt:
            return f"must be < {self.lt:g}"
        if self.le is not None and not value <= self.le:
            return f"must be <= {self.le:g}"
        return None


def setting(default: Any = dataclasses.MISSING, *, gt: float | None = None,
            ge: float | None = None, lt: float | None = None, le: float | None = None,
            one_of: tuple[Any, ...] | None = None) -> Any:
    """A dataclass field with declared bounds (``None`` always passes an optional field's)."""
    return dataclasses.field(default=default, metadata={
        _BOUNDS: Bounds(gt=gt, ge=ge, lt=lt, le=le, one_of=one_of)})


# -- what a block's fields are ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    tp: Any  # the resolved annotation
    bounds: Bounds | None
    optional: bool
    required: bool
    nested: bool  # holds blocks: a dataclass, an optional one, or a tuple of them


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        out.append(_Field(f.name, tp, f.metadata.get(_BOUNDS), _admits_none(tp),
                          f.default is dataclasses.MISSING
                          and f.default_factory is dataclasses.MISSING, _holds_blocks(tp)))
    return tuple(out)


def _admits_none(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _holds_blocks(tp: Any) -> bool:
    if dataclasses.is_dataclass(tp):
        return True
    return any(_holds_blocks(a) for a in typing.get_args(tp))


def _where(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# -- building from a document -------------------------------------------------------------------
def build(cls: type, data: Any, *, path: str = "", fail: Fail | None = None) -> Any:
    """``data`` onto the dataclass ``cls``, strictly (see the module docstring)."""
    return _build(cls, data, path, path.rpartition(".")[2], fail)


def _build(tp: Any, data: Any, path: str, key: str, fail: Fail | None) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        if data is None:
            return None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(args[0], data, path, key, fail)
    if origin is tuple:
        if not isinstance(data, list | tuple):
            _wrong_type(path, key, "a list", type(data).__name__, fail)
        item = typing.get_args(tp)[0]
        return tuple(_build(item, v, f"{path}[{i}]", key, fail) for i, v in enumerate(data))
    if dataclasses.is_dataclass(tp):
        return _build_block(tp, data, path, key, fail)
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(data)
        except ValueError:
            _raise(ConfigProblem(kind=ProblemKind.WRONG_TYPE, path=path, key=key,
                                 detail=f"must be one of {', '.join(m.value for m in tp)}, "
                                        f"got {data!r}"), fail)
    return _scalar(tp, data, path, key, fail)


def _build_block(cls: type, data: Any, path: str, key: str, fail: Fail | None) -> Any:
    if not isinstance(data, Mapping):
        _wrong_type(path, key, "an object", type(data).__name__, fail)
    fields = _fields(cls)
    known = {f.name: f for f in fields}
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        _raise(ConfigProblem(kind=ProblemKind.UNKNOWN_KEY, path=_where(path, unknown[0]),
                             key=unknown[0],
                             detail=f"unknown key(s) {', '.join(unknown)}; known keys are "
                                    f"{', '.join(sorted(known))}"), fail)
    kwargs = {k: _build(known[k].tp, v, _where(path, k), k, fail) for k, v in data.items()}
    for f in fields:
        if f.required and f.name not in kwargs:
            _raise(ConfigProblem(kind=ProblemKind.MISSING_KEY, path=path, key=f.name,
                                 detail=f"missing required key {f.name!r}"), fail)
    return cls(**kwargs)


_TYPE_NAMES = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}


def _scalar(tp: Any, value: Any, path: str, key: str, fail: Fail | None) -> Any:
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            _wrong_type(path, key, _TYPE_NAMES[float], repr(value), fail)
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _wrong_type(path, key, _TYPE_NAMES[int], repr(value), fail)
        return value
    if tp is bool or tp is str:
        if not isinstance(value, tp):
            _wrong_type(path, key, _TYPE_NAMES[tp], repr(value), fail)
        return value
    raise TypeError(f"{path}: unsupported field type {tp!r}")  # a bug in the block


def _wrong_type(path: str, key: str, expected: str, got: str, fail: Fail | None) -> NoReturn:
    _raise(ConfigProblem(kind=ProblemKind.WRONG_TYPE, path=path, key=key,
                         detail=f"must be {expected}, got {got}"), fail)


# -- checking a block built in code -------------------------------------------------------------
def check_types(obj: Any, *, path: str = "", fail: Fail | None = None) -> None:
    """Type-check a flat block of scalars built in code; an integer given for a float field
    becomes that float (frozen or not)."""
    for f in _fields(type(obj)):
        value = getattr(obj, f.name)
        if f.optional and value is None:
            continue
        tp = f.tp if not f.optional else next(
            a for a in typing.get_args(f.tp) if a is not type(None))
        checked = _scalar(tp, value, _where(path, f.name), f.name, fail)
        if checked is not value:
            object.__setattr__(obj, f.name, checked)


def check_bounds(obj: Any, *, path: str = "", deep: bool = False,
                 fail: Fail | None = None) -> None:
    """Every declared bound of ``obj``'s fields (and, ``deep``, of every block inside it)."""
    for where, key, value, field in _bounded(obj, path, deep):
        if value is None and field.optional:
            continue
        problem = field.bounds.violation(value)
        if problem is not None:
            if field.optional:
                problem += " or null"
            _raise(ConfigProblem(kind=ProblemKind.OUT_OF_BOUNDS, path=where, key=key,
                                 detail=problem), fail)


def _bounded(obj: Any, path: str, deep: bool) -> Iterator[tuple[str, str, Any, _Field]]:
    for f in _fields(type(obj)):
        if f.bounds is None and not (deep and f.nested):
            continue
        value = getattr(obj, f.name)
        where = _where(path, f.name)
        if f.bounds is not None:
            yield where, f.name, value, f
        if not (deep and f.nested):
            continue
        if isinstance(value, tuple):
            for i, item in enumerate(value):
                yield from _bounded(item, f"{where}[{i}]", deep)
        elif value is not None:
            yield from _bounded(value, where, deep)


# Each flat key a run may record, with its place (section, name) in the nested config. The flat
# name is upstream's where the threshold is upstream's: Gym's ``checkpoint.lease_grace_seconds``,
# NeMo-RL's fleet health ``unhealthy_threshold`` (``FleetHealthPolicy``) and generation router
# ``backend_timeout_s``, ``grpo.max_num_steps``, ``rollout_checkpointing.gym.prepare_timeout_s``;
# the stall watchdog's interval is ``watchdog_interval_s``, flat, as its name alone says nothing.
FLAT_KEYS: Mapping[str, tuple[str, str]] = MappingProxyType({
    "rollout_timeout_s": ("rollout", "rollout_timeout_s"),
    "num_generations_per_prompt": ("rollout", "num_generations_per_prompt"),
    "max_infra_attempts_per_prompt": ("rollout", "max_infra_attempts_per_prompt"),
    "max_data_attempts_per_prompt": ("rollout", "max_data_attempts_per_prompt"),
    "prepare_timeout_s": ("checkpoint", "prepare_timeout_s"),
    "lease_grace_seconds": ("checkpoint", "lease_grace_s"),
    "stall_timeout_s": ("watchdog", "stall_timeout_s"),
    "watchdog_interval_s": ("watchdog", "interval_s"),
    "max_num_steps": ("training", "max_num_steps"),
    "unhealthy_threshold": ("fleet", "unhealthy_threshold"),
    "backend_timeout_s": ("router", "backend_timeout_s"),
})
