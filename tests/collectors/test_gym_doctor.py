"""``rolloutscope doctor gym`` against the released packages (nemo-gym 0.7.0, nemo-lens 0.1.0 as
PyPI ships them) in a Python 3.13 environment: it finds the trap, installs the fix, and then a
span sent through Gym's own telemetry set-up reaches a real collector."""

from __future__ import annotations

import json

import pytest

from rolloutscope.cli import main

from .conftest import start_collector
from .gym_env import gym_python, shim_held  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def doctor(capsys, *args: str) -> tuple[int, str]:
    rc = main(["doctor", "gym", *args])
    return rc, capsys.readouterr().out


@pytest.fixture
def own_shim():
    """The cached environment's shim is this test's alone to change (``shim_held``)."""
    with shim_held():
        yield


def test_the_released_packages_export_nothing_and_the_doctor_says_why(gym_python, own_shim,
                                                                      capsys):
    rc, out = doctor(capsys, "--python", gym_python, "--remove-shim")
    assert rc == 1
    assert "nemo-gym 0.7.0, nemo-lens 0.1.0" in out and "shim not loaded" in out
    assert ("PROBLEM nemo-lens 0.1.0 lacks NV_DL_RANK, NV_DL_WORLD_SIZE and SpanRegistry, "
            "which nemo-gym 0.7.0 imports") in out
    assert "'nemo-lens is not installed; telemetry stays disabled'" in out
    assert "Unknown span group or preset: 'per_rollout'" in out  # the second layer
    assert f"rolloutscope doctor gym --install-shim --python {gym_python}" in out
    assert out.rstrip().endswith("Gym would export NOTHING; fix the problems above.")
    rc, out = doctor(capsys, "--python", gym_python, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["healthy"] is False
    assert doc["report"]["init"] == {"handle": False, "exporting": False}
    assert doc["report"]["enabled_groups"] == []


def test_with_the_shim_gyms_telemetry_reaches_the_collector(gym_python, own_shim, capsys,
                                                            tmp_path):
    collector = start_collector(tmp_path / "doctor.duckdb")
    try:
        rc, out = doctor(capsys, "--python", gym_python, "--install-shim",
                         "--endpoint", collector.http)
        assert "installed " in out and "shim loaded" in out
        assert ("ok      Gym telemetry initialises and exports; span groups on: agent, "
                "http_client, model_call, rollout, server, verify") in out
        assert f"reached the collector at {collector.http}" in out
        assert rc == 0 and out.rstrip().endswith("Gym would export telemetry.")
        rows = collector.client.query_records(
            "SELECT service, resource->>'nemo.gym.version' AS gym, run_id FROM spans "
            "WHERE name = 'rolloutscope.doctor.probe'")
        assert rows == [{"service": "nemo-gym/rolloutscope_doctor", "gym": "0.7.0",
                         "run_id": "rolloutscope-doctor"}]
        # the default preset resolves too: Gym's spine groups, through lens's own resolve
        rc, out = doctor(capsys, "--python", gym_python, "--span-groups", "default")
        assert rc == 0 and "span groups on: http_client, job, rollout, server" in out
        # a collector that is not there is a problem, named
        rc, out = doctor(capsys, "--python", gym_python, "--endpoint", "http://127.0.0.1:9")
        assert rc == 1 and "PROBLEM the probe span did not reach http://127.0.0.1:9" in out
    finally:
        collector.stop()
        rc, out = doctor(capsys, "--python", gym_python, "--remove-shim")
        assert "removed " in out and rc == 1  # the environment is as PyPI left it again


def test_a_bad_interpreter_is_one_line(capsys, tmp_path):
    assert main(["doctor", "gym", "--python", str(tmp_path / "none")]) == 2
    assert "no interpreter at" in capsys.readouterr().err
