"""The command line loads only the module of the command it runs: `rolloutscope info` and
`incidents` start without the dashboard, the collector's server, pandas or pyarrow, and `--version`
without DuckDB. COMMANDS (rolloutscope/cli/__init__.py) names each command's module; this holds
it to what the modules register."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from rolloutscope.cli import COMMAND_MODULES, COMMANDS


def _registered(module: str) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(module).register(sub)
    return set(sub.choices)


def test_every_command_is_named_with_the_module_that_registers_it():
    seen = {}
    for module in COMMAND_MODULES:
        for command in _registered(module):
            seen[command] = module
    assert seen == COMMANDS


def _modules_after(*argv: str) -> set[str]:
    code = ("import sys, json\nfrom rolloutscope.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('\\nMODULES ' + json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         timeout=120)
    line = [x for x in out.stdout.splitlines() if x.startswith("MODULES ")]
    assert line, out.stderr[-2000:]
    return set(json.loads(line[-1][len("MODULES "):]))


@pytest.mark.parametrize("argv", [("info", "{db}"), ("incidents", "{db}"),
                                  ("incidents", "{db}", "--json")])
def test_info_and_incidents_load_no_dashboard_server_pandas_or_pyarrow(tmp_path, argv):
    from rolloutscope.replay.run_scenario import replay_into_store
    from rolloutscope.replay.scenarios import get
    from rolloutscope.store import RunStore

    db = tmp_path / "run.duckdb"
    with RunStore(db) as store:
        replay_into_store(get("snapshot-outlasts-deadline"), store)
    loaded = _modules_after(*(a.format(db=db) for a in argv))
    heavy = {"pandas", "pyarrow", "numpy", "panel", "holoviews", "bokeh", "aiohttp",
             "rolloutscope.dashboard",
             "rolloutscope.collectors.service", "rolloutscope.replay"}
    assert not heavy & loaded, sorted(heavy & loaded)
    assert "duckdb" in loaded  # the command did run


def test_version_loads_no_store():
    loaded = _modules_after("--version")
    assert "duckdb" not in loaded and "rolloutscope.cli.info_incidents" not in loaded


def test_help_still_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "rolloutscope", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0
    for command in COMMANDS:
        assert command in out.stdout, command
