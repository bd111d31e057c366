"""Runs replayed once per module from the built-in scenarios the notebooks default to."""

from __future__ import annotations

import pytest

from rolloutscope.postmortem import run_tables


@pytest.fixture(scope="module")
def p1_run(tmp_path_factory) -> run_tables.RunRef:
    return run_tables.open_run(None, scenario="snapshot-outlasts-deadline",
                         workdir=tmp_path_factory.mktemp("p1"))


@pytest.fixture(scope="module")
def idle_kill_run(tmp_path_factory) -> run_tables.RunRef:
    """RL #3590's chaos run: the only shard killed idle, fleet health probing on the tick."""
    return run_tables.open_run(None, scenario="chaos-kill-idle", variants=["fleet-health-enabled"],
                         workdir=tmp_path_factory.mktemp("idle-kill"))
