#!/usr/bin/env bash
# Sets up everything rolloutscope needs on a fresh Debian 12 machine: uv, a virtual environment
# in .venv with the package installed editable, and (with --browser) Chromium for browser tests.
# System packages (Chromium, PostgreSQL for the test extra's lake tests, a C compiler) come from
# apt-get only when run as root; otherwise it says which are missing and goes on.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${ROLLOUTSCOPE_PYTHON:-python3}"
EXTRAS="${ROLLOUTSCOPE_EXTRAS:-test,ray}"

# apt_install WHY PACKAGE...: system packages through apt-get, only as root; otherwise says
# what is missing and what needs it, and goes on (nothing else here needs them).
apt_install() {
    local why="$1"; shift
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "$@" >/dev/null
    else
        echo "setup: not installing $* (needs root and apt-get): $why" >&2
    fi
}

if [[ " $* " == *" --browser "* ]] && ! command -v chromium >/dev/null 2>&1; then
    apt_install "the browser tests will not run" chromium chromium-driver
fi

# PostgreSQL for the tests of lakes with a postgres catalog: they start and stop a server of
# their own on loopback (tests/lake/postgres.py); the package's default cluster is not used.
# Only a test setup (the test extra) needs it: the demo, the dashboard and the CLI do not.
if [[ ",${EXTRAS}," == *",test,"* ]] && ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; then
    apt_install "the postgres-catalog lake tests will be skipped" postgresql
fi

# The compiled OTLP decoder (collectors/otlp/_fastdecode.c) and span encoder
# (collectors/_fastencode.c) need a C compiler and the interpreter's headers: Debian's python3
# keeps them in python3-dev, uv's and pyenv's Pythons carry their own. Without them the install
# still succeeds and traces decode (exported spans encode) in Python, slower.
has_headers() {
    "$PY" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}
if ! command -v cc >/dev/null 2>&1 || ! has_headers; then
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq gcc libc6-dev python3-dev >/dev/null
    else
        echo "setup: no C compiler or Python headers (and no root apt-get to install them):" \
             "the collector will decode OTLP traces in Python, about twice its CPU per span," \
             "and the in-process exporter encode spans in Python" >&2
    fi
fi

if ! "$PY" -m uv --version >/dev/null 2>&1 && ! command -v uv >/dev/null 2>&1; then
    "$PY" -m pip install -q uv
fi
UV="uv"; command -v uv >/dev/null 2>&1 || UV="$PY -m uv"

if [[ ! -x .venv/bin/python ]]; then
    $UV venv -q --python "$PY" .venv
fi
# The engine extra's torch: a CPU-only wheel where the machine keeps one (ROLLOUTSCOPE_TORCH_WHEELS,
# default /opt/wheels; about 190 MB, no download), else PyPI's, whose Linux build pulls about
# 3.2 GB of CUDA libraries.
if [[ ",${EXTRAS}," == *",engine,"* ]]; then
    tag=$(.venv/bin/python -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
    cpu_torch=$(ls "${ROLLOUTSCOPE_TORCH_WHEELS:-/opt/wheels}"/torch-*+cpu-"${tag}"-*.whl \
                2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -n "$cpu_torch" ]]; then
        $UV pip install -q --python .venv/bin/python "$cpu_torch"
    fi
fi
$UV pip install -q --compile-bytecode --python .venv/bin/python -e ".[${EXTRAS}]"
