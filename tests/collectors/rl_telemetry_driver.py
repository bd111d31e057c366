"""A training loop instrumented with NeMo-RL's own telemetry (``nemo_rl.telemetry``, RL #3655),
run by tests/collectors/test_rl_telemetry_live.py in a Python 3.13 environment with nemo-lens.

``driver SPEC`` is the loop: ``init_telemetry_driver`` for the algorithm ``ppo``, a job span and
three ``rl.ppo.step`` spans with the sync path's phases (collect_rollouts around rl.vllm.generate,
rewards, logprobs, advantages, policy and value update; a refit bubble at step 2; a checkpoint at
step 3), under the span-group spec SPEC. Before the steps it starts ``worker``, a process in the
worker group ``rollout_workers`` (``init_telemetry_worker``) that reopens the job span from the
carrier it is handed and sends two rollout batches the way the async collector does
(``rl.weight_version`` / ``rl.target_weight_version`` / ``rl.num_prompt_groups``).

The exporter settings come from the environment (NEMO_RL_OTEL_*, OTEL_EXPORTER_OTLP_*). Prints
``sent`` when every span was flushed. Imports nothing of rolloutscope.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

ALGORITHM = "ppo"
STEPS = 3
PROMPT_GROUPS = 8
# (weight version it generated from, the trainer version it targets) of the worker's batches
BATCHES = ((0, 1), (1, 2))
PAUSE_S = 0.02


def driver(spec: str) -> None:
    from nemo_rl.telemetry import TelemetryConfig, init_telemetry_driver, shutdown_telemetry
    from nemo_rl.telemetry.instrumentation import (
        current_trace_carrier,
        efficiency_span,
        managed_span,
    )
    from nemo_rl.telemetry.span_groups import RLSpanGroup

    config = SimpleNamespace(telemetry=TelemetryConfig(enabled=True, span_groups=spec),
                             policy={"model_name": "tiny-policy"})
    handle = init_telemetry_driver(config, algorithm=ALGORITHM)
    tracer = handle.tracer

    def phase(group: str, name: str, **attrs) -> None:
        with managed_span(group, name, tracer=tracer, **attrs):
            time.sleep(PAUSE_S)

    with managed_span(RLSpanGroup.JOB, f"rl.{ALGORITHM}.job", tracer=tracer):
        worker = subprocess.run(
            [sys.executable, __file__, "worker", json.dumps(current_trace_carrier())],
            env={**os.environ, "NRL_WORKER_GROUP": "rollout_workers"}, capture_output=True,
            text=True, timeout=120)
        assert worker.returncode == 0 and "sent" in worker.stdout, worker.stderr[-3000:]
        for iteration in range(1, STEPS + 1):
            with managed_span(RLSpanGroup.STEP, f"rl.{ALGORITHM}.step", tracer=tracer,
                              **{"rl.iteration": iteration, "rl.epoch": 1}):
                with managed_span(RLSpanGroup.ROLLOUT, f"rl.{ALGORITHM}.collect_rollouts",
                                  tracer=tracer, **{"rl.num_prompt_groups": PROMPT_GROUPS}):
                    phase(RLSpanGroup.GENERATION, "rl.vllm.generate")
                phase(RLSpanGroup.REWARD, f"rl.{ALGORITHM}.compute_rewards")
                phase(RLSpanGroup.LOGPROB, f"rl.{ALGORITHM}.compute_logprobs")
                phase(RLSpanGroup.ADVANTAGE, f"rl.{ALGORITHM}.compute_advantages")
                phase(RLSpanGroup.POLICY_UPDATE, f"rl.{ALGORITHM}.policy_update")
                phase(RLSpanGroup.POLICY_UPDATE, f"rl.{ALGORITHM}.value_update")
                if iteration == 2:
                    with efficiency_span("idle/refit_bubble", tracer=tracer):
                        time.sleep(PAUSE_S)
                if iteration == STEPS:
                    phase(RLSpanGroup.CHECKPOINT, f"rl.{ALGORITHM}.save_checkpoint",
                          **{"rl.step": iteration})
    shutdown_telemetry()
    print("sent")


def worker(carrier: dict) -> None:
    from nemo_rl.telemetry import init_telemetry_worker, shutdown_telemetry
    from nemo_rl.telemetry.instrumentation import managed_span, remote_trace_context
    from nemo_rl.telemetry.span_groups import RLSpanGroup

    handle = init_telemetry_worker(rank=0, world_size=1, always_export=True)
    with remote_trace_context(carrier):
        for version, target in BATCHES:
            with managed_span(RLSpanGroup.ROLLOUT, f"rl.{ALGORITHM}.collect_rollouts",
                              tracer=handle.tracer, **{
                                  "rl.weight_version": version,
                                  "rl.target_weight_version": target,
                                  "rl.num_generations_per_prompt": 4,
                                  "rl.num_prompt_groups": PROMPT_GROUPS}):
                time.sleep(PAUSE_S)
    shutdown_telemetry()
    print("sent")


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(json.loads(sys.argv[2]))
    else:
        driver(sys.argv[2])
