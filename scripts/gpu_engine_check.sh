#!/usr/bin/env bash
# The transformers generation backend on a GPU: wall-clock replays of two-shard-failover and
# snapshot-outlasts-deadline with every model call served by the in-process engine (a random
# ~120 M-parameter Llama in bf16), widened so hundreds of calls are in flight at once. Prints, per
# scenario: tokens/s, p50/p99 call latency against the captured timings per call kind, the
# largest batch, and whether each captured incident reproduced. Ends well inside ten minutes.
#
#   bash scripts/gpu_engine_check.sh fetch   # here, with PyPI: the wheels the GPU machine lacks,
#                                            # for Python 3.12, into .whl/ (git-ignored)
#   bash scripts/gpu_engine_check.sh         # there (torch and transformers preinstalled, no
#                                            # network): installs .whl/ and the project into
#                                            # /tmp/site, then runs the check
#
# Knobs (environment): FAILOVER_ROWS (64: rows per prompt, about 250 calls in flight),
# FAILOVER_SPEED (8), SNAPSHOT_ROWS (64), SNAPSHOT_SPEED (5), SNAPSHOT_HORIZON_S (600),
# DEVICE (cuda), MODEL (gpu; tiny: the CPU-sized model), and for a smoke run where the project is
# installed already: PY (an interpreter) with NO_INSTALL=1.
set -euo pipefail
cd "$(dirname "$0")/.."

# the project's own dependencies that the replay imports and the GPU image does not hold
WHEELS=(duckdb==1.5.6 orjson==3.13.0 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2
        opentelemetry-semantic-conventions==0.66b2 opentelemetry-proto==1.45.1
        opentelemetry-exporter-otlp-proto-common==1.45.1
        opentelemetry-exporter-otlp-proto-http==1.45.1
        opentelemetry-exporter-otlp-proto-grpc==1.45.1 googleapis-common-protos==1.76.0)

if [[ "${1:-}" == "fetch" ]]; then
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
    ls -la .whl
    exit 0
fi

PY="${PY:-python3}"
if [[ -z "${NO_INSTALL:-}" ]]; then
if [[ -d .whl ]]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
fi
# the project itself (its folders map onto rolloutscope.*), without its dependencies
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site .
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

exec $PY - <<'EOF'
import dataclasses
import os
import tempfile
import time

from rolloutscope.store import RunStore
from rolloutscope.replay import compare, scenarios
from rolloutscope.replay.backends.transformers_engine import TinyLlamaConfig, TransformersBackend
from rolloutscope.replay.run_scenario import replay_into_store, wall_clock_driver

DEVICE = os.environ.get("DEVICE", "cuda")
GPU_MODEL = TinyLlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                            layers=8, heads=16, kv_heads=8, max_positions=8192)
if os.environ.get("MODEL") == "tiny":
    GPU_MODEL = TinyLlamaConfig()


def widen(scenario, rows, horizon_s=None):
    """Every prompt's rows repeated ``rows`` times (a GRPO group of that size)."""
    prompts = tuple(dataclasses.replace(p, rows=p.rows * rows) for p in scenario.workload.prompts)
    rollout = dataclasses.replace(
        scenario.config.rollout,
        num_generations_per_prompt=scenario.config.rollout.num_generations_per_prompt * rows)
    return dataclasses.replace(
        scenario, workload=dataclasses.replace(scenario.workload, prompts=prompts),
        config=dataclasses.replace(scenario.config, rollout=rollout),
        horizon_s=horizon_s or scenario.horizon_s)


def check(name, rows, speed, horizon_s=None):
    scenario = widen(scenarios.get(name), rows, horizon_s)
    with tempfile.TemporaryDirectory() as tmp, RunStore(os.path.join(tmp, "run.duckdb")) as st:
        replay_into_store(scenario, st, run_id="captured")
        backend = TransformersBackend(device=DEVICE, config=GPU_MODEL, max_batch=512)
        t0 = time.monotonic()
        result = replay_into_store(scenario, st, run_id="engine", backend=backend,
                                   driver=wall_clock_driver(speed))
        wall = time.monotonic() - t0
        st.writer().flush()
        before = compare.incident_keys(st, "captured")
        after = compare.incident_keys(st, "engine")
        gen = result.stats["generation"]
    print(f"\n== {name}: {rows} rows per prompt, {speed:g}x wall-clock, horizon "
          f"{scenario.horizon_s:g} s, {wall:.1f} s wall, largest batch {backend.largest_batch}, "
          f"{backend.batches} batches")
    for line in compare.generation_lines(gen):
        print("  " + line)
    print(compare.latency_table(gen).to_string(index=False))
    reproduced, vanished, appeared = compare.match_incidents(before, after)
    for kind, subject in sorted(set(before)):
        verdict = "REPRODUCED" if (kind, subject) in reproduced else "did NOT reproduce"
        print(f"  incident {kind} ({subject}): {verdict}")
    for kind, subject in sorted(set(appeared)):
        print(f"  incident {kind} ({subject}): appeared on the engine")
    print(f"  on the engine: {result.stats['committed']} committed, snapshots "
          f"{', '.join(result.stats['snapshots']) or 'none'}")
    return not vanished


ok = check("two-shard-failover", int(os.environ.get("FAILOVER_ROWS", 64)),
           float(os.environ.get("FAILOVER_SPEED", 8)))
ok &= check("snapshot-outlasts-deadline", int(os.environ.get("SNAPSHOT_ROWS", 64)),
            float(os.environ.get("SNAPSHOT_SPEED", 5)),
            float(os.environ.get("SNAPSHOT_HORIZON_S", 600)))
print("\nall captured incidents reproduced" if ok else "\nsome captured incident vanished")
raise SystemExit(0 if ok else 1)
EOF
