"""Every import an upstream module lacks in a checkout, read from its source and held to what
Python's own import does: on checkouts written here, and, with ``ROLLOUTSCOPE_NEMO_GYM_SRC``, on
a real Gym checkout, module by module; and the Gym loader's error that lists them all."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rolloutscope.replay.real.gym_model import MODULE
from rolloutscope.replay.real.imports import Lack, UnresolvedImport, unresolved_imports
from rolloutscope.replay.real.sources import UpstreamCode, UpstreamImportError

# Imports one module in a fresh interpreter with only the checkout added to the path, and
# prints null, or [exception type, the module an ImportError names].
PROBE = textwrap.dedent("""
    import importlib, json, sys
    sys.path.insert(0, sys.argv[1])
    try:
        importlib.import_module(sys.argv[2])
        print(json.dumps(None))
    except ImportError as exc:
        print(json.dumps(["ImportError", exc.name]))
    except BaseException as exc:
        print(json.dumps([type(exc).__name__, None]))
""")


def python_imports(root: Path, module: str, cwd: Path) -> list | None:
    done = subprocess.run([sys.executable, "-c", PROBE, str(root), module], capture_output=True,
                          text=True, timeout=120, cwd=cwd, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def modules_of(root: Path, *packages: str) -> list[str]:
    found = []
    for package in packages:
        base = root.joinpath(*package.split("."))
        for path in sorted(base.rglob("*.py")) if base.is_dir() else ():
            parts = path.relative_to(root).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def write(root: Path, files: dict[str, str]) -> Path:
    for relpath, text in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def targets(items: tuple[UnresolvedImport, ...], *, at_import: bool | None = None) -> set[str]:
    return {i.target for i in items if at_import is None or i.at_import is at_import}


# A checkout put together from two revisions, as one assembled from stored files would be.
MIXED = {
    "nemo_gym/__init__.py": "",
    "nemo_gym/_checkpoint/__init__.py": "",
    "nemo_gym/_checkpoint/errors.py": """
        class ControlError(Exception):
            code = "checkpoint_error"

        class AdmissionClosedError(ControlError):
            code = "admission_closed"
    """,
    "nemo_gym/_checkpoint/control.py": """
        from nemo_gym._checkpoint.errors import ControlError

        class RetiredAttempts:
            pass
    """,
    "nemo_gym/_checkpoint/model.py": """
        from nemo_gym._checkpoint.control import ControlError, RetiringAttempts
        from nemo_gym._checkpoint.errors import InvalidRolloutIdError
        from nemo_gym._checkpoint.generation_cut import GENERATION_CUT_ROUTE

        def request_cut():
            from nemo_gym.server_utils import request
    """,
}


class TestEveryLackingImportIsNamed:
    def test_python_stops_at_one_lacking_name_and_the_check_names_all_of_them(self, tmp_path):
        root = write(tmp_path / "gym", MIXED)
        # Python names the first module that lacks a name, and stops there
        assert python_imports(root, MODULE, tmp_path) == ["ImportError",
                                                          "nemo_gym._checkpoint.control"]
        found = unresolved_imports(root, MODULE)
        assert targets(found, at_import=True) == {
            "nemo_gym._checkpoint.control.RetiringAttempts",
            "nemo_gym._checkpoint.errors.InvalidRolloutIdError",
            "nemo_gym._checkpoint.generation_cut"}
        assert targets(found, at_import=False) == {"nemo_gym.server_utils"}
        lacks = {i.target: i.lack for i in found}
        assert lacks["nemo_gym._checkpoint.generation_cut"] is Lack.MODULE
        assert lacks["nemo_gym._checkpoint.errors.InvalidRolloutIdError"] is Lack.NAME
        first = next(i for i in found if i.name == "InvalidRolloutIdError")
        assert (first.importer, first.line) == (MODULE, 3)
        assert first.describe() == ("no name nemo_gym._checkpoint.errors.InvalidRolloutIdError "
                                    "(imported by nemo_gym._checkpoint.model line 3)")

    def test_the_gym_loader_error_lists_everything_the_checkout_lacks(self, tmp_path, monkeypatch):
        root = write(tmp_path / "gym", MIXED)
        monkeypatch.setattr(sys, "path", list(sys.path))
        for name in [n for n in sys.modules if n.split(".")[0] == "nemo_gym"]:
            monkeypatch.delitem(sys.modules, name)
        code = UpstreamCode.locate("nemo_gym", paths={"nemo_gym": str(root)})
        try:
            with pytest.raises(UpstreamImportError) as err:
                code.module(MODULE)
        finally:
            for name in [n for n in sys.modules if n.split(".")[0] == "nemo_gym"]:
                del sys.modules[name]
        assert targets(err.value.unresolved, at_import=True) == targets(
            unresolved_imports(root, MODULE), at_import=True)
        message = str(err.value)
        assert "Everything it lacks to load: " in message
        for target in ("control.RetiringAttempts", "errors.InvalidRolloutIdError",
                       "no module nemo_gym._checkpoint.generation_cut"):
            assert target in message
        assert "server_utils" not in message  # only when a cut is requested

    def test_a_name_is_bound_by_any_top_level_statement_or_by_a_submodule(self, tmp_path):
        root = write(tmp_path / "gym", {
            "nemo_gym/__init__.py": "",
            "nemo_gym/defs.py": """
                import os.path
                from typing import Any as AnyType
                A: int = 1
                B = C = 2
                D, (E, *F) = 1, (2, 3)
                class G: pass
                def h(): pass
                async def i(): pass
                try:
                    import tomllib as J
                except ImportError as K:
                    J = None
                if A:
                    L = 1
                else:
                    M = 2
                with open(os.devnull) as N:
                    pass
                for O in ():
                    pass
            """,
            "nemo_gym/pkg/__init__.py": "from nemo_gym.defs import A as P\n",
            "nemo_gym/pkg/sub.py": "",
            "nemo_gym/user.py": """
                from nemo_gym.defs import os, AnyType, A, B, C, D, E, F, G, h, i, J, K, L, M, N, O
                from nemo_gym.pkg import P, sub
                from nemo_gym.defs import Q
            """,
        })
        found = unresolved_imports(root, "nemo_gym.user")
        assert [i.target for i in found] == ["nemo_gym.defs.Q"]
        assert python_imports(root, "nemo_gym.user", tmp_path) == ["ImportError", "nemo_gym.defs"]

    def test_a_star_import_or_a_module_getattr_is_taken_to_bind_every_name(self, tmp_path):
        root = write(tmp_path / "gym", {
            "nemo_gym/__init__.py": "",
            "nemo_gym/star.py": "from os.path import *\n",
            "nemo_gym/lazy.py": "def __getattr__(name):\n    return name\n",
            "nemo_gym/user.py": "from nemo_gym.star import join\nfrom nemo_gym.lazy import X\n",
        })
        assert unresolved_imports(root, "nemo_gym.user") == ()
        assert python_imports(root, "nemo_gym.user", tmp_path) is None

    def test_relative_imports_parent_packages_and_type_checking_are_followed(self, tmp_path):
        root = write(tmp_path / "gym", {
            "nemo_gym/__init__.py": "from nemo_gym.top import T\n",
            "nemo_gym/top.py": "",
            "nemo_gym/tic/__init__.py": "from .records import R\nfrom . import absent_sub\n",
            "nemo_gym/tic/records.py": """
                from typing import TYPE_CHECKING
                from ..top import U
                if TYPE_CHECKING:
                    from nemo_gym.tic.sink import Never
                class R: pass
            """,
            "nemo_gym/tic/sink.py": "from .records import R\n",
        })
        found = unresolved_imports(root, "nemo_gym.tic.sink")
        assert targets(found, at_import=True) == {
            "nemo_gym.top.T", "nemo_gym.tic.absent_sub", "nemo_gym.top.U"}
        assert targets(found, at_import=False) == {"nemo_gym.tic.sink.Never"}
        assert python_imports(root, "nemo_gym.tic.sink", tmp_path) == ["ImportError",
                                                                       "nemo_gym.top"]

    def test_a_directory_without_init_is_a_namespace_package_as_python_has_it(self, tmp_path):
        root = write(tmp_path / "gym", {
            "nemo_gym/__init__.py": "",
            "nemo_gym/ns/mod.py": "A = 1\n",
            "nemo_gym/user.py": "from nemo_gym.ns.mod import A\nfrom nemo_gym.ns import mod\n",
        })
        assert unresolved_imports(root, "nemo_gym.user") == ()
        assert python_imports(root, "nemo_gym.user", tmp_path) is None

    def test_a_third_party_package_not_installed_is_named_as_a_package(self, tmp_path):
        root = write(tmp_path / "gym", {
            "nemo_gym/__init__.py": "",
            "nemo_gym/m.py": "import orjson\nfrom fastapi import FastAPI\n",
        })
        found = unresolved_imports(root, "nemo_gym.m", installed=lambda p: p != "orjson")
        assert [(i.module, i.name, i.lack) for i in found] == [("orjson", None, Lack.PACKAGE)]
        assert found[0].describe() == "no installed package orjson (imported by nemo_gym.m line 1)"

    def test_the_module_asked_for_may_itself_be_what_is_lacking(self, tmp_path):
        root = write(tmp_path / "gym", {"nemo_gym/__init__.py": ""})
        (item,) = unresolved_imports(root, MODULE)
        assert (item.module, item.lack, item.at_import) == ("nemo_gym._checkpoint", Lack.MODULE,
                                                           True)
        assert item.describe() == ("no module nemo_gym._checkpoint (needed for "
                                   "nemo_gym._checkpoint.model itself)")


# -- the real code ------------------------------------------------------------------------------
def test_the_check_agrees_with_pythons_import_on_the_real_checkout(real_gym, tmp_path):
    modules = [MODULE, *modules_of(real_gym, "nemo_gym._checkpoint",
                                   "nemo_gym.token_id_capture")]
    compared = 0
    for module in modules:
        outcome = python_imports(real_gym, module, tmp_path)
        if outcome is not None and outcome[0] != "ImportError":
            continue  # failed for a reason of its own, not a lacking import
        lacking = [i.describe() for i in unresolved_imports(real_gym, module) if i.at_import]
        assert (outcome is None) == (not lacking), (module, outcome, lacking)
        compared += 1
    assert compared >= 2


