"""A synthetic run written by ``benchmarks/synthetic.py`` (the benchmarks' generator, loaded
from its file: ``benchmarks/`` is not a package), for tests that need a run of some size."""

from __future__ import annotations

import importlib.util
from pathlib import Path

GENERATOR = Path(__file__).parents[1] / "benchmarks" / "synthetic.py"


def synthetic_run(path: Path, *, spans: int, commits: int = 1, **options) -> Path:
    """``path`` holding a synthetic run of about ``spans`` spans (written in ``commits``
    commits, the maintained rows derived after each; ``options``: the generator's others);
    ``path``."""
    spec = importlib.util.spec_from_file_location("synthetic", GENERATOR)
    synthetic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synthetic)
    synthetic.generate(path, spans=spans, commits=commits, **options)
    return path
