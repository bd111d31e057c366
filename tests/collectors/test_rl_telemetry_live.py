"""NeMo-RL's own telemetry run for real into a running collector: ``nemo_rl.telemetry`` from the RL
source (``ROLLOUTSCOPE_NEMO_RL_SRC``, a checkout of RL #3655 or later) on nemo-lens 0.1.0 in a
Python 3.13 environment, exporting OTLP/HTTP to ``rolloutscope serve``, in a shape the capture in
tests/fixtures does not have: another algorithm (ppo), the ``default`` preset with phase groups
added, the sync path's generation inside the step, and a worker group's rollout batches
(tests/collectors/rl_telemetry_driver.py). ``train_steps`` must read it; the ``default`` preset
alone sends no step.

Skipped, saying why, where there is no RL source with ``nemo_rl/telemetry`` or no Python 3.13.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from rolloutscope.store import RunStore

from .conftest import start_collector
from .gym_env import _locked, cache_dir, python313

DRIVER = Path(__file__).with_name("rl_telemetry_driver.py")
# nemo-lens as the capture in tests/fixtures/nemo-rl-telemetry-otlp-http was made with, and the
# pydantic nemo_rl.telemetry.config needs
REQUIREMENTS = ("nemo-lens[sdk]==0.1.0", "pydantic>=2.7,<3")
PHASES = "default,step,rollout,generation,reward,logprob,advantage,policy_update,efficiency"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rl_source(tmp_path_factory) -> Path:
    """A folder holding ``nemo_rl/telemetry`` from the RL source, under an empty ``nemo_rl``
    package: the telemetry package unchanged, without the rest of RL's imports (torch, ray)."""
    value = os.environ.get("ROLLOUTSCOPE_NEMO_RL_SRC")
    if not value:
        pytest.skip("ROLLOUTSCOPE_NEMO_RL_SRC is not set: no NeMo-RL checkout to take "
                    "nemo_rl/telemetry from")
    telemetry = Path(value) / "nemo_rl" / "telemetry"
    if not (telemetry / "instrumentation.py").exists():
        pytest.skip(f"{value} has no nemo_rl/telemetry (it came with NVIDIA-NeMo/RL #3655)")
    root = tmp_path_factory.mktemp("rl-src")
    (root / "nemo_rl").mkdir()
    (root / "nemo_rl" / "__init__.py").write_text("")
    shutil.copytree(telemetry, root / "nemo_rl" / "telemetry")
    return root


@pytest.fixture(scope="module")
def rl_python() -> str:
    """A Python 3.13 environment with nemo-lens, built once under ~/.cache/rolloutscope/."""
    base = python313()
    if base is None:
        pytest.skip("nemo-lens needs Python >= 3.13 and none was found (set "
                    "ROLLOUTSCOPE_PYTHON313, or install python3.13)")
    venv = cache_dir() / "nemo-rl-telemetry-venv"
    python = venv / "bin" / "python"
    with _locked("rl-telemetry"):
        if not python.exists():
            subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
        check = ("import importlib.metadata as m, sys, pydantic; "
                 "sys.exit(m.version('nemo-lens') != '0.1.0')")
        if subprocess.run([str(python), "-c", check], capture_output=True).returncode != 0:
            subprocess.run([str(python), "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", *REQUIREMENTS],
                           check=True, timeout=900)
    return str(python)


def run_loop(python: str, source: Path, http: str, run_id: str, spec: str) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "NEMO_", "NRL_"))}
    env.update(PYTHONPATH=str(source), NEMO_RL_OTEL_RUN_ID=run_id, NEMO_RL_OTEL_EXPORTER="otlp",
               OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_EXPORTER_OTLP_ENDPOINT=http)
    done = subprocess.run([python, str(DRIVER), "driver", spec], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0 and "sent" in done.stdout, done.stderr[-4000:]


@pytest.fixture(scope="module")
def live_run(tmp_path_factory, rl_source, rl_python) -> Path:
    db = tmp_path_factory.mktemp("rl-live") / "rl-live.duckdb"
    collector = start_collector(db)
    try:
        run_loop(rl_python, rl_source, collector.http, "rl-ppo", PHASES)
        run_loop(rl_python, rl_source, collector.http, "rl-default", "default")
    finally:
        assert collector.stop() == 0, "".join(collector.output)
    return db


def raw_seconds(store: RunStore, run_id: str, step_span_id: str) -> dict[str, float]:
    """Seconds per span name among a step's children, read from the spans table itself."""
    rows = store.query("SELECT name, sum(end_ns - start_ns) / 1e9 FROM spans "
                       "WHERE run_id = ? AND parent_span_id = ? GROUP BY name",
                       [run_id, step_span_id])
    return dict(rows)


def test_a_ppo_loop_with_the_sync_paths_phases_is_three_train_steps(live_run):
    with RunStore(live_run, read_only=True) as store:
        rows = store.query_df("SELECT * FROM train_steps WHERE run_id = 'rl-ppo' ORDER BY step")
        assert list(rows.step) == [1, 2, 3]
        assert set(rows.algorithm) == {"ppo"} and set(rows.dialect) == {"rl_telemetry"}
        assert list(rows.epoch) == [1, 1, 1]
        for r in rows.itertuples():
            kids = raw_seconds(store, "rl-ppo", r.span_id)
            assert r.collect_rollouts_s == pytest.approx(kids["rl.ppo.collect_rollouts"])
            assert r.rewards_s == pytest.approx(kids["rl.ppo.compute_rewards"])
            assert r.policy_update_s == pytest.approx(kids["rl.ppo.policy_update"]
                                                      + kids["rl.ppo.value_update"])
            # rl.vllm.generate is a grandchild: under the step's collect_rollouts
            assert 0 < r.generate_s <= r.collect_rollouts_s
            # productive: generation, rewards and both updates; overhead: logprobs and
            # advantages (and the checkpoint); idle: the refit bubble
            assert r.productive_s == pytest.approx(r.generate_s + r.rewards_s
                                                   + r.policy_update_s)
            assert r.overhead_s == pytest.approx(r.logprobs_s + r.advantages_s
                                                 + (0 if pd.isna(r.checkpoint_s)
                                                    else r.checkpoint_s))
            # the sync path waits for its rollouts inside the step
            assert r.ready_ns > r.wait_start_ns == r.start_ns
        by_step = rows.set_index("step")
        assert by_step.refit_s.notna().tolist() == [False, True, False]
        assert by_step.checkpoint_s.notna().tolist() == [False, False, True]
        # the worker group's batches targeted trainer versions 1 and 2: steps 2 and 3
        assert by_step.batches.tolist() == [0, 1, 1]
        assert by_step.policy_lag.iloc[1:].tolist() == [1, 1]
        assert by_step.prompt_groups.tolist() == [8, 8, 8]
        groups = {g for (g,) in store.query(
            "SELECT DISTINCT resource->>'rl.worker_group' FROM spans WHERE run_id = 'rl-ppo' "
            "AND name = 'rl.ppo.collect_rollouts' AND parent_span_id IN "
            "(SELECT span_id FROM spans WHERE name = 'rl.ppo.job')")}
        assert groups == {"rollout_workers"}


def test_the_default_preset_alone_sends_the_job_and_checkpoint_but_no_train_step(live_run):
    with RunStore(live_run, read_only=True) as store:
        names = {n for (n,) in store.query(
            "SELECT DISTINCT name FROM spans WHERE run_id = 'rl-default'")}
        assert names == {"rl.ppo.job", "rl.ppo.save_checkpoint"}
        assert store.query("SELECT count(*) FROM train_steps WHERE run_id = 'rl-default'") \
            == [(0,)]
