#!/usr/bin/env bash
# Sets up everything rolloutscope needs on a fresh Debian 12 machine: uv, a virtual environment
# in .venv with the package installed editable, and (with --browser) Chromium for browser tests.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${ROLLOUTSCOPE_PYTHON:-python3}"
EXTRAS="${ROLLOUTSCOPE_EXTRAS:-test,ray}"

if [[ " $* " == *" --browser "* ]] && ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium chromium-driver >/dev/null
fi

if ! "$PY" -m uv --version >/dev/null 2>&1 && ! command -v uv >/dev/null 2>&1; then
    "$PY" -m pip install -q uv
fi
UV="uv"; command -v uv >/dev/null 2>&1 || UV="$PY -m uv"

if [[ ! -x .venv/bin/python ]]; then
    $UV venv -q --python "$PY" .venv
fi
$UV pip install -q --compile-bytecode --python .venv/bin/python -e ".[${EXTRAS}]"
