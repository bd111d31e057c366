"""Gym's policy-model participant (``nemo_gym/_checkpoint/model.py``): the revisions on record,
and what keeps each from loading with the rest of the checkpoint stack.

The replay drives a real participant only from code that loads and agrees with the control plane
it runs under. For the policy-model participant no such snapshot is at hand:
``gym_model_participant.json`` records each revision of ``model.py`` that was found, what it
imports from Gym, where each of those names was found, the names no version read supplies, and
where it disagrees with the modules that do load (a field or attribute under another name). The
replay keeps its reference policy-model participant, and docs/replaying-real-code.md carries
the same table.

A user's own checkout is judged by its source (``check_checkout``): which recorded revision its
``model.py`` is, if any, and every import the checkout cannot satisfy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rolloutscope.replay.real.imports import UnresolvedImport, imported_names, unresolved_imports

__all__ = ["MODULE", "RECORD_PATH", "Lacking", "ModelRevision", "CheckoutVerdict",
           "check_checkout", "recorded_revisions"]

RECORD_PATH = Path(__file__).with_name("gym_model_participant.json")
RECORD_FORMAT = "rolloutscope-gym-model-participant-revisions"
MODULE = "nemo_gym._checkpoint.model"


@dataclass(frozen=True, kw_only=True)
class Lacking:
    module: str
    name: str
    read: tuple[str, ...]  # the versions of ``module`` read, none of which binds ``name``
    stored: int  # how many versions of the file the repository's stored history holds
    note: str = ""

    @property
    def target(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True, kw_only=True)
class ModelRevision:
    revision: str  # short commit, or how the version is told apart when its commit is unknown
    commit: str | None
    chars: int
    admission: str  # what it does with a call that arrives while a checkpoint is open
    imports: dict[str, tuple[str, ...]]  # Gym module -> names model.py takes from it
    found_in: dict[str, str]  # Gym module -> the version that supplies every name taken
    lacking: tuple[Lacking, ...]
    disagreements: tuple[str, ...]

    @property
    def loads(self) -> bool:
        return not self.lacking and not self.disagreements


@cache
def recorded_revisions() -> tuple[ModelRevision, ...]:
    data = json.loads(RECORD_PATH.read_text(encoding="utf-8"))
    if data.get("format") != RECORD_FORMAT or data.get("module") != MODULE:
        raise ValueError(f"{RECORD_PATH} is not a {RECORD_FORMAT} record of {MODULE}")
    return tuple(
        ModelRevision(
            revision=entry["revision"], commit=entry["commit"], chars=entry["chars"],
            admission=entry["admission"],
            imports={module: tuple(names) for module, names in entry["imports"].items()},
            found_in=dict(entry["found_in"]),
            lacking=tuple(Lacking(module=item["module"], name=item["name"],
                                  read=tuple(item["read"]), stored=item["stored"],
                                  note=item.get("note", ""))
                          for item in entry["lacking"]),
            disagreements=tuple(entry["disagreements"]))
        for entry in data["revisions"])


@dataclass(frozen=True, kw_only=True)
class CheckoutVerdict:
    """What a checkout's ``model.py`` is and what it lacks, read from its source."""

    root: Path
    revision: ModelRevision | None  # the recorded revision with the same imports, if any
    unresolved: tuple[UnresolvedImport, ...]

    @property
    def lacking_to_load(self) -> tuple[UnresolvedImport, ...]:
        return tuple(item for item in self.unresolved if item.at_import)

    def describe(self) -> str:
        which = (f"model.py is the recorded revision {self.revision.revision}"
                 if self.revision is not None else "model.py is no recorded revision")
        if not self.lacking_to_load:
            return f"{self.root}: {which}; nothing it imports is lacking"
        return (f"{self.root}: {which}; it lacks "
                + "; ".join(item.describe() for item in self.lacking_to_load))


def check_checkout(root: Path) -> CheckoutVerdict:
    """Judge the Gym checkout at ``root`` (the directory holding ``nemo_gym/``) by its source,
    without importing any of it."""
    root = Path(root).expanduser()
    path = root.joinpath(*MODULE.split(".")).with_suffix(".py")
    revision = None
    if path.is_file():
        surface = imported_names(path.read_text(encoding="utf-8"), MODULE, top="nemo_gym")
        revision = next((r for r in recorded_revisions() if r.imports == surface), None)
    return CheckoutVerdict(root=root, revision=revision,
                           unresolved=unresolved_imports(root, MODULE))
