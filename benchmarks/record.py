"""Run one benchmark and write what it printed into its section of benchmarks/README.md.

    .venv/bin/python benchmarks/record.py bench_decode [ARGS...]

runs ``benchmarks/bench_decode.py ARGS`` with this interpreter and replaces the README's section
between ``<!-- recorded: bench_decode -->`` and ``<!-- end: bench_decode -->`` (appending one
when there is none) with the command, the date, the machine's cores and load average before and
after, and the benchmark's output as printed. Every other section is left as it was. A
benchmark that fails leaves the README untouched and exits with its status.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    try:
        return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def section(name: str, body: str) -> str:
    return f"<!-- recorded: {name} -->\n{body.rstrip()}\n<!-- end: {name} -->"


def replace_section(readme: str, name: str, body: str) -> str:
    """``readme`` with ``name``'s section holding ``body`` (appended when it has none)."""
    pattern = re.compile(rf"<!-- recorded: {re.escape(name)} -->\n.*?<!-- end: "
                         rf"{re.escape(name)} -->", re.DOTALL)
    new = section(name, body)
    if pattern.search(readme):
        return pattern.sub(lambda _: new, readme, count=1)
    return readme.rstrip() + f"\n\n## {name}\n\n{new}\n"


def record(name: str, args: list[str], *, root: Path = ROOT) -> int:
    script = root / "benchmarks" / f"{name}.py"
    if not script.is_file():
        known = sorted(p.stem for p in (root / "benchmarks").glob("bench_*.py"))
        print(f"record.py: no benchmark {script.relative_to(root)} (known: {', '.join(known)})",
              file=sys.stderr)
        return 2
    command = shlex.join([".venv/bin/python", f"benchmarks/{name}.py", *args])
    before = _load()
    done = subprocess.run([sys.executable, str(script), *args], cwd=root, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(done.stdout, end="")
    if done.returncode != 0:
        print(f"record.py: {command} exited {done.returncode}; the README is unchanged",
              file=sys.stderr)
        return done.returncode
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = (f"Recorded {today} by `{command}` on {os.cpu_count()} cores ({before} before, "
            f"{_load()} after):\n\n```text\n{done.stdout.rstrip()}\n```")
    readme = root / "benchmarks" / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.exists() else "# Benchmarks\n"
    readme.write_text(replace_section(text, name, body), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the benchmark's file name without .py, e.g. bench_decode")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="passed to the benchmark")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    return record(ns.name, ns.args, root=ns.root)


if __name__ == "__main__":
    sys.exit(main())
