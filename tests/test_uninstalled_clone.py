"""From a clone that was never installed, ``import rolloutscope`` works and the three mapped
parts fail with an error that says how to install, not a bare ModuleNotFoundError."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["rolloutscope.collectors", "rolloutscope.dashboard.app",
                                  "rolloutscope.replay"])
def test_a_mapped_part_says_how_to_install(tmp_path, name):
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "rolloutscope", clone / "rolloutscope",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # -S: no site-packages, so neither this checkout's install nor its mapping is visible
    done = subprocess.run([sys.executable, "-S", "-c", f"import rolloutscope; import {name}"],
                          cwd=clone, capture_output=True, text=True)
    assert done.returncode == 1
    assert "ModuleNotFoundError" in done.stderr
    assert "bash scripts/setup.sh" in done.stderr and "pip install -e ." in done.stderr
    top = ".".join(name.split(".")[:2])  # the mapped package is the first name not found
    assert f"No module named '{top}'" in done.stderr and f"top-level {top[13:]}/" in done.stderr


def test_an_installed_tree_is_not_affected():
    import rolloutscope.collectors.batching  # noqa: F401 - the install's mapping still wins

    with pytest.raises(ModuleNotFoundError) as caught:
        __import__("rolloutscope.no_such_part")
    assert "setup.sh" not in str(caught.value)
