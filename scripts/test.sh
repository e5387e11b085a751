#!/usr/bin/env bash
# Set up, then run the whole test suite except GPU tests (docker, ray and slow tests included; vLLM in CI).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The leaderboard page is checked in headless Chromium (Debian's package), a test-only dependency.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# Lint first (seconds): pyproject's ruff rules keep every import on the one installed namespace.
.venv/bin/ruff check .
status=0
.venv/bin/python -m pytest -m "not gpu and not vllm and not integrations" "$@" || status=$?
# The peers' packages (OpenEnv, SkyRL-Gym, verifiers, TRL, mini-swe-agent) in an environment layered over
# .venv: always, since the adapters are only worth what their tests against the real packages show.
{ bash scripts/setup_integrations.sh && .venv-integrations/bin/python -m pytest -m integrations "$@"; } || status=$?
# The real vLLM (its CPU build, in an environment of its own: it pins torch): in CI, or when asked. About three
# minutes, the install included; the engine sets the CPU build's environment itself.
if [ "${CI:-}" = true ] || [ "${REPOGYM_TEST_VLLM:-}" = 1 ]; then
  { bash scripts/setup_vllm.sh && .venv-vllm/bin/python -m pytest -m vllm tests/test_vllm_real.py tests/test_vllm_train.py; } || status=$?
fi
exit "$status"
