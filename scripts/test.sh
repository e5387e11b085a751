#!/usr/bin/env bash
# Set up, then run the whole test suite except GPU tests (docker, ray and slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The leaderboard page is checked in headless Chromium (Debian's package), a test-only dependency.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# Lint first (seconds): pyproject's ruff rules keep every import on the one installed namespace.
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -m "not gpu" "$@"
