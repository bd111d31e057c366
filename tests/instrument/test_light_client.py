"""The client side stays light: what runs inside an observed process (a Gym server, a Ray worker,
the RL controller) imports OpenTelemetry, orjson and the standard library, never the workbench's
DuckDB, Arrow, pandas, NumPy, Panel, Bokeh or HoloViews, nor the store.

Each entry point is imported in a fresh interpreter (one already running the tests has them all
loaded), and ``connect()`` is called there for both protocols, so a lazy import on its path is
caught too; the client modules' source is read for imports inside functions.
docs/instrumenting.md#the-client-side-in-an-observed-process lists what the client side needs
installed; the last tests hold that list to what the entry points really load and to
pyproject.toml's pins.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rolloutscope.collectors.gym_compat import packaged
from tests.test_architecture import imports_of, modules

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "instrumenting.md"
GUIDE_SECTION = "## The client side in an observed process"

# the workbench's heavy dependencies: none may be loaded by the client side
HEAVY = ("duckdb", "pyarrow", "pandas", "numpy", "panel", "bokeh", "holoviews", "param",
         "tensorboard")
# what the client side loads where it is installed and does without where it is not: the SDK's
# resources read the process's details through psutil if they can
OPTIONAL = {"psutil"}
# the workbench's own modules, which load them
WORKBENCH = ("rolloutscope.store", "rolloutscope.collectors.exporter",
             "rolloutscope.collectors.service", "rolloutscope.collectors.otlp",
             "rolloutscope.collectors.query",
             "rolloutscope.collectors.importers", "rolloutscope.replay", "rolloutscope.dashboard",
             "rolloutscope.postmortem", "rolloutscope.export", "rolloutscope.cli")

# what an observed process imports: the adapters (each on its own as well as through the
# package), connect, the processor's sizing, the ground floor they use, the Gym shim and probe
ENTRY_POINTS = (
    "rolloutscope",
    "rolloutscope.vocabulary",
    "rolloutscope.clock",
    "rolloutscope.collectors.batching",
    "rolloutscope.collectors.connect",
    "rolloutscope.collectors.instrument",
    "rolloutscope.collectors.instrument.deadlines",
    "rolloutscope.collectors.instrument.fleet",
    "rolloutscope.collectors.instrument.gym_asgi",
    "rolloutscope.collectors.instrument.checkpoint_routes",
    "rolloutscope.collectors.instrument.markers",
    "rolloutscope.collectors.instrument.guard",
    "rolloutscope.collectors.gym_compat",
    "rolloutscope.collectors.gym_compat.nemo_lens_gym070_compat",
    "rolloutscope.collectors.gym_compat.probe",
    "rolloutscope.collectors.ray",  # the controller places the collectors; they run elsewhere
)

REPORT = textwrap.dedent("""
    import importlib, json, sys
    before = set(sys.modules)
    for name in {names!r}:
        importlib.import_module(name)
    for protocol in {protocols!r}:
        from rolloutscope.collectors.connect import connect
        connect(service_name="light", endpoint="http://127.0.0.1:9", protocol=protocol,
                metrics=True, logs=True).shutdown()
    loaded = {{name: getattr(sys.modules[name], "__file__", None)
              for name in set(sys.modules) - before}}
    print(json.dumps(loaded))
""")


def loaded_by(names: tuple[str, ...], *, protocols: tuple[str, ...] = (),
              path: Path | None = None) -> dict[str, str | None]:
    """The modules (and their files) that importing ``names``, then connecting over
    ``protocols``, loads in a fresh interpreter, ``path`` first on its sys.path."""
    command = [sys.executable, "-c", REPORT.format(names=names, protocols=protocols)]
    env = None if path is None else {**os.environ, "PYTHONPATH": str(path)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def top(module: str) -> str:
    return module.split(".")[0]


def heavy_and_workbench(loaded: dict[str, str | None]) -> dict[str, list[str]]:
    return {
        "heavy": sorted({top(m) for m in loaded if top(m) in HEAVY}),
        "workbench": sorted(m for m in loaded
                            if any(m == w or m.startswith(w + ".") for w in WORKBENCH)),
    }


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_an_entry_point_loads_no_heavy_module(name):
    loaded = loaded_by((name,))
    assert heavy_and_workbench(loaded) == {"heavy": [], "workbench": []}, (
        f"importing {name} loaded the workbench; the rolloutscope modules it loaded: "
        f"{sorted(m for m in loaded if top(m) == 'rolloutscope')}")


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_connecting_loads_no_heavy_module(protocol):
    loaded = loaded_by(("rolloutscope.collectors.instrument",), protocols=(protocol,))
    assert heavy_and_workbench(loaded) == {"heavy": [], "workbench": []}
    # the check sees what connect() imports lazily: the exporters of the protocol asked for
    exporter = "grpc" if protocol == "grpc" else "http"
    assert f"opentelemetry.exporter.otlp.proto.{exporter}.trace_exporter" in loaded


def test_the_check_sees_a_heavy_import():
    # the workbench side does load them: the checks above would see it (pandas too, once the
    # in-process exporter's store reads a frame; importing it loads DuckDB and Arrow)
    found = heavy_and_workbench(loaded_by(("rolloutscope.collectors.exporter",)))
    assert {"duckdb", "pyarrow", "numpy"} <= set(found["heavy"])
    assert "rolloutscope.store.store" in found["workbench"]


@pytest.mark.parametrize("file", ["nemo_lens_gym070_compat", "probe"])
def test_the_gym_side_files_import_nothing_of_rolloutscope(file):
    # they run in the Gym environment, from a folder on its path, where rolloutscope may be absent
    loaded = loaded_by((file,), path=packaged(f"{file}.py").parent)
    assert [m for m in loaded if top(m) == "rolloutscope"] == []
    assert heavy_and_workbench(loaded)["heavy"] == []


def test_no_client_module_imports_the_workbench_even_inside_a_function():
    # what the fresh interpreters above cannot see: an import that runs only when called.
    # collectors.ray is left out: its functions build the collector inside the Ray actor, on
    # the workbench side; importing it is checked above.
    client = {name for name in modules()
              if name in ("rolloutscope", "rolloutscope.vocabulary", "rolloutscope.clock",
                          "rolloutscope.collectors.batching", "rolloutscope.collectors.connect")
              or name.startswith(("rolloutscope.collectors.instrument",
                                  "rolloutscope.collectors.gym_compat"))}
    client.discard("rolloutscope.collectors.gym_compat.doctor")  # the CLI's side of the shim
    assert {"rolloutscope.collectors.instrument.fleet", "rolloutscope.collectors.connect",
            "rolloutscope.collectors.gym_compat.probe"} <= client
    offenders = {name: sorted(i for i in imports_of(modules()[name])
                              if i not in client and i != "rolloutscope.collectors")
                 for name in client}
    assert {k: v for k, v in offenders.items() if v} == {}


# -- the guide's install list -------------------------------------------------------------------
def guide_requirements() -> dict[str, list[Requirement]]:
    """The quoted requirements of each ``pip install`` line in the guide's client section, by
    what the line's comment says it is for (``http`` for the first, ``grpc`` for the line after
    a comment naming grpc)."""
    text = GUIDE.read_text()
    section = text[text.index(GUIDE_SECTION):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    found: dict[str, list[Requirement]] = {"http": [], "grpc": []}
    kind = "http"
    for line in re.sub(r"\\\n\s*", " ", section).splitlines():
        if line.lstrip().startswith("#") and "grpc" in line:
            kind = "grpc"
        if line.lstrip().startswith("pip install") and "--no-deps" not in line:
            found[kind] += [Requirement(spec) for spec in re.findall(r'"([^"]+)"', line)]
    return found


def closure(requirements: list[Requirement]) -> set[str]:
    """The distributions the requirements install, as installed here (extras left out)."""
    seen: set[str] = set()
    todo = [r.name for r in requirements]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for spec in metadata.requires(name) or ():
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def distributions_of(loaded: dict[str, str | None]) -> set[str]:
    """The installed distributions the loaded modules come from: by top-level name, and where
    several share one (the ``opentelemetry`` namespace is a dozen), by which of them has the
    module's file."""
    by_top = metadata.packages_distributions()
    files: dict[str, set[str]] = {}
    found = set()
    for name, file in loaded.items():
        candidates = by_top.get(top(name), ())
        if len(candidates) == 1:
            found.add(candidates[0])
            continue
        if not file:
            continue
        tail = "/".join(name.split(".")[:-1] + [Path(file).name]) \
            if Path(file).stem != "__init__" else "/".join(name.split(".") + ["__init__.py"])
        for dist in candidates:
            if dist not in files:
                files[dist] = {f.as_posix() for f in metadata.files(dist) or ()}
            if tail in files[dist]:
                found.add(dist)
    return {canonicalize_name(dist) for dist in found} - {"rolloutscope"}


def test_the_guide_lists_what_the_client_side_loads():
    listed = guide_requirements()
    assert listed["http"] and listed["grpc"]
    http = closure(listed["http"])
    grpc = closure(listed["http"] + listed["grpc"])
    assert not {canonicalize_name(h) for h in HEAVY} & grpc
    over_http = distributions_of(loaded_by(ENTRY_POINTS, protocols=("http/protobuf",)))
    assert over_http - http - OPTIONAL == set()
    over_grpc = distributions_of(loaded_by(ENTRY_POINTS, protocols=("grpc",)))
    assert over_grpc - grpc - OPTIONAL == set()
    # the check does see distributions: OpenTelemetry's, by file
    assert {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"} <= over_http
    assert "opentelemetry-exporter-otlp-proto-grpc" in over_grpc - over_http


def test_the_guide_pins_as_pyproject_does():
    pins = {canonicalize_name(Requirement(spec).name): Requirement(spec).specifier
            for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())
            ["project"]["dependencies"]}
    listed = guide_requirements()
    for req in listed["http"] + listed["grpc"]:
        assert pins.get(canonicalize_name(req.name)) == req.specifier, req
