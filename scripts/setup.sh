#!/usr/bin/env bash
# Set up repogym on a fresh Debian machine with Python 3.11: system packages (as root), a virtual
# environment with the package and its dev extras, and the Docker base image when a daemon answers.
# Quiet unless something is wrong: one line per phase; a step's own output shows when it fails (scripts/venvs.sh).
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
    say "installing system packages (${need[*]})..."
    quietly "apt-get update" apt-get update -qq
    quietly "apt-get install ${need[*]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  else
    echo "setup: please install ${need[*]} (sudo apt-get install ${need[*]})" >&2
  fi
fi

if [ ! -x "$MAIN_VENV/bin/python" ]; then
  say "creating ${MAIN_VENV#"$PWD/"}..."
  quietly "creating $MAIN_VENV" "$PYTHON" -m venv "$MAIN_VENV"
fi
py="$MAIN_VENV/bin/python"
say "installing repogym and its dependencies (a few minutes on first run)..."
pip_quietly "upgrading pip" "$py" install -q --upgrade pip
# torch first, pinned: an unpinned torch pulled in by another package would be a multi-GB CUDA build.
# Where torch is already installed (a GPU machine with its CUDA build) it is kept.
"$py" -c "import torch" 2>/dev/null || pip_quietly "installing torch" "$py" install -q "torch==${TORCH_VERSION:-2.13.0}"
install_repogym "$py" "[dev]"

if docker info >/dev/null 2>&1; then
  say "building the Docker base image..."
  "$MAIN_VENV/bin/repogym" images build
else
  say "no Docker daemon answers; the local (bubblewrap) sandbox will be used"
fi
