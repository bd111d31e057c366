"""Released NeMo-Gym 0.7.0 with the nemo-lens 0.1.0 that PyPI ships: the check and the fix.

Two files here run inside the *Gym* environment, not rolloutscope's, and import nothing from
rolloutscope: ``nemo_lens_gym070_compat.py`` (the compatibility shim, installed into that
environment's site-packages with a ``.pth`` line) and ``probe.py`` (what ``rolloutscope doctor
gym`` runs there and reads back as JSON). ``doctor`` is the rolloutscope side: it runs the
probe, says what is wrong and what to do, and installs or removes the shim. See
docs/gym-telemetry.md.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SHIM_MODULE = "nemo_lens_gym070_compat"
PTH_NAME = f"{SHIM_MODULE}.pth"


def packaged(name: str) -> Path:
    """The path of a file shipped in this package (the shim, the probe)."""
    return Path(str(resources.files(__name__) / name))
