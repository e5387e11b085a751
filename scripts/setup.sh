#!/usr/bin/env bash
# Set up repogym on a fresh Debian machine with Python 3.11: system packages (as root), a virtual
# environment with the package and its dev extras, and the Docker base image when a daemon answers.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# shellcheck source=scripts/venvs.sh
source scripts/venvs.sh

need=()
command -v git >/dev/null || need+=(git)
command -v bwrap >/dev/null || need+=(bubblewrap)
if docker info >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || need+=(debootstrap)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: please install ${need[*]} (sudo apt-get install ${need[*]})" >&2
  fi
fi

if [ ! -x "$MAIN_VENV/bin/python" ]; then
  "$PYTHON" -m venv "$MAIN_VENV"
fi
py="$MAIN_VENV/bin/python"
"$py" -m pip install -q --upgrade pip
# torch first, pinned: an unpinned torch pulled in by another package would be a multi-GB CUDA build.
# Where torch is already installed (a GPU machine with its CUDA build) it is kept.
"$py" -c "import torch" 2>/dev/null || "$py" -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
install_repogym "$py" "[dev]"

if docker info >/dev/null 2>&1; then
  "$MAIN_VENV/bin/repogym" images build
else
  echo "setup: no Docker daemon answers; the local (bubblewrap) sandbox will be used"
fi
