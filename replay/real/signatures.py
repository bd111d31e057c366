"""The recorded upstream signatures the adapters and the doubles are held to.

``upstream_signatures.json`` names, per upstream file, the repository, the commit, the file's
SHA-256 and, for every class and member an adapter calls, its kind (method, ``async``, async
context manager, property, ...) and its parameters: names, kinds (positional, keyword-only,
...) and defaults. Annotations are not compared: they name upstream types.

Three uses: the doubles are checked against it (a test, in every run); the real objects are
checked against it when a test is pointed at real code (drift in upstream is caught there);
and a loaded file whose hash the table knows is reported with that commit, for checkouts that
are not git work trees. ``scripts/record_upstream_signatures.py`` refreshes it from real code.
"""

from __future__ import annotations

import enum
import inspect
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).with_name("upstream_signatures.json")
TABLE_FORMAT = "rolloutscope-upstream-signatures"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # inspect.Parameter kind name: POSITIONAL_OR_KEYWORD, KEYWORD_ONLY, ...
    default: str | None = None  # repr of the default; None when required

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.default is not None:
            out["default"] = self.default
        return out

    def __str__(self) -> str:
        marker = {"KEYWORD_ONLY": "*", "VAR_POSITIONAL": "*args:", "VAR_KEYWORD": "**kw:",
                  "POSITIONAL_ONLY": "/"}.get(self.kind, "")
        return f"{marker}{self.name}" + (f"={self.default}" if self.default is not None else "")


@dataclass(frozen=True)
class MemberSig:
    name: str
    kind: str  # constructor, method, async, asynccontextmanager, property, classmethod, ...
    params: tuple[Param, ...] | None = None
    value: Any = None  # enum members' values, exception bases, class attributes

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.params is not None:
            out["params"] = [p.to_dict() for p in self.params]
        if self.value is not None:
            out["value"] = self.value
        return out

    def render(self) -> str:
        if self.params is None:
            return f"{self.kind} {self.name}" + (f" = {self.value!r}" if self.value else "")
        return f"{self.kind} {self.name}({', '.join(map(str, self.params))})"


@dataclass(frozen=True)
class FileSig:
    upstream: str
    repository: str
    commit: str
    path: str  # in the repository
    module: str  # the dotted name the adapters load
    sha256: str | None  # None when the commit's file could not be hashed whole
    objects: Mapping[str, Mapping[str, MemberSig]]
    note: str = ""

    @property
    def short_commit(self) -> str:
        return self.commit[:7]


# -- describing a live object -------------------------------------------------------------------
def _params(fn: Any, *, drop_first: bool) -> tuple[Param, ...]:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if drop_first and params and params[0].name in ("self", "cls"):
        params = params[1:]
    # ray.remote(cls) adds this keyword to every method of the class it wraps, base classes
    # included (Ray's tracing hook); it is not part of the upstream source's signature
    params = [p for p in params if p.name != "_ray_trace_ctx"]
    return tuple(Param(p.name, p.kind.name,
                       None if p.default is inspect.Parameter.empty else _default_repr(p.default))
                 for p in params)


def _default_repr(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    text = repr(value)
    return "<factory>" if text in ("<factory>", "PydanticUndefined") else text


def describe_member(owner: Any, name: str) -> MemberSig:
    """The signature of ``owner.name`` (``name == "__init__"``: the constructor's)."""
    if inspect.isclass(owner) and name == "__init__":
        return MemberSig(name, "constructor", _params(owner, drop_first=False))
    if inspect.isclass(owner) and issubclass(owner, enum.Enum) and name == "__members__":
        return MemberSig(name, "enum", value={m.name: m.value for m in owner})
    if inspect.isclass(owner) and name == "__bases__":
        return MemberSig(name, "bases", value=[b.__name__ for b in owner.__bases__])
    raw = inspect.getattr_static(owner, name)
    if isinstance(raw, property):
        return MemberSig(name, "property")
    if isinstance(raw, staticmethod):
        return MemberSig(name, "staticmethod", _params(raw.__func__, drop_first=False))
    if isinstance(raw, classmethod):
        return MemberSig(name, "classmethod", _params(raw.__func__, drop_first=True))
    if inspect.isfunction(raw):
        wrapped = getattr(raw, "__wrapped__", None)
        if wrapped is not None and inspect.isasyncgenfunction(wrapped):
            kind = "asynccontextmanager"
        elif inspect.iscoroutinefunction(raw):
            kind = "async"
        else:
            kind = "method" if inspect.isclass(owner) else "function"
        return MemberSig(name, kind, _params(raw, drop_first=inspect.isclass(owner)))
    if isinstance(raw, (str, int, float, bool)) or raw is None:
        return MemberSig(name, "attribute", value=raw)
    return MemberSig(name, type(raw).__name__)


def describe(module: Any, objects: Mapping[str, Iterable[str]]) -> dict[str, dict[str, MemberSig]]:
    """``{object: {member: MemberSig}}`` for the named objects of a live module. An object
    ``"."`` means module-level functions."""
    out: dict[str, dict[str, MemberSig]] = {}
    for qualname, members in objects.items():
        owner = module if qualname == "." else _resolve(module, qualname)
        described = {}
        for member in members:
            try:
                described[member] = describe_member(owner, member)
            except AttributeError:
                described[member] = MemberSig(member, "missing")
        out[qualname] = described
    return out


def _resolve(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def differences(expected: Mapping[str, Mapping[str, MemberSig]],
                actual: Mapping[str, Mapping[str, MemberSig]]) -> list[str]:
    """Every way ``actual`` differs from ``expected``, one line each."""
    out = []
    for qualname, members in expected.items():
        got = actual.get(qualname, {})
        for name, want in members.items():
            have = got.get(name)
            if have is None or have.kind == "missing":
                out.append(f"{qualname}.{name}: missing (expected {want.render()})")
            elif (have.kind, have.params, have.value) != (want.kind, want.params, want.value):
                out.append(f"{qualname}.{name}: {have.render()} != expected {want.render()}")
    return out


# -- the table ----------------------------------------------------------------------------------
def _member_from(name: str, data: Mapping[str, Any]) -> MemberSig:
    params = data.get("params")
    return MemberSig(name, data["kind"],
                     None if params is None else tuple(
                         Param(p["name"], p["kind"], p.get("default")) for p in params),
                     data.get("value"))


@cache
def load_table(path: Path = TABLE_PATH) -> tuple[FileSig, ...]:
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if doc.get("format") != TABLE_FORMAT:
        raise ValueError(f"{path}: not a {TABLE_FORMAT} document")
    return tuple(
        FileSig(upstream=f["upstream"], repository=f["repository"], commit=f["commit"],
                path=f["path"], module=f["module"], sha256=f.get("sha256"),
                note=f.get("note", ""),
                objects={q: {n: _member_from(n, m) for n, m in members.items()}
                         for q, members in f["objects"].items()})
        for f in doc["files"])


def table_document(files: Iterable[FileSig]) -> dict[str, Any]:
    return {"format": TABLE_FORMAT, "version": 1, "files": [
        {"upstream": f.upstream, "repository": f.repository, "commit": f.commit,
         "path": f.path, "module": f.module, "sha256": f.sha256,
         **({"note": f.note} if f.note else {}),
         "objects": {q: {n: m.to_dict() for n, m in members.items()}
                     for q, members in f.objects.items()}}
        for f in files]}


def entries_for(module: str) -> tuple[FileSig, ...]:
    return tuple(f for f in load_table() if f.module == module)


def known_file(sha256: str | None) -> FileSig | None:
    """The table's entry for an upstream file with this hash, if it records one."""
    if sha256 is None:
        return None
    return next((f for f in load_table() if f.sha256 == sha256), None)


__all__ = ["FileSig", "MemberSig", "Param", "TABLE_PATH", "describe", "describe_member",
           "differences", "entries_for", "known_file", "load_table", "table_document"]
