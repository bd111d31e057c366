"""Choosing a backend: typed errors for wrong options, and the missing extra named."""

from __future__ import annotations

import sys

import pytest

from rolloutscope.cli import main
from rolloutscope.replay.backends import BackendError, EngineExtraMissing, make_backend
from rolloutscope.replay.backends.transformers_engine import require_engine


def test_the_recorded_backend_is_the_captured_timings_and_needs_no_engine():
    assert make_backend("recorded") is None


@pytest.mark.parametrize(("name", "kwargs", "says"), [
    ("vllm", {}, "unknown backend"),
    ("openai", {}, "--backend-url"),
    ("openai", {"urls": ["http://127.0.0.1:1/v1"], "device": "cpu"}, "--device"),
    ("transformers", {"urls": ["http://127.0.0.1:1/v1"]}, "--backend-url"),
    ("transformers", {"device": "tpu"}, "unknown device"),
    ("recorded", {"device": "cpu"}, "need --backend"),
])
def test_a_wrong_backend_option_is_a_typed_error_naming_it(name, kwargs, says):
    with pytest.raises(BackendError, match=says):
        make_backend(name, **kwargs)


def test_a_missing_engine_extra_is_named_in_the_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    with pytest.raises(EngineExtraMissing, match=r"rolloutscope\[engine\]"):
        require_engine()


def test_the_replay_command_names_the_extra_when_the_engine_is_missing(monkeypatch, tmp_path,
                                                                       capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)
    rc = main(["replay", str(tmp_path / "run.duckdb"), "--out", str(tmp_path / "new.duckdb"),
               "--backend", "transformers"])
    assert rc == 2
    assert "pip install 'rolloutscope[engine]'" in capsys.readouterr().err


def test_the_replay_command_refuses_a_speed_for_the_recorded_timings(tmp_path, capsys):
    rc = main(["replay", str(tmp_path / "run.duckdb"), "--out", str(tmp_path / "new.duckdb"),
               "--speed", "10"])
    assert rc == 2
    assert "--speed needs --backend" in capsys.readouterr().err
