"""What a replay report says about the code it ran: typed records, not strings.

``ImplementationRecord``: one per participant kind a replay plugged -- which implementation
(module and class), where it came from (upstream repository, version, commit and how the commit
is known, the file and its SHA-256, how it was loaded), and whether its signatures match the
recorded upstream table. ``ReferenceComparison``: whether the replay with the plugged code
diverged from the same replay with the reference models, and where: the first span that
differs, the incidents only one side has, and which of the kind's fix variants, turned on for
the reference models, reproduce the plugged run exactly.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolloutscope.replay.real import signatures
from rolloutscope.replay.real.sources import LoadedModule, LoadMethod, UpstreamCode, file_sha256

CommitSource = str  # "git", "known file hash", "stand-in mirrors", or "" when unknown


@dataclass(frozen=True, kw_only=True)
class ImplementationRecord:
    kind: str  # the plug-in kind (fleet_health, router, deadline, ...)
    implementation: str  # module:qualname of what ran
    module: str  # the module name (the upstream dotted name for upstream code)
    loaded_by: str  # LoadMethod value, or "plug-in" for a user's own module
    upstream: str | None = None  # NVIDIA-NeMo/RL, NVIDIA-NeMo/Gym
    version: str | None = None
    commit: str | None = None
    commit_source: CommitSource = ""
    file: str | None = None
    file_sha256: str | None = None
    found_by: str | None = None  # --participant-path, the env var, installed, doubles
    note: str = ""
    signature_drift: tuple[str, ...] = ()  # differences from the recorded upstream signatures

    @property
    def is_double(self) -> bool:
        return self.loaded_by == LoadMethod.DOUBLE.value

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self).items()}

    def line(self) -> str:
        where = f"{self.upstream} {self.commit[:7]}" if self.upstream and self.commit else (
            self.upstream or "")
        how = {"double": "stand-in mirroring", "extracted": "classes extracted from",
               "file": "loaded by file from", "import": "imported from"}.get(self.loaded_by, "")
        origin = f" ({how} {where})" if where and how else f" ({where})" if where else ""
        version = f" v{self.version}" if self.version else ""
        sha = f" sha256 {self.file_sha256[:12]}" if self.file_sha256 else ""
        drift = f"; SIGNATURES DIFFER: {'; '.join(self.signature_drift)}" \
            if self.signature_drift else ""
        return f"{self.kind}: {self.implementation}{version}{origin}{sha}{drift}"


@dataclass(frozen=True, kw_only=True)
class SpanDifference:
    """The first span (in time order) where the two runs differ."""

    at_s: float
    span: str
    field: str  # "missing", "extra", or the attribute / column that differs
    reference: str | None
    plugged: str | None
    subject: str = ""  # what the span is about: "shard 1 suspect", "rollout p00000-0", ...

    def line(self) -> str:
        about = f" ({self.subject})" if self.subject else ""
        return (f"first difference at {self.at_s:g} s in {self.span}{about}: {self.field} "
                f"(reference {self.reference!r}, plugged {self.plugged!r})")


@dataclass(frozen=True, kw_only=True)
class ReferenceComparison:
    same_spans: bool
    first_difference: SpanDifference | None = None
    incidents_only_reference: tuple[tuple[str, str], ...] = ()
    incidents_only_plugged: tuple[tuple[str, str], ...] = ()
    # fix variants which, turned on for the reference models, give exactly the plugged spans
    matches_reference_with: tuple[str, ...] | None = None
    # ... which give the same incidents (kind and subject), whatever the spans; "" is the
    # reference models as replayed
    incidents_match_with: tuple[str, ...] = ()
    variants_tried: tuple[str, ...] = ()

    @property
    def diverged(self) -> bool:
        return not self.same_spans

    def lines(self) -> list[str]:
        if self.same_spans:
            return ["same spans as the reference models"]
        out = [] if self.first_difference is None else [self.first_difference.line()]
        out += [f"incident {k} ({s}) only with the reference models"
                for k, s in self.incidents_only_reference]
        out += [f"incident {k} ({s}) only with the plugged code"
                for k, s in self.incidents_only_plugged]
        if self.matches_reference_with:
            out.append("identical to the reference models with "
                       + ", ".join(self.matches_reference_with))
        elif self.variants_tried:
            out.append("no fix variant of the reference models gives the same spans (tried "
                       + ", ".join(self.variants_tried) + ")")
        named = [v for v in self.incidents_match_with if v]
        if "" in self.incidents_match_with:
            out.append("same incidents as the reference models")
        elif named:
            out.append("same incidents as the reference models with " + ", ".join(named))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"same_spans": self.same_spans,
                "first_difference": None if self.first_difference is None
                else vars(self.first_difference),
                "incidents_only_reference": [list(k) for k in self.incidents_only_reference],
                "incidents_only_plugged": [list(k) for k in self.incidents_only_plugged],
                "matches_reference_with": None if self.matches_reference_with is None
                else list(self.matches_reference_with),
                "incidents_match_with": list(self.incidents_match_with),
                "variants_tried": list(self.variants_tried)}


# -- building records -----------------------------------------------------------------------------
def _drift(loaded: LoadedModule, qualnames: tuple[str, ...], commit: str | None) -> tuple[str, ...]:
    entries = signatures.entries_for(loaded.name)
    if not entries:
        return ()
    entry = next((e for e in entries if commit and e.commit == commit), None) or next(
        (e for e in entries if any(q in e.objects for q in qualnames)), entries[0])
    expected = {q: m for q, m in entry.objects.items() if q in qualnames}
    if not expected:
        return ()
    live = signatures.describe(loaded.module, {q: list(m) for q, m in expected.items()})
    return tuple(f"vs {entry.short_commit}: {d}" for d in signatures.differences(expected, live))


def upstream_record(kind: str, code: UpstreamCode, loaded: LoadedModule,
                    qualnames: tuple[str, ...]) -> ImplementationRecord:
    """The record of an upstream class (or its stand-in)."""
    sha = loaded.sha256
    commit, commit_source = None, ""
    if loaded.loaded_by is LoadMethod.DOUBLE:
        mirrored = [e for e in signatures.entries_for(loaded.name)
                    if any(q in e.objects for q in qualnames)]
        mirrored = [e for e in mirrored if _double_of(e) == loaded.module.__name__] or mirrored
        if mirrored:
            commit, commit_source = mirrored[0].commit, "stand-in mirrors"
    else:
        commit = code.git_commit()
        if commit is not None:
            commit_source = "git"
        else:
            known = signatures.known_file(sha)
            if known is not None:
                commit, commit_source = known.commit, "known file hash"
    return ImplementationRecord(
        kind=kind, implementation=f"{loaded.name}:{'+'.join(qualnames)}", module=loaded.name,
        loaded_by=loaded.loaded_by.value, upstream=code.upstream.repository,
        version=code.version(), commit=commit, commit_source=commit_source,
        file=str(loaded.file) if loaded.file else None, file_sha256=sha,
        found_by=code.found_by, note=loaded.note,
        signature_drift=_drift(loaded, qualnames, commit))


def _double_of(entry: signatures.FileSig) -> str | None:
    from rolloutscope.replay.real.sources import DOUBLE_OF

    return DOUBLE_OF.get((entry.module, entry.short_commit))


def plugin_record(kind: str, obj: Any) -> ImplementationRecord:
    """The record of a user's own class or factory (``module:attr``)."""
    module_name = getattr(obj, "__module__", "") or ""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    package = sys.modules.get(module_name.split(".")[0])
    version = getattr(package, "__version__", None)
    sha = file_sha256(Path(path)) if path and Path(path).is_file() else None
    # the upstream file itself, imported under another name (a copy on the user's path)
    known = signatures.known_file(sha)
    return ImplementationRecord(
        kind=kind, implementation=f"{module_name}:{getattr(obj, '__qualname__', repr(obj))}",
        module=module_name, loaded_by="plug-in",
        upstream=known.repository if known else None,
        version=str(version) if version is not None else None,
        commit=known.commit if known else None,
        commit_source="known file hash" if known else "",
        file=str(path) if path else None, file_sha256=sha,
        note=f"the file is {known.repository} {known.path} at {known.short_commit}"
        if known else "")
