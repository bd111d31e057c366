"""What an upstream module imports that a checkout does not have, read from the source alone.

A Gym checkout assembled from one branch of the partial-rollout checkpoint stack and files of
another loads up to the first name Python cannot find, and says only that one. Deciding whether
a revision can be driven at all needs every such name, so this walks the module and everything
it imports from the same upstream package -- without running any of it -- and lists each import
the checkout cannot satisfy:

- ``module``: the checkout has no file for the module imported from;
- ``name``: the module is there but binds no such name (and has no submodule of that name);
- ``package``: a third-party package the environment does not have.

Each finding says whether it stops the module loading (``at_import``: a statement run when the
module or one it loads is imported, parent packages' ``__init__`` included) or only a later call
(inside a function, or under ``if TYPE_CHECKING:``). A module with a star import or a
module-level ``__getattr__`` is taken to bind every name: the walk reports no name it cannot be
sure of.
"""

from __future__ import annotations

import ast
import importlib.util
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = ["Lack", "UnresolvedImport", "imported_names", "unresolved_imports"]

ANY_NAME = "*"  # what a module with a star import or a module-level __getattr__ binds


class Lack(StrEnum):
    MODULE = "module"  # the checkout has no such module
    NAME = "name"  # the module binds no such name
    PACKAGE = "package"  # a third-party package that is not installed


@dataclass(frozen=True, kw_only=True, order=True)
class UnresolvedImport:
    importer: str  # the dotted module holding the import statement
    line: int
    module: str  # the module imported from (the top-level package, for a missing package)
    name: str | None  # the name imported from it; None when the module itself is lacking
    lack: Lack
    at_import: bool  # whether loading the module runs this statement

    @property
    def target(self) -> str:
        return self.module if self.name is None else f"{self.module}.{self.name}"

    def describe(self) -> str:
        what = {Lack.MODULE: "no module", Lack.NAME: "no name",
                Lack.PACKAGE: "no installed package"}[self.lack]
        if self.line == 0:  # the module asked about is itself lacking
            return f"{what} {self.target} (needed for {self.importer} itself)"
        when = "" if self.at_import else ", when called"
        return f"{what} {self.target} (imported by {self.importer} line {self.line}{when})"


def unresolved_imports(root: Path, module: str, *,
                       installed: Callable[[str], bool] | None = None
                       ) -> tuple[UnresolvedImport, ...]:
    """Every import of ``module`` and of the upstream modules it reaches that the checkout at
    ``root`` cannot satisfy, sorted. ``installed(package)`` says whether a third-party top-level
    package can be imported here (default: it can be found on this interpreter's path)."""
    root = Path(root)
    top = module.split(".")[0]
    installed = installed or _findable
    found: set[UnresolvedImport] = set()
    bound_in: dict[str, frozenset[str]] = {}  # each module's top-level names, parsed once
    reached: dict[str, bool] = {}  # module -> whether it is reached when ``module`` loads
    queue: deque[tuple[str, bool]] = deque(
        (parent, True) for parent in _with_parents(module))
    while queue:
        name, at_import = queue.popleft()
        if name in reached and (reached[name] or not at_import):
            continue
        reached[name] = at_import
        path = _module_file(root, name)
        if path is None:
            continue  # reported where it is imported (or it is the module asked about)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for statement, deferred in _import_statements(tree):
            runs = at_import and not deferred
            for target, names in _targets(statement, name, is_package=path.name == "__init__.py"):
                if target.split(".")[0] != top:
                    package = target.split(".")[0]
                    if package != "__future__" and not installed(package):
                        found.add(UnresolvedImport(importer=name, line=statement.lineno,
                                                   module=package, name=None,
                                                   lack=Lack.PACKAGE, at_import=runs))
                    continue
                lacking = next((m for m in _with_parents(target) if not _exists(root, m)), None)
                if lacking is not None:
                    found.add(UnresolvedImport(importer=name, line=statement.lineno,
                                               module=lacking, name=None, lack=Lack.MODULE,
                                               at_import=runs))
                    continue
                queue.extend((m, runs) for m in _with_parents(target))
                if target not in bound_in:
                    bound_in[target] = _bound_names(_module_file(root, target), target)
                bound = bound_in[target]
                for imported in names:
                    submodule = f"{target}.{imported}"
                    if _exists(root, submodule):
                        queue.extend((m, runs) for m in _with_parents(submodule))
                    elif ANY_NAME not in bound and imported not in bound:
                        found.add(UnresolvedImport(importer=name, line=statement.lineno,
                                                   module=target, name=imported,
                                                   lack=Lack.NAME, at_import=runs))
    if not _exists(root, module):
        lacking = next(m for m in _with_parents(module) if not _exists(root, m))
        found.add(UnresolvedImport(importer=module, line=0, module=lacking, name=None,
                                   lack=Lack.MODULE, at_import=True))
    # a statement reached both ways is reported once, as the stronger
    strongest: dict[tuple, UnresolvedImport] = {}
    for item in found:
        key = (item.importer, item.line, item.module, item.name, item.lack)
        if key not in strongest or item.at_import:
            strongest[key] = item
    return tuple(sorted(strongest.values()))


def imported_names(source: str, module: str, *, top: str) -> dict[str, tuple[str, ...]]:
    """What ``module`` (its source text) imports from its own upstream package, by module:
    the import surface a recorded revision is compared on."""
    out: dict[str, set[str]] = {}
    for statement, _ in _import_statements(ast.parse(source)):
        for target, names in _targets(statement, module, is_package=False):
            if target.split(".")[0] == top:
                out.setdefault(target, set()).update(names)
    return {target: tuple(sorted(names)) for target, names in sorted(out.items())}


# -- reading the source ----------------------------------------------------------------------------
def _findable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _exists(root: Path, module: str) -> bool:
    """A module file, a package, or a namespace package (a directory without ``__init__``)."""
    return _module_file(root, module) is not None or root.joinpath(*module.split(".")).is_dir()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_statements(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, and whether it is deferred: in a function body (run only when
    called) or under ``if TYPE_CHECKING:`` (never run)."""

    def walk(node: ast.AST, deferred: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, deferred
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from walk(child, True)
            for child in node.orelse:
                yield from walk(child, deferred)
            return
        inner = deferred or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            yield from walk(child, inner)

    yield from walk(tree, False)


def _targets(statement: ast.Import | ast.ImportFrom, importer: str, *,
             is_package: bool) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(module imported from, names taken from it) for one statement."""
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            yield alias.name, ()
        return
    if statement.level:
        package = importer.split(".")
        if not is_package:
            package = package[:-1]
        package = package[:len(package) - (statement.level - 1)]
        base = ".".join(package + ([statement.module] if statement.module else []))
    else:
        base = statement.module or ""
    names = tuple(alias.name for alias in statement.names if alias.name != "*")
    yield base, names


def _bound_names(path: Path | None, module: str) -> frozenset[str]:
    """The names a module binds at its top level (``ANY_NAME`` when it cannot be known). A
    package's ``from . import sub`` binds only what its submodule file provides, so it is not
    counted here."""
    if path is None:
        return frozenset()
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()

    def targets(node: ast.expr) -> None:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                targets(element)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                if node.name == "__getattr__" and not isinstance(node, ast.ClassDef):
                    names.add(ANY_NAME)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    targets(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets(node.target)
            elif isinstance(node, ast.Import):
                names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                (base, _), = _targets(node, module, is_package=is_package)
                for alias in node.names:
                    if alias.name == "*":
                        names.add(ANY_NAME)
                    elif base != module:
                        names.add(alias.asname or alias.name)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                targets(node.target)
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
                visit(node.body)
            elif isinstance(node, (ast.If, ast.While)):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                visit(node.body)
                for handler in node.handlers:
                    if handler.name:
                        names.add(handler.name)
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.Match):
                for case in node.cases:
                    visit(case.body)
            elif type(node).__name__ == "TypeAlias":
                targets(node.name)  # type: ignore[attr-defined]
        # walrus targets at module level are too rare to matter and are not followed

    visit(tree.body)
    return frozenset(names)
