"""nemo-lens (NVIDIA's OTel layer for Gym/RL, Python >= 3.13) sends into the collector with its
own set-up and defaults: gRPC to OTEL_EXPORTER_OTLP_ENDPOINT, resources from its config."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import start_collector

LENS_SCRIPT = """
from nemo.lens import NemoLensConfig, managed_span, setup_telemetry, span_cm
handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1)
with managed_span("job", "rl.train_step", **{"nemo.rl.train.step": 1}):
    with span_cm("gym.rollout", **{"nemo.gym.rollout.id": "r-7"}):
        pass
handle.shutdown()
print("sent")
"""


def _python313() -> str | None:
    """A Python >= 3.13: $ROLLOUTSCOPE_PYTHON313, python3.13/3.14 on PATH, or pyenv's."""
    candidates = [os.environ.get("ROLLOUTSCOPE_PYTHON313"), shutil.which("python3.13"),
                  shutil.which("python3.14"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[3-9]*/bin/python")))]
    for candidate in candidates:
        if not candidate or not Path(candidate).exists():
            continue
        probe = subprocess.run([candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 13))"],
                               capture_output=True)
        if probe.returncode == 0:  # a pyenv shim for an inactive version exits non-zero
            return candidate
    return None


@pytest.fixture(scope="module")
def lens_python() -> str:
    base = _python313()
    if base is None:
        pytest.skip("nemo-lens needs Python >= 3.13 and none was found (set "
                    "ROLLOUTSCOPE_PYTHON313, or install python3.13)")
    venv = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
        "rolloutscope" / "nemo-lens-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    probe = subprocess.run([str(python), "-c", "import nemo.lens, opentelemetry.sdk"],
                           capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "nemo-lens[sdk]>=0.1,<1"],
                       check=True, timeout=900)
    return str(python)


@pytest.mark.slow
def test_nemo_lens_with_its_defaults_lands_in_the_run_store(tmp_path, lens_python):
    collector = start_collector(tmp_path / "lens.duckdb")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NEMO_"))}
        env.update(NEMO_LENS_ENABLED="1", NEMO_LENS_RUN_ID="lens-run",
                   OTEL_SERVICE_NAME="nemo-rl/controller",
                   OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{collector.grpc}",
                   OTEL_EXPORTER_OTLP_INSECURE="true")
        done = subprocess.run([lens_python, "-c", LENS_SCRIPT], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0 and "sent" in done.stdout, done.stderr[-3000:]
        rows = collector.client.query_records(
            "SELECT name, service, run_id, rollout_id, parent_span_id IS NOT NULL AS child "
            "FROM spans ORDER BY start_ns")
    finally:
        collector.stop()
    assert [r["name"] for r in rows] == ["rl.train_step", "gym.rollout"]
    assert {r["service"] for r in rows} == {"nemo-rl/controller"}
    assert {r["run_id"] for r in rows} == {"lens-run"}
    assert rows[1]["rollout_id"] == "r-7" and rows[1]["child"]
