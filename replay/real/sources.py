"""Where the real NeMo-RL and NeMo-Gym code comes from, and how it is loaded.

Neither is installable from PyPI for this purpose: ``nemo-rl`` there is a placeholder, and
``nemo-gym`` 0.7.0 has no ``_checkpoint`` package (the partial-rollout checkpoint stack lives on
Gym branches). So the code comes from the user's environment, in this order:

1. a path given on the command line (``--participant-path nemo_rl=CHECKOUT``), or in
   ``paths`` from Python;
2. the environment variables ``ROLLOUTSCOPE_NEMO_RL_SRC`` / ``ROLLOUTSCOPE_NEMO_GYM_SRC``;
3. an installed checkout (``pip install -e``): the top-level package's directory, found without
   importing it.

Each is a checkout root: the directory holding ``nemo_rl/`` or ``nemo_gym/``. The value
``doubles`` selects this project's stand-ins (``rolloutscope.replay.doubles``), which have the
upstream signatures and nothing else of upstream.

Loading. NeMo-RL's modules that the replay drives are self-contained files whose packages'
``__init__`` pull in transformers, vLLM and torch, so each is loaded **by file**, under its
upstream dotted name, without its package ``__init__``. ``rollout_manager.py`` cannot be loaded
that way outside a full RL environment (torch, and Python >= 3.12 for its pydantic models): then
only the named classes (``_Deadline``) are taken from the file and executed with whichever of
the module's imports resolve -- the record says so (``LoadMethod.EXTRACTED``). NeMo-Gym's
checkpoint modules import each other, so the root goes on ``sys.path`` and they are imported
normally; a module the checkout lacks, or a package the environment lacks, is named in the
error.
"""

from __future__ import annotations

import __future__
import ast
import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import Any

from rolloutscope.replay.errors import ReplayError
from rolloutscope.replay.real.imports import UnresolvedImport, unresolved_imports

DOUBLES = "doubles"


class Upstream(StrEnum):
    NEMO_RL = "nemo_rl"
    NEMO_GYM = "nemo_gym"

    @property
    def repository(self) -> str:
        return {"nemo_rl": "NVIDIA-NeMo/RL", "nemo_gym": "NVIDIA-NeMo/Gym"}[self.value]

    @property
    def env_var(self) -> str:
        return f"ROLLOUTSCOPE_{self.value.upper()}_SRC"


class LoadMethod(StrEnum):
    IMPORT = "import"  # imported through its package, as the user's environment has it
    FILE = "file"  # the module's file executed on its own, without its package __init__
    EXTRACTED = "extracted"  # only the named classes, taken from the file
    DOUBLE = "double"  # this project's stand-in with the upstream signatures


# each upstream file the signature table records -> the stand-in that mirrors it
DOUBLE_OF: dict[tuple[str, str], str] = {
    ("nemo_rl.models.generation.fleet_health", "7ea279a"):
        "rolloutscope.replay.doubles.rl_fleet_health",
    ("nemo_rl.models.generation.generation_router", "7ea279a"):
        "rolloutscope.replay.doubles.rl_generation_router",
    ("nemo_rl.experience.failures", "7ea279a"): "rolloutscope.replay.doubles.rl_failures",
    ("nemo_rl.experience.rollout_manager", "7ea279a"):
        "rolloutscope.replay.doubles.rl_rollout_manager",
    ("nemo_rl.experience.rollout_manager", "00420a1"):
        "rolloutscope.replay.doubles.rl_rollout_manager_00420a1",
    ("nemo_gym.episode_types", "05bf55a"): "rolloutscope.replay.doubles.gym_episode_types",
    ("nemo_gym._checkpoint.errors", "7f40a59"): "rolloutscope.replay.doubles.gym_errors",
    ("nemo_gym._checkpoint.control", "011c338"): "rolloutscope.replay.doubles.gym_control",
    ("nemo_gym._checkpoint.agent", "011c338"): "rolloutscope.replay.doubles.gym_agent",
}
# what ``--participant-path UPSTREAM=doubles`` loads for each upstream module: main's version
DOUBLE_MODULES = {module: double for (module, commit), double in DOUBLE_OF.items()
                  if commit != "00420a1"}


class UpstreamUnavailableError(ReplayError):
    """The upstream code a participant needs is not in this environment; says how to add it."""

    def __init__(self, upstream: Upstream, detail: str) -> None:
        self.upstream = upstream
        self.detail = detail
        super().__init__(
            f"{upstream.repository} code unavailable: {detail}. Point {upstream.env_var} (or "
            f"--participant-path {upstream.value}=CHECKOUT) at a checkout root holding "
            f"{upstream.value}/, or use --participant-path {upstream.value}={DOUBLES} for this "
            f"project's stand-ins")


class UpstreamImportError(ReplayError):
    """The upstream code is there but one of its modules cannot be imported here."""

    def __init__(self, upstream: Upstream, module: str, missing: str | None,
                 detail: str, *, unresolved: tuple[UnresolvedImport, ...] = ()) -> None:
        self.upstream = upstream
        self.module = module
        self.missing = missing  # the module name Python could not find, when that is the cause
        # every import the checkout cannot satisfy, read from the source (Python stops at one)
        self.unresolved = unresolved
        if missing is not None and missing.split(".")[0] == upstream.value:
            why = (f"the checkout has no module {missing} (needed by {module}); "
                   f"the checkout is incomplete or from a branch without it")
        elif missing is not None:
            why = f"{module} needs the Python package {missing.split('.')[0]!r}, not installed"
        else:
            why = f"{module} failed to import: {detail}"
        lacking = [item.describe() for item in unresolved if item.at_import]
        if lacking:
            why += f". Everything it lacks to load: {'; '.join(lacking)}"
        super().__init__(f"{upstream.repository}: {why}")


@dataclass(frozen=True, kw_only=True)
class LoadedModule:
    upstream: Upstream
    name: str  # the upstream dotted name
    module: ModuleType
    file: Path | None
    loaded_by: LoadMethod
    note: str = ""  # why it was not imported normally, when it was not

    @property
    def sha256(self) -> str | None:
        return file_sha256(self.file) if self.file is not None else None


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class UpstreamCode:
    """One upstream codebase: a checkout root, or the project's doubles."""

    upstream: Upstream
    root: Path | None
    found_by: str  # "--participant-path", the env var, "installed", "doubles"
    _loaded: dict[str, LoadedModule] = field(default_factory=dict)

    @property
    def doubles(self) -> bool:
        return self.root is None

    # -- finding it -----------------------------------------------------------------------------
    @classmethod
    def locate(cls, upstream: Upstream | str, *, paths: Mapping[str, str] | None = None,
               environ: Mapping[str, str] | None = None) -> UpstreamCode:
        upstream = Upstream(upstream)
        environ = os.environ if environ is None else environ
        given = (paths or {}).get(upstream.value)
        if given is not None:
            return cls._at(upstream, given, "--participant-path")
        if environ.get(upstream.env_var):
            return cls._at(upstream, environ[upstream.env_var], upstream.env_var)
        spec = importlib.util.find_spec(upstream.value)
        if spec is not None and spec.submodule_search_locations:
            root = Path(next(iter(spec.submodule_search_locations))).parent
            return cls._checked(upstream, root, "installed")
        raise UpstreamUnavailableError(
            upstream, f"no path given, {upstream.env_var} is not set and no {upstream.value} "
                      f"package is installed")

    @classmethod
    def _at(cls, upstream: Upstream, value: str, found_by: str) -> UpstreamCode:
        if value == DOUBLES:
            return cls(upstream, None, DOUBLES)
        return cls._checked(upstream, Path(value).expanduser(), found_by)

    @classmethod
    def _checked(cls, upstream: Upstream, root: Path, found_by: str) -> UpstreamCode:
        package = root / upstream.value
        if not package.is_dir():
            raise UpstreamUnavailableError(upstream, f"{root} ({found_by}) holds no "
                                                     f"{upstream.value}/ package")
        return cls(upstream, root.resolve(), found_by)

    # -- what it is -----------------------------------------------------------------------------
    def version(self) -> str | None:
        """The package version, read from ``package_info.py`` without running it."""
        if self.root is None:
            return None
        info = self.root / self.upstream.value / "package_info.py"
        if not info.is_file():
            return None
        values: dict[str, Any] = {}
        for node in ast.parse(info.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name) and isinstance(node.value, ast.Constant):
                values[node.targets[0].id] = node.value.value
        parts = [values.get(k) for k in ("MAJOR", "MINOR", "PATCH")]
        if any(p is None for p in parts):
            return None
        return ".".join(map(str, parts)) + str(values.get("PRE_RELEASE", "") or "")

    def git_commit(self) -> str | None:
        """HEAD of the checkout, when it is a git work tree."""
        if self.root is None:
            return None
        try:
            out = subprocess.run(["git", "-C", str(self.root), "rev-parse", "HEAD"],
                                 capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        commit = out.stdout.strip()
        return commit if out.returncode == 0 and len(commit) == 40 else None

    # -- loading --------------------------------------------------------------------------------
    def module(self, name: str, *, classes: Iterable[str] = ()) -> LoadedModule:
        """The upstream module ``name`` (its stand-in, for the doubles). ``classes``: the ones
        the caller needs, which may be extracted from the file when the module cannot load."""
        if name in self._loaded:
            return self._loaded[name]
        if self.root is None:
            loaded = self._double(name)
        elif self.upstream is Upstream.NEMO_GYM:
            loaded = self._import(name)
        else:
            loaded = self._by_file(name, tuple(classes))
        self._loaded[name] = loaded
        return loaded

    def _double(self, name: str) -> LoadedModule:
        target = DOUBLE_MODULES.get(name)
        if target is None:
            raise UpstreamUnavailableError(self.upstream, f"this project has no stand-in for "
                                                          f"{name}")
        module = importlib.import_module(target)
        return LoadedModule(upstream=self.upstream, name=name, module=module,
                            file=Path(module.__file__ or ""), loaded_by=LoadMethod.DOUBLE)

    def _file_of(self, name: str) -> Path:
        assert self.root is not None
        path = self.root.joinpath(*name.split(".")).with_suffix(".py")
        if not path.is_file():
            raise UpstreamImportError(self.upstream, name, name, f"no file {path}")
        return path

    def _import(self, name: str) -> LoadedModule:
        """Gym: the root on sys.path, the module imported with its package."""
        assert self.root is not None
        root = str(self.root)
        present = sys.modules.get(self.upstream.value)
        if present is not None and not str(getattr(present, "__file__", "") or "").startswith(
                root):
            raise UpstreamImportError(self.upstream, name, None,
                                      f"another {self.upstream.value} is already imported "
                                      f"from {present.__file__}")
        if root not in sys.path:
            sys.path.insert(0, root)
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise UpstreamImportError(self.upstream, name, exc.name, str(exc),
                                      unresolved=self._unresolved(name)) from None
        except Exception as exc:  # upstream code failing at import is a finding, not a crash
            unresolved = self._unresolved(name) if isinstance(exc, ImportError) else ()
            raise UpstreamImportError(self.upstream, name, None,
                                      f"{type(exc).__name__}: {exc}",
                                      unresolved=unresolved) from None
        return LoadedModule(upstream=self.upstream, name=name, module=module,
                            file=Path(module.__file__ or ""), loaded_by=LoadMethod.IMPORT)

    def _unresolved(self, name: str) -> tuple[UnresolvedImport, ...]:
        """All that ``name`` lacks in this checkout, for an error that would name only one."""
        assert self.root is not None
        try:
            return unresolved_imports(self.root, name)
        except (OSError, SyntaxError, UnicodeDecodeError):  # the import error says enough
            return ()

    def _by_file(self, name: str, classes: tuple[str, ...]) -> LoadedModule:
        """RL: the module's file on its own (its package __init__ needs transformers)."""
        path = self._file_of(name)
        existing = sys.modules.get(name)
        if existing is not None and Path(getattr(existing, "__file__", "") or "") == path:
            return LoadedModule(upstream=self.upstream, name=name, module=existing, file=path,
                                loaded_by=LoadMethod.FILE)
        alias = name if existing is None else f"_rolloutscope_upstream.{name}"
        spec = importlib.util.spec_from_file_location(alias, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module  # dataclasses resolve their module through sys.modules
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[alias]
            if not classes:
                missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
                raise UpstreamImportError(self.upstream, name, missing,
                                          f"{type(exc).__name__}: {exc}") from None
            return self._extracted(name, path, classes, f"{type(exc).__name__}: {exc}")
        return LoadedModule(upstream=self.upstream, name=name, module=module, file=path,
                            loaded_by=LoadMethod.FILE)

    def _extracted(self, name: str, path: Path, classes: tuple[str, ...],
                   why: str) -> LoadedModule:
        """The named classes of ``path``, executed with the module's imports that resolve
        (the upstream package's own modules loaded by file)."""
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        module = ModuleType(f"_rolloutscope_extracted.{name}")
        module.__file__ = str(path)
        sys.modules[module.__name__] = module  # where the runtime finds it to virtualise time
        namespace = vars(module)
        skipped: list[str] = []
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if not self._bind_import(node, namespace):
                    skipped.append(ast.unparse(node))
        found = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        missing = [c for c in classes if c not in found]
        if missing:
            raise UpstreamImportError(self.upstream, name, None,
                                      f"{why}; and {path} defines no {', '.join(missing)}")
        flags = __future__.annotations.compiler_flag
        for cls in classes:
            code = compile(ast.Module(body=[found[cls]], type_ignores=[]), str(path), "exec",
                           flags=flags, dont_inherit=True)
            exec(code, namespace)  # noqa: S102 - the user's own upstream source, by request
        note = (f"module import failed ({why}); classes {', '.join(classes)} taken from the "
                f"file")
        return LoadedModule(upstream=self.upstream, name=name, module=module, file=path,
                            loaded_by=LoadMethod.EXTRACTED, note=note)

    def _bind_import(self, node: ast.Import | ast.ImportFrom, namespace: dict) -> bool:
        top = self.upstream.value
        try:
            if isinstance(node, ast.ImportFrom):
                if node.level or node.module is None:
                    return False
                if node.module == "__future__":
                    return True
                if node.module.split(".")[0] == top:
                    source: Any = self.module(node.module).module
                else:
                    source = importlib.import_module(node.module)
                for alias in node.names:
                    namespace[alias.asname or alias.name] = getattr(source, alias.name)
            else:
                for alias in node.names:
                    if alias.name.split(".")[0] == top:
                        return False
                    imported = importlib.import_module(alias.name)
                    namespace[alias.asname or alias.name.split(".")[0]] = (
                        imported if alias.asname else importlib.import_module(
                            alias.name.split(".")[0]))
        except Exception:  # an import this class may not need; the class fails later if it does
            return False
        return True


__all__ = ["DOUBLES", "DOUBLE_MODULES", "DOUBLE_OF", "LoadMethod", "LoadedModule", "Upstream",
           "UpstreamCode", "UpstreamImportError", "UpstreamUnavailableError", "file_sha256"]
