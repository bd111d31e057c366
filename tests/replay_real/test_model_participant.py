"""Gym's policy-model participant: the revisions of ``model.py`` on record, what each lacks, the
page that shows them, and a checkout's ``model.py`` judged by its source; pointed at a real Gym
checkout (``ROLLOUTSCOPE_NEMO_GYM_SRC``), that it loads only where nothing is lacking."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from rolloutscope.replay.real.gym_model import (
    MODULE,
    RECORD_PATH,
    check_checkout,
    recorded_revisions,
)
from rolloutscope.replay.real.imports import UnresolvedImport
from rolloutscope.replay.real.sources import UpstreamCode, UpstreamImportError

DOC = Path(__file__).resolve().parents[2] / "docs" / "replaying-real-code.md"

def write(root: Path, files: dict[str, str]) -> Path:
    for relpath, text in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def targets(items: tuple[UnresolvedImport, ...], *, at_import: bool | None = None) -> set[str]:
    return {i.target for i in items if at_import is None or i.at_import is at_import}


class TestTheRecordedRevisions:
    def test_no_recorded_revision_loads_with_the_stack_it_was_found_beside(self):
        revisions = recorded_revisions()
        assert {r.revision for r in revisions} >= {"b58bb4f", "1a003fe"}
        assert not any(r.loads for r in revisions)

    def test_each_import_is_either_found_or_lacking_and_each_lack_was_looked_for(self):
        for revision in recorded_revisions():
            lacking_modules = {item.module for item in revision.lacking}
            assert set(revision.imports) == set(revision.found_in) | lacking_modules
            assert not set(revision.found_in) & lacking_modules
            for item in revision.lacking:
                assert item.name in revision.imports[item.module]
                assert item.read and 0 < len(item.read) <= item.stored
            if revision.commit is not None:
                assert re.fullmatch(r"[0-9a-f]{40}", revision.commit)
                assert revision.commit.startswith(revision.revision)

    def test_the_refusal_of_model_participant_names_what_each_revision_lacks(self):
        from rolloutscope.replay.plugins import NOT_PLUGGABLE

        refusal = NOT_PLUGGABLE["model_participant"]
        for revision in recorded_revisions():
            if revision.lacking:
                assert revision.revision in refusal
            for item in revision.lacking:
                assert item.name in refusal, item.target

    def test_a_checkout_model_py_is_told_apart_by_what_it_imports(self, tmp_path):
        b58 = next(r for r in recorded_revisions() if r.revision == "b58bb4f")
        files = {"nemo_gym/__init__.py": ""}
        lacking = {(item.module, item.name) for item in b58.lacking}
        for module, names in b58.imports.items():
            parts = module.split(".")
            for i in range(2, len(parts)):
                files.setdefault("/".join(parts[:i]) + "/__init__.py", "")
            files["/".join(parts) + ".py"] = "".join(
                f"{name} = None\n" for name in names if (module, name) not in lacking)
        files["nemo_gym/_checkpoint/model.py"] = "".join(
            f"from {module} import {', '.join(names)}\n" for module, names in b58.imports.items())
        verdict = check_checkout(write(tmp_path / "gym", files))
        assert verdict.revision == b58
        assert targets(verdict.lacking_to_load) == {item.target for item in b58.lacking}
        assert "model.py is the recorded revision b58bb4f; it lacks no name " \
               "nemo_gym._checkpoint.errors.InvalidRolloutIdError" in verdict.describe()

    def test_the_page_shows_the_recorded_revisions_row_for_row(self):
        rows = table_rows(DOC.read_text(encoding="utf-8"))
        expected = [[f"`{r.commit[:7]}`" if r.commit else r.revision,
                     "; ".join(f"`{item.target.removeprefix('nemo_gym.')}`"
                               for item in r.lacking) or "none",
                     str(len(r.disagreements))]
                    for r in recorded_revisions()]
        assert [row[:1] + row[2:4] for row in rows] == expected
        record = json.loads(RECORD_PATH.read_text(encoding="utf-8"))
        assert len(rows) == len(record["revisions"])


def table_rows(page: str) -> list[list[str]]:
    """The rows of the table under the page's ``model.py`` revisions heading."""
    section = page.split("### The policy-model participant's revisions", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]



def test_the_real_policy_model_participant_loads_only_where_nothing_is_lacking(real_gym):
    verdict = check_checkout(real_gym)
    code = UpstreamCode.locate("nemo_gym", paths={"nemo_gym": str(real_gym)})
    if verdict.lacking_to_load:
        with pytest.raises(UpstreamImportError) as err:
            code.module(MODULE)
        assert targets(err.value.unresolved, at_import=True) == targets(
            verdict.lacking_to_load)
        return
    code.module(MODULE)
    pytest.fail(f"{verdict.describe()}: model.py loads from this checkout, so the replay's "
                f"refusal of model_participant is out of date for it")
