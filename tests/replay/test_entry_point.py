"""``rolloutscope.replay`` is the one place to start a replay: every name it offers resolves to
the function its docstring points at, and importing the package loads none of the modules
under it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rolloutscope.replay as replay


@pytest.mark.parametrize("name", replay.__all__)
def test_every_offered_name_is_the_module_function_it_names(name):
    module = __import__(f"rolloutscope.replay.{replay._EXPORTS[name]}", fromlist=[name])
    assert getattr(replay, name) is getattr(module, name)
    assert f"``{name}``" in replay.__doc__


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="replay_everything"):
        replay.replay_everything  # noqa: B018


def test_importing_the_package_loads_no_replay_module_and_submodules_still_import():
    code = ("import sys, rolloutscope.replay as r; "
            "from rolloutscope.replay import scenarios; "
            "print(sorted(m for m in sys.modules if m.startswith('rolloutscope.replay.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = eval(out)  # noqa: S307 - our own printed list
    assert "rolloutscope.replay.scenarios" in loaded
    assert not {"rolloutscope.replay.replay_capture", "rolloutscope.replay.run_scenario",
                "rolloutscope.replay.run_live", "rolloutscope.replay.sweep"} & set(loaded)
