"""Where the real upstream code is, for the tests that run it: ``ROLLOUTSCOPE_NEMO_RL_SRC`` and
``ROLLOUTSCOPE_NEMO_GYM_SRC`` (checkout roots). Without them those tests are skipped, saying so;
the doubles run everywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rolloutscope.replay.real.sources import Upstream

# captures shared with the replay-runner tests
from tests.replay_runners.conftest import capture_path  # noqa: F401


def _root(upstream: Upstream) -> Path:
    value = os.environ.get(upstream.env_var)
    if not value:
        pytest.skip(f"{upstream.env_var} is not set: no {upstream.repository} checkout to run "
                    f"the real code from (the doubles' tests cover the adapters)")
    return Path(value)


@pytest.fixture
def real_rl() -> Path:
    return _root(Upstream.NEMO_RL)


@pytest.fixture
def real_gym() -> Path:
    return _root(Upstream.NEMO_GYM)


@pytest.fixture
def real_paths(real_rl: Path, real_gym: Path) -> dict[str, str]:
    return {"nemo_rl": str(real_rl), "nemo_gym": str(real_gym)}
