"""rolloutscope: observability and replay workbench for large RL training runs.

Three parts live in top-level folders of the source tree, ``collectors/``, ``dashboard/`` and
``replay/``, which the install maps onto ``rolloutscope.collectors``, ``rolloutscope.dashboard``
and ``rolloutscope.replay`` (``setup.py``). Run from a clone that was never installed, those
names cannot be found: the finder below, consulted only after every other one failed, turns
that into an error saying how to install instead of a bare ModuleNotFoundError.
"""

import sys
from importlib.abc import MetaPathFinder
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rolloutscope")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"

MAPPED_FOLDERS = {"rolloutscope.collectors": "collectors", "rolloutscope.dashboard": "dashboard",
                  "rolloutscope.replay": "replay"}


class _NotInstalledFinder(MetaPathFinder):
    """Last on ``sys.meta_path``: it sees only names nothing else could find."""

    def find_spec(self, fullname, path=None, target=None):
        top = ".".join(fullname.split(".")[:2])
        folder = MAPPED_FOLDERS.get(top)
        if folder is None:
            return None
        raise ModuleNotFoundError(
            f"No module named {fullname!r}: {top} is the source tree's top-level {folder}/ "
            f"folder, which only an install maps into the rolloutscope package. From the "
            f"clone's root run `bash scripts/setup.sh` (then use .venv/bin/rolloutscope or "
            f"`source .venv/bin/activate`), or `pip install -e .` in your own environment.",
            name=fullname)


if not any(isinstance(f, _NotInstalledFinder) for f in sys.meta_path):
    sys.meta_path.append(_NotInstalledFinder())
