"""Captures shared by the replay-runner tests: each built-in scenario run once into a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolloutscope.store import RunStore
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="session")
def capture_path(tmp_path_factory):
    """``capture_path(name)``: the run store of the built-in scenario, captured once."""
    root = tmp_path_factory.mktemp("captures")
    made: dict[str, Path] = {}

    def capture(name: str) -> Path:
        if name not in made:
            path = root / f"{name}.duckdb"
            with RunStore(path) as store:
                replay_into_store(get(name), store)
            made[name] = path
        return made[name]

    return capture
