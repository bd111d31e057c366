"""Executes a notebook top to bottom in a real Jupyter kernel, as a user's Jupyter would.

The kernel is the ``python3`` kernelspec; jupyter_client starts a spec whose command is
``python`` with this interpreter (``sys.executable``), so the kernel imports the package under
test. Parameters go in the way papermill puts them: a cell right after the one tagged
``parameters``, so the notebook's own defaults stay in the file untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
TIMEOUT_S = 240  # per cell


def load(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def parameters_index(nb: nbformat.NotebookNode) -> int:
    for i, cell in enumerate(nb.cells):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            return i
    raise LookupError("the notebook has no cell tagged 'parameters'")


def execute(nb: nbformat.NotebookNode, parameters: Mapping[str, Any] | None = None,
            *, cwd: Path = NOTEBOOKS) -> nbformat.NotebookNode:
    """Run every cell in order; a cell that raises fails the run with ``CellExecutionError``."""
    if parameters:
        source = "# injected by the test\n" + "\n".join(
            f"{name} = {value!r}" for name, value in parameters.items())
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(parameters_index(nb) + 1, cell)
    NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def text_outputs(nb: nbformat.NotebookNode) -> str:
    """Everything the cells printed or returned as plain text, for assertions."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(str(out.data.get("text/plain", "")))
    return "\n".join(parts)
