#!/usr/bin/env bash
# The GPU check of the training stack (issue 20): on one GPU with vLLM installed, builds a random-init 0.5B
# model and runs 3 GRPO steps with vLLM generation, the FSDP2 learner and bucketed weight sync, printing
# generation tokens/s, learner step time, weight-sync time and the sampler/learner log-prob mismatch.
# Bounded at 10 minutes. Usage: bash benchmarks/gpu_check.sh [--steps 3] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA device visible')"
"$PY" -c "import vllm" 2>/dev/null || { echo "gpu_check: vllm is not installed (pip install -e '.[vllm]')" >&2; exit 1; }
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1
exec timeout 600 "$PY" -m benchmarks.gpu_check "$@"
