"""Every notebook in ``notebooks/`` run top to bottom by a real kernel, and held to its rules:
it opens by saying what it answers, takes its run in a first cell tagged ``parameters``,
defines no logic of its own, is stored without outputs, and ends by asserting its finding."""

from __future__ import annotations

import ast
import sys

import nbformat
import pytest

from tests.store_kinds import STORE_KINDS, store_target

from .notebook_runner import NOTEBOOKS, execute, load, parameters_index, text_outputs

NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
# what the suite passes on top of each notebook's defaults: its scratch directory, and a
# quarter-size checkpoint_scale (2,000 and 4,000 rollouts instead of 8,000 and 16,000)
PARAMETERS = {"checkpoint_scale.ipynb": {"SCALE": 0.25}}
ALLOWED_IMPORTS = ("rolloutscope", "panel")
LOGIC = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.For,
         ast.AsyncFor, ast.While, ast.If, ast.IfExp, ast.Try, ast.With, ast.ListComp,
         ast.SetComp, ast.DictComp, ast.GeneratorExp)


def code_cells(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_the_four_postmortem_notebooks_are_there():
    assert NAMES == ["checkpoint_scale.ipynb", "fleet_quarantine_postmortem.ipynb",
                     "import_rl_logs.ipynb", "snapshot_vs_deadline_postmortem.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_a_notebook_opens_by_saying_what_it_answers(name):
    first = load(name).cells[0]
    assert first.cell_type == "markdown"
    assert first.source.startswith("# ") and "**What this answers.**" in first.source


@pytest.mark.parametrize("name", NAMES)
def test_a_notebooks_first_code_cell_holds_its_parameters_and_nothing_else(name):
    nb = load(name)
    index = parameters_index(nb)
    assert [c.cell_type for c in nb.cells[:index]] == ["markdown"]
    for node in ast.parse(nb.cells[index].source).body:
        assert isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant | ast.Tuple)


@pytest.mark.parametrize("name", NAMES)
def test_a_notebook_defines_no_logic_and_imports_only_the_package_and_panel(name):
    for source in code_cells(load(name)):
        tree = ast.parse(source)
        for node in ast.walk(tree):
            assert not isinstance(node, LOGIC), f"{type(node).__name__} in:\n{source}"
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in ALLOWED_IMPORTS for a in node.names)
            if isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] in ALLOWED_IMPORTS


@pytest.mark.parametrize("name", NAMES)
def test_a_notebook_is_stored_without_outputs(name):
    for cell in load(name).cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.parametrize("name", NAMES)
def test_a_notebook_ends_by_asserting_its_finding(name):
    last = load(name).cells[-1]
    assert last.cell_type == "code"
    assert any(isinstance(n, ast.Assert) for n in ast.parse(last.source).body)


def test_the_notebook_kernel_runs_this_interpreter(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys\nprint(sys.executable)")])
    execute(nb, cwd=tmp_path)
    assert nb.cells[0].outputs[0].text.strip() == sys.executable


def test_a_failing_cell_fails_the_run(tmp_path):
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("assert 1 == 2, 'no'")])
    with pytest.raises(CellExecutionError, match="AssertionError"):
        execute(nb, cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_notebook_runs_top_to_bottom_and_its_final_assertions_hold(name, tmp_path):
    parameters = {"WORKDIR": str(tmp_path), **PARAMETERS.get(name, {})}
    nb = execute(load(name), parameters)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    assert "Traceback" not in text_outputs(nb)


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_postmortem_notebook_reads_the_run_it_is_given_from_either_store_kind(kind, tmp_path):
    from rolloutscope.postmortem import run_tables

    capture = store_target(kind, tmp_path, "capture")
    run = run_tables.replay_scenario("snapshot-outlasts-deadline", capture)
    nb = execute(load("snapshot_vs_deadline_postmortem.ipynb"),
                 {"RUN": str(capture), "WORKDIR": str(tmp_path / "work")})
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []  # and its final cell's assertions held (a failing cell raises)
    shown = text_outputs(nb)
    # the notebook worked on the store it was given, not on a replay of its own
    assert run.run_id in shown and "replayed_from=None" in shown
    assert ("LakeSpec(catalog='sqlite'" in shown) == (kind == "lake-sqlite")
