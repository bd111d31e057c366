#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs rolloutscope's main job: `rolloutscope demo`
# (extra arguments are passed on, e.g. --port 5006 --no-browser).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/rolloutscope demo "$@"
