"""Lets nemo-gym 0.7.0 export telemetry through the nemo-lens 0.1.0 that PyPI ships.

Standalone: it runs inside a Gym environment and imports only the standard library (and
nemo.lens, when Gym imports it). ``rolloutscope doctor gym --install-shim`` copies it into that
environment's site-packages with a one-line ``.pth`` (``import nemo_lens_gym070_compat``).

nemo-gym 0.7.0 was written against a nemo-lens newer than any release; its wheel cannot record
the git pin it was developed with, so ``pip install "nemo-gym[telemetry]"`` resolves nemo-lens
0.1.0. Against 0.1.0 three things fail, each silently:

1. ``nemo_gym.telemetry.setup.init_telemetry`` imports ``NV_DL_RANK`` and ``NV_DL_WORLD_SIZE``
   from ``nemo.lens.semconv``, which 0.1.0 lacks; the ``ImportError`` is logged at DEBUG only
   ("nemo-lens is not installed; telemetry stays disabled") and no process exports anything.
2. ``nemo_gym.telemetry.span_groups`` registers Gym's span groups with
   ``nemo.lens.groups.SpanRegistry``, which 0.1.0 lacks (that ``ImportError`` is swallowed).
3. 0.1.0's ``setup_telemetry`` resolves the configured groups with ``SpanGroup.resolve``, a
   fixed vocabulary that raises ``ValueError`` on Gym's preset ``per_rollout`` (Gym logs one
   WARNING and exports nothing) and whose ``default`` holds none of Gym's groups (Gym logs
   that telemetry is initialised, and no Gym span is ever made).

What this adds, only where nemo-lens lacks it (on a nemo-lens that has these names it does
nothing): ``NV_DL_RANK = "nv.dl.rank"`` and ``NV_DL_WORLD_SIZE = "nv.dl.world_size"`` in
``nemo.lens.semconv``; a ``SpanRegistry`` in ``nemo.lens.groups`` with the calls Gym makes
(``register``, ``resolve`` and the readers beside them); and a ``SpanGroup.resolve`` that reads
0.1.0's own vocabulary and the registry, and warns about names neither knows instead of
raising. Nothing is imported eagerly: an import hook patches each module as it loads.

``NEMO_LENS_GYM_COMPAT_DISABLE=1`` turns it off; ``NEMO_LENS_GYM_COMPAT_DEBUG=1`` says on stderr
what it patched. ``PATCHED`` names what it added in this process.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
import threading

NV_DL_RANK = "nv.dl.rank"
NV_DL_WORLD_SIZE = "nv.dl.world_size"
ALL = "all"  # the reserved spec entry: every registered group

PATCHED: set[str] = set()  # e.g. {"nemo.lens.semconv.NV_DL_RANK", "nemo.lens.groups.SpanRegistry"}
_LOG = logging.getLogger("nemo_lens_gym070_compat")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _debug(message: str) -> None:
    if _flag("NEMO_LENS_GYM_COMPAT_DEBUG"):
        sys.stderr.write(f"[nemo_lens_gym070_compat pid={os.getpid()}] {message}\n")


def _names(values) -> frozenset:
    return frozenset(str(v).strip().lower() for v in values)


class SpanRegistry:
    """Span groups registered by the libraries in this process, per namespace (Gym registers
    ``nemo_gym``). Presets union across namespaces; ``all`` is every registered group."""

    _lock = threading.Lock()
    _groups: dict = {}
    _presets: dict = {}

    @classmethod
    def register(cls, namespace, groups, presets=None, *, allow_override=False):
        if not namespace:
            raise ValueError("namespace must be a non-empty string")
        own = _names(groups)
        if not all(own) or ALL in own:
            raise ValueError(f"namespace {namespace!r}: group names must be non-empty and not "
                             f"{ALL!r}")
        with cls._lock:
            if not allow_override:
                if namespace in cls._groups:
                    raise ValueError(f"namespace {namespace!r} is already registered")
                for other, theirs in cls._groups.items():
                    if own & theirs:
                        raise ValueError(f"groups {sorted(own & theirs)} are already "
                                         f"registered by {other!r}")
            known = own.union(*(g for ns, g in cls._groups.items() if ns != namespace))
            resolved = {}
            for name, members in (presets or {}).items():
                key, members = str(name).strip().lower(), _names(members)
                if key == ALL:
                    raise ValueError(f"preset name {ALL!r} is reserved")
                if members - known:
                    raise ValueError(f"preset {name!r} names unregistered groups "
                                     f"{sorted(members - known)}")
                resolved[key] = members
            cls._groups[namespace] = own
            cls._presets[namespace] = resolved
        _debug(f"SpanRegistry.register({namespace!r}, groups={sorted(own)}, "
               f"presets={ {k: sorted(v) for k, v in resolved.items()} })")

    @classmethod
    def unregister(cls, namespace):
        with cls._lock:
            if namespace not in cls._groups:
                raise ValueError(f"namespace {namespace!r} is not registered")
            del cls._groups[namespace]
            cls._presets.pop(namespace, None)

    @classmethod
    def clear(cls):
        with cls._lock:
            cls._groups.clear()
            cls._presets.clear()

    @classmethod
    def groups(cls):
        with cls._lock:
            return frozenset().union(*cls._groups.values())

    @classmethod
    def namespaces(cls):
        with cls._lock:
            return sorted(cls._groups)

    @classmethod
    def presets(cls):
        everything = cls.groups()
        merged: dict = {}
        with cls._lock:
            for by_name in cls._presets.values():
                for name, members in by_name.items():
                    merged.setdefault(name, set()).update(members)
        out = {name: frozenset(members) & everything for name, members in merged.items()}
        out[ALL] = everything
        return out

    @classmethod
    def resolve(cls, spec):
        """``(enabled, pending)``: the groups ``spec`` selects, and the entries it names that
        nothing registered (yet)."""
        presets = cls.presets()
        enabled, pending = set(), set()
        for part in (p.strip().lower() for p in str(spec or "").split(",") if p.strip()):
            if part in presets:
                enabled |= presets[part]
            elif part in presets[ALL]:
                enabled.add(part)
            else:
                pending.add(part)
        return frozenset(enabled), frozenset(pending)


def patch_semconv(module) -> bool:
    changed = False
    for name, value in (("NV_DL_RANK", NV_DL_RANK), ("NV_DL_WORLD_SIZE", NV_DL_WORLD_SIZE)):
        if not hasattr(module, name):
            setattr(module, name, value)
            PATCHED.add(f"{module.__name__}.{name}")
            changed = True
    if changed:
        _debug(f"added NV_DL_RANK / NV_DL_WORLD_SIZE to {module.__name__}")
    return changed


def patch_groups(module) -> bool:
    if hasattr(module, "SpanRegistry"):
        return False  # a nemo-lens with the registry resolves Gym's groups itself
    module.SpanRegistry = SpanRegistry
    PATCHED.add(f"{module.__name__}.SpanRegistry")
    span_group = getattr(module, "SpanGroup", None)
    resolve = getattr(span_group, "__dict__", {}).get("resolve")
    if isinstance(resolve, classmethod):
        builtin = resolve.__func__

        def registry_aware_resolve(cls, spec):
            """nemo-lens 0.1.0's own groups and presets, plus every registered group; an entry
            neither knows is dropped with a warning rather than raising."""
            enabled, unknown = set(), []
            for part in (p.strip().lower() for p in str(spec or "").split(",") if p.strip()):
                matched = False
                try:
                    enabled |= builtin(cls, part)
                    matched = True
                except ValueError:
                    pass
                registered, pending = SpanRegistry.resolve(part)
                if registered or part not in pending:
                    enabled |= registered
                    matched = True
                if not matched:
                    unknown.append(part)
            if unknown:
                _LOG.warning("span group spec entries %s name nothing registered in this "
                             "process (registered: %s); ignoring them", unknown,
                             sorted(SpanRegistry.groups() | frozenset(getattr(cls, "ALL_GROUPS",
                                                                              ()))))
            _debug(f"SpanGroup.resolve({spec!r}) -> {sorted(enabled)}")
            return frozenset(enabled)

        span_group.resolve = classmethod(registry_aware_resolve)
        PATCHED.add(f"{module.__name__}.SpanGroup.resolve")
    _debug(f"added SpanRegistry (and a registry-aware SpanGroup.resolve) to {module.__name__}")
    return True


_TARGETS = {"nemo.lens.semconv": patch_semconv, "nemo.lens.groups": patch_groups}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, wrapped, patch):
        self._wrapped, self._patch = wrapped, patch

    def create_module(self, spec):
        return self._wrapped.create_module(spec)

    def exec_module(self, module):
        self._wrapped.exec_module(module)
        try:
            self._patch(module)
        except Exception:  # never break nemo.lens's own import
            _LOG.warning("nemo_lens_gym070_compat could not patch %s", module.__name__,
                         exc_info=True)

    def __getattr__(self, name):  # is_package, get_resource_reader, ...
        return getattr(self._wrapped, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = _TARGETS.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


_installed = False


def install() -> None:
    """Patch the targets already imported, and hook the import of the others."""
    global _installed
    if _installed or _flag("NEMO_LENS_GYM_COMPAT_DISABLE"):
        return
    _installed = True
    for name, patch in _TARGETS.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _Finder())


install()
