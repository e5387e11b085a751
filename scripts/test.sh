#!/usr/bin/env bash
# Set up, then run the whole test suite except GPU tests (docker, ray and slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -m "not gpu" "$@"
