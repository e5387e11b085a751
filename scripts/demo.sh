#!/usr/bin/env bash
# The main job: set up, then run the oracle and null agents over the builtin suite and print a table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/venvs.sh
exec "$MAIN_VENV/bin/repogym" demo --suite builtin --agents oracle,null "$@"
