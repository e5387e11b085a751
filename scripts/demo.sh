#!/usr/bin/env bash
# The main job: set up, then run the oracle and null agents over the builtin suite and print a table.
# Extra arguments go to `repogym demo` (later ones win): `bash scripts/demo.sh --task ID --task ID2`, `--limit 4`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck source=scripts/venvs.sh
source scripts/venvs.sh
# Trajectories go to runs/demo, or beside the environments when the checkout is read-only (--out overrides).
out=runs/demo
checkout_writable || out="$VENV_DIR/runs/demo"
exec "$MAIN_VENV/bin/repogym" demo --suite builtin --agents oracle,null --out "$out" "$@"
