"""docs/replaying-real-code.md, executed: every command in its ``bash`` blocks runs (``export``
lines excepted: they name the reader's own checkouts), against the stand-ins, or against the real
code when ``ROLLOUTSCOPE_NEMO_RL_SRC`` and ``ROLLOUTSCOPE_NEMO_GYM_SRC`` are set; and every line
of a ``text`` block right after a block of commands appears in their output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "replaying-real-code.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(DOC.read_text(encoding="utf-8"))]


def commands(body: str) -> list[str]:
    return [line for line in body.splitlines()
            if line.strip() and not line.lstrip().startswith(("export ", "#"))]


def test_the_page_has_commands_and_expected_output():
    kinds = [k for k, _ in blocks()]
    assert kinds.count("bash") >= 5 and kinds.count("text") >= 4


@pytest.mark.slow
def test_every_command_on_the_page_runs_and_prints_what_the_page_says(tmp_path):
    env = dict(os.environ)
    real = env.get("ROLLOUTSCOPE_NEMO_RL_SRC") and env.get("ROLLOUTSCOPE_NEMO_GYM_SRC")
    if not real:
        env["ROLLOUTSCOPE_NEMO_RL_SRC"] = env["ROLLOUTSCOPE_NEMO_GYM_SRC"] = "doubles"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    ran = 0
    last_output: str | None = None
    for kind, body in blocks():
        if kind == "bash":
            outputs = []
            for command in commands(body):
                done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                      capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
                outputs.append(done.stdout)
                ran += 1
            last_output = "".join(outputs) if outputs else None
        elif kind == "text" and last_output is not None:
            for line in body.splitlines():
                if line.strip():
                    assert line.rstrip() in last_output, (line, last_output)
            last_output = None
    assert ran >= 7
