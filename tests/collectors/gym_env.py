"""A released NeMo-Gym (0.7.0, with the nemo-lens 0.1.0 PyPI resolves for it) in a Python 3.13
environment that the tests build once and keep under ~/.cache/rolloutscope/.

nemo-gym >= 0.5 declares Requires-Python >= 3.13.14; a 3.13 older than that runs it fine, so
the install passes ``--ignore-requires-python``. The environment is left without the
compatibility shim: a test that installs it removes it again.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

GYM_REQUIREMENT = "nemo-gym[telemetry]==0.7.0"
LENS_VERSION = "0.1.0"


def python313() -> str | None:
    """A Python >= 3.13: $ROLLOUTSCOPE_PYTHON313, python3.13/3.14 on PATH, or pyenv's."""
    candidates = [os.environ.get("ROLLOUTSCOPE_PYTHON313"), shutil.which("python3.13"),
                  shutil.which("python3.14"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[3-9]*/bin/python")))]
    for candidate in candidates:
        if not candidate or not Path(candidate).exists():
            continue
        probe = subprocess.run([candidate, "-c",
                                "import sys; sys.exit(sys.version_info < (3, 13))"],
                               capture_output=True)
        if probe.returncode == 0:  # a pyenv shim for an inactive version exits non-zero
            return candidate
    return None


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rolloutscope"


def gym_venv() -> Path:
    """The cached environment's root, built on first use (about a minute and 1.4 GB)."""
    base = python313()
    if base is None:
        pytest.skip("released nemo-gym needs Python >= 3.13 and none was found (set "
                    "ROLLOUTSCOPE_PYTHON313, or install python3.13)")
    venv = cache_dir() / "nemo-gym-0.7.0-venv"
    with _locked("build"):  # the suite's two workers (pytest-xdist) may both want it first
        return _build_gym_venv(base, venv)


@contextmanager
def shim_held() -> Iterator[None]:
    """The cached environment's shim is this block's to install and remove: a test in the
    other pytest-xdist worker that changes it waits until the block ends."""
    with _locked("shim"):
        yield


@contextmanager
def _locked(what: str) -> Iterator[None]:
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f"nemo-gym-0.7.0-venv.{what}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build_gym_venv(base: str, venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    check = ("import importlib.metadata as m, sys; "
             f"sys.exit(not (m.version('nemo-gym') == '0.7.0' and "
             f"m.version('nemo-lens') == '{LENS_VERSION}'))")
    if subprocess.run([str(python), "-c", check], capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--ignore-requires-python", GYM_REQUIREMENT], check=True, timeout=1800)
    return venv


@pytest.fixture(scope="session")
def gym_python() -> str:
    return str(gym_venv() / "bin" / "python")
