"""Shared by the generation-backend tests: the engine extra, a saved tiny model, a real
OpenAI-compatible server (``transformers serve``) on loopback, and small captured runs."""

from __future__ import annotations

import dataclasses
import os
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rolloutscope.store import RunStore
from rolloutscope.replay.backends import EngineExtraMissing
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get


def need_engine() -> None:
    """Skip, saying why, where the engine extra is not installed."""
    from rolloutscope.replay.backends.transformers_engine import require_engine

    try:
        require_engine()
    except EngineExtraMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    need_engine()
    from rolloutscope.replay.backends.transformers_engine import save_model

    return save_model(tmp_path_factory.mktemp("tiny-llama") / "model")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


START_TRIES = 3  # a port found free can be taken before the server binds it


def _start_server(model_dir: Path) -> tuple[subprocess.Popen, str] | list[str]:
    """``transformers serve`` on a free loopback port: (the process, its base URL) once it
    listens, or every line it wrote if it exited first (uvicorn binds after its startup, so
    a port lost to a race shows as an exit after "Started server process")."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cli = Path(sys.executable).with_name("transformers")
    proc = subprocess.Popen(
        [str(cli), "serve", str(model_dir), "--device", "cpu", "--host", "127.0.0.1",
         "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    # a deadline for a busy machine: loading torch and transformers can take minutes there
    deadline = time.monotonic() + 600
    seen: list[str] = []
    pending = ""
    while True:  # its own "running on" line says it listens
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            proc.wait(30)
            pytest.fail("transformers serve did not listen within 600 s:\n"
                        + "".join(seen[-20:]))
        if sel.select(timeout=min(left, 1.0)):
            # what the pipe holds, read raw: a text readline buffers the lines after the one
            # it returns, and select() would then wait on an empty pipe for a line already read
            chunk = os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
            if chunk:
                pending += chunk
                *lines, pending = pending.split("\n")
                seen.extend(line + "\n" for line in lines)
                if any("Uvicorn running on" in line for line in lines):
                    return proc, f"http://127.0.0.1:{port}/v1"
                continue
        if proc.poll() is not None:  # exited: what it wrote last says why
            seen.append(pending + proc.stdout.read())
            proc.stdout.close()
            return seen


@pytest.fixture(scope="module")
def openai_server(tiny_model_dir):
    """``transformers serve`` with the tiny random model on loopback; yields its base URL."""
    tries: list[list[str]] = []
    while True:
        started = _start_server(tiny_model_dir)
        if not isinstance(started, list):
            break
        tries.append(started)
        if len(tries) == START_TRIES:
            pytest.fail(f"transformers serve exited before listening, {START_TRIES} times; "
                        "the last time:\n" + "".join(started[-20:]))
    proc, url = started
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # still generating the replay's last calls, which nobody reads any more
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()


@pytest.fixture(scope="session")
def small_capture(tmp_path_factory):
    """``small_capture(name, horizon_s)``: a built-in scenario, cut to ``horizon_s``, captured
    on the virtual clock into its own store."""
    root = tmp_path_factory.mktemp("backend-captures")

    def capture(name: str, horizon_s: float) -> Path:
        path = root / f"{name}-{horizon_s:g}.duckdb"
        if not path.exists():
            with RunStore(path) as store:
                replay_into_store(dataclasses.replace(get(name), horizon_s=horizon_s), store)
        return path

    return capture
