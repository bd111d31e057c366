"""What importing the client side costs an observed process, against OpenTelemetry's own and
against the full import.

Three imports, each in a fresh interpreter:

- ``otel``: the OpenTelemetry SDK's tracing and its OTLP/HTTP span exporter, what any process
  that exports spans over OTLP loads (the floor under the client side);
- ``client``: the client side as a Gym server or the controller uses it: the adapters
  (``rolloutscope.collectors.instrument``), ``connect`` and the OTLP/HTTP exporter that
  ``connect()`` imports when called;
- ``full``: the same plus the workbench's in-process exporter
  (``rolloutscope.collectors.exporter``), which loads DuckDB, Arrow and pandas through the store:
  what the client side cost while it imported that module.

Each run measures, in the child, the wall time of the import statements
(``time.perf_counter``) and how many modules they added to ``sys.modules``; a second child with
``python -X importtime`` sums the cumulative time of the top-level imports those statements
made (the interpreter's own start-up left out). Runs of the three alternate, so a change of the
machine's load reaches each alike; each figure is the median over ``--runs`` (at least 3).
Bytecode is cached under a temporary ``PYTHONPYCACHEPREFIX`` (one unmeasured run of each first),
so no run compiles and the source tree gets no ``__pycache__``. Check ``uptime`` first: on a
busy machine every figure grows, the ratios much less.

    .venv/bin/python benchmarks/bench_client_import.py [--runs 5] [--python PATH]

``--python`` measures another environment's interpreter (another checkout's ``.venv``) with
the same imports; the children run from a temporary folder, so they import what that
interpreter has installed, not this checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HEAVY = ("duckdb", "pyarrow", "pandas", "numpy", "panel", "bokeh", "holoviews")
OTEL = ("opentelemetry.sdk.trace", "opentelemetry.sdk.trace.export",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter")
CLIENT = ("rolloutscope.collectors.instrument", "rolloutscope.collectors.connect",
          "opentelemetry.exporter.otlp.proto.http.trace_exporter")
FULL = (*CLIENT, "rolloutscope.collectors.exporter")
IMPORTS = {"otel": OTEL, "client": CLIENT, "full": FULL}

MARK = "-- measured imports start --"
# import statements, not importlib.import_module: -X importtime logs only the import machinery
# that statements go through
CHILD = """
import json, sys, time
before = set(sys.modules)
sys.stderr.write({mark!r} + "\\n"); sys.stderr.flush()
t0 = time.perf_counter()
{imports}
wall = time.perf_counter() - t0
added = set(sys.modules) - before
print(json.dumps({{"wall_s": wall, "modules": len(added),
                  "heavy": sorted({{m.split(".")[0] for m in added}} & set({heavy!r}))}}))
"""
# "import time: <self us> | <cumulative us> | <indentation><module>"
IMPORTTIME = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def child(python: str, names: tuple[str, ...], env: dict[str, str], cwd: str, *,
          importtime: bool) -> dict:
    command = [python, *(["-X", "importtime"] if importtime else []), "-c",
               CHILD.format(mark=MARK, imports="\n".join(f"import {name}" for name in names),
                            heavy=HEAVY)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"the import of {names} failed:\n{done.stderr}")
    out = json.loads(done.stdout.splitlines()[-1])
    if importtime:
        after = done.stderr.split(MARK, 1)[1]
        # top-level imports are the least indented lines: one space after the bar
        out["importtime_s"] = sum(int(m.group(2)) for m in map(IMPORTTIME.match,
                                                                after.splitlines())
                                  if m and len(m.group(3)) == 1) / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each import (>= 3)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to measure")
    args = parser.parse_args()
    if args.runs < 3:
        parser.error("--runs must be at least 3: each figure is a median")

    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True).stdout.strip()
    print(f"python {version} ({args.python}); {args.runs} runs of each, alternating; medians")
    results: dict[str, list[dict]] = {name: [] for name in IMPORTS}
    with tempfile.TemporaryDirectory(prefix="bench-client-import-") as tmp:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONPROFILEIMPORTTIME")}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        for names in IMPORTS.values():  # compiles and caches every module's bytecode
            child(args.python, names, env, tmp, importtime=False)
        for _ in range(args.runs):
            for name, names in IMPORTS.items():
                run = child(args.python, names, env, tmp, importtime=False)
                run["importtime_s"] = child(args.python, names, env, tmp,
                                            importtime=True)["importtime_s"]
                results[name].append(run)

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in results[name])

    print(f"{'import':<8} {'wall ms':>8} {'min-max':>13} {'importtime ms':>14} "
          f"{'modules':>8}  heavy modules loaded")
    for name in IMPORTS:
        walls = [run["wall_s"] * 1e3 for run in results[name]]
        heavy = sorted({h for run in results[name] for h in run["heavy"]})
        print(f"{name:<8} {median(name, 'wall_s') * 1e3:>8.1f} "
              f"{min(walls):>6.1f}-{max(walls):<6.1f} {median(name, 'importtime_s') * 1e3:>14.1f} "
              f"{median(name, 'modules'):>8.0f}  {', '.join(heavy) or 'none'}")
    for other in ("full", "otel"):
        print(f"client / {other}: {median('client', 'wall_s') / median(other, 'wall_s'):.2f}x "
              f"wall, {median('client', 'importtime_s') / median(other, 'importtime_s'):.2f}x "
              f"importtime, {median('client', 'modules') / median(other, 'modules'):.2f}x "
              f"modules")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
