"""Finding the upstream code in the user's environment, loading it as it can be loaded, and
saying exactly what is missing when it cannot."""

from __future__ import annotations

import textwrap

import pytest

from rolloutscope.replay.real.records import upstream_record
from rolloutscope.replay.real.sources import (
    LoadMethod,
    Upstream,
    UpstreamCode,
    UpstreamImportError,
    UpstreamUnavailableError,
)


@pytest.fixture(autouse=True)
def _forget_loaded_upstream_modules():
    """Modules loaded from a test's fake checkout must not outlive it under upstream names."""
    import sys

    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("nemo_rl", "nemo_gym", "_rolloutscope_upstream",
                                  "_rolloutscope_extracted"):
            del sys.modules[name]


@pytest.fixture
def no_upstream_on_the_path(monkeypatch):
    """As on a machine without NeMo-RL or NeMo-Gym: an earlier test's real checkout (on
    sys.path, its modules imported) is hidden for this one and comes back after it."""
    import sys
    from pathlib import Path

    monkeypatch.setattr(sys, "path", [p for p in sys.path if not any(
        (Path(p or ".") / name).is_dir() for name in ("nemo_rl", "nemo_gym"))])
    for name in list(sys.modules):
        if name.split(".")[0] in ("nemo_rl", "nemo_gym"):
            monkeypatch.delitem(sys.modules, name)


def _write(root, relpath, text):
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_a_path_given_wins_over_the_environment_variable(tmp_path):
    (tmp_path / "a" / "nemo_rl").mkdir(parents=True)
    (tmp_path / "b" / "nemo_rl").mkdir(parents=True)
    code = UpstreamCode.locate("nemo_rl", paths={"nemo_rl": str(tmp_path / "a")},
                               environ={"ROLLOUTSCOPE_NEMO_RL_SRC": str(tmp_path / "b")})
    assert (code.root, code.found_by) == ((tmp_path / "a").resolve(), "--participant-path")
    code = UpstreamCode.locate("nemo_rl", environ={"ROLLOUTSCOPE_NEMO_RL_SRC": str(tmp_path / "b")})
    assert (code.root, code.found_by) == ((tmp_path / "b").resolve(), "ROLLOUTSCOPE_NEMO_RL_SRC")


def test_nothing_found_says_where_to_point_it(no_upstream_on_the_path):
    with pytest.raises(UpstreamUnavailableError) as err:
        UpstreamCode.locate("nemo_gym", environ={})
    text = str(err.value)
    assert "NVIDIA-NeMo/Gym code unavailable" in text
    assert "ROLLOUTSCOPE_NEMO_GYM_SRC" in text and "nemo_gym=doubles" in text


def test_a_directory_without_the_package_is_refused(tmp_path):
    with pytest.raises(UpstreamUnavailableError, match="holds no nemo_rl/ package"):
        UpstreamCode.locate("nemo_rl", paths={"nemo_rl": str(tmp_path)})


def test_an_rl_module_is_loaded_by_file_without_its_package_init(tmp_path):
    _write(tmp_path, "nemo_rl/__init__.py", "import transformers_that_is_not_here\n")
    _write(tmp_path, "nemo_rl/package_info.py", "MAJOR = 0\nMINOR = 6\nPATCH = 0\n"
                                                "PRE_RELEASE = 'rc1'\n")
    _write(tmp_path, "nemo_rl/models/generation/fleet_health.py", """
        class GenerationFleetHealth:
            def __init__(self, *, shard_count, policy, base_urls=None, clock=None):
                self.shard_count = shard_count
    """)
    code = UpstreamCode.locate("nemo_rl", paths={"nemo_rl": str(tmp_path)})
    loaded = code.module("nemo_rl.models.generation.fleet_health")
    assert loaded.loaded_by is LoadMethod.FILE
    assert loaded.module.GenerationFleetHealth(shard_count=2, policy=None).shard_count == 2
    assert code.version() == "0.6.0rc1"


def test_a_class_is_taken_from_a_module_that_cannot_load(tmp_path):
    _write(tmp_path, "nemo_rl/__init__.py", "")
    _write(tmp_path, "nemo_rl/experience/failures.py", """
        class RolloutTimeout(Exception):
            pass
    """)
    _write(tmp_path, "nemo_rl/experience/rollout_manager.py", """
        import asyncio
        import torch_that_is_not_here
        from nemo_rl.experience.failures import RolloutTimeout

        class _Deadline:
            def __init__(self, seconds, description):
                self.error = RolloutTimeout(description)
                self.loop_module = asyncio
    """)
    code = UpstreamCode.locate("nemo_rl", paths={"nemo_rl": str(tmp_path)})
    loaded = code.module("nemo_rl.experience.rollout_manager", classes=("_Deadline",))
    assert loaded.loaded_by is LoadMethod.EXTRACTED
    assert "torch_that_is_not_here" in loaded.note
    deadline = loaded.module._Deadline(1.0, "NeMo-Gym prompt group")
    assert type(deadline.error).__name__ == "RolloutTimeout"


def test_a_gym_checkout_without_a_module_names_it(tmp_path, monkeypatch,
                                                 no_upstream_on_the_path):
    monkeypatch.syspath_prepend(str(tmp_path))  # restored (and sys.modules entries dropped)
    _write(tmp_path, "nemo_gym/__init__.py", "")
    _write(tmp_path, "nemo_gym/_checkpoint/__init__.py", "")
    _write(tmp_path, "nemo_gym/_checkpoint/agent.py",
           "from nemo_gym._checkpoint.steps import EpisodeSteps\n")
    code = UpstreamCode.locate("nemo_gym", paths={"nemo_gym": str(tmp_path)})
    with pytest.raises(UpstreamImportError) as err:
        code.module("nemo_gym._checkpoint.agent")
    assert err.value.missing == "nemo_gym._checkpoint.steps"
    assert "the checkout has no module nemo_gym._checkpoint.steps (needed by " \
           "nemo_gym._checkpoint.agent)" in str(err.value)


def test_a_missing_third_party_package_is_named_as_a_package():
    error = UpstreamImportError(Upstream.NEMO_GYM, "nemo_gym._checkpoint.control", "orjson",
                                "No module named 'orjson'")
    assert "needs the Python package 'orjson', not installed" in str(error)


def test_the_doubles_are_recorded_as_stand_ins_for_the_commit_they_mirror():
    code = UpstreamCode.locate("nemo_rl", paths={"nemo_rl": "doubles"})
    loaded = code.module("nemo_rl.models.generation.fleet_health")
    record = upstream_record("fleet_health", code, loaded, ("GenerationFleetHealth",))
    assert record.loaded_by == "double" and record.is_double
    assert record.commit == "7ea279abfbeb698b092856d0dab61e7cf39bc909"
    assert record.commit_source == "stand-in mirrors"
    assert record.signature_drift == ()
    assert "stand-in mirroring NVIDIA-NeMo/RL 7ea279a" in record.line()


def test_a_checkout_that_is_not_a_git_tree_is_named_by_its_file_hash(real_rl):
    code = UpstreamCode.locate("nemo_rl", paths={"nemo_rl": str(real_rl)})
    loaded = code.module("nemo_rl.models.generation.fleet_health")
    record = upstream_record("fleet_health", code, loaded, ("GenerationFleetHealth",))
    assert record.loaded_by == "file"
    assert record.commit_source in ("git", "known file hash")
    assert record.commit is not None and record.file_sha256 is not None
