#!/usr/bin/env bash
# Create .venv-integrations: the peers' packages the integrations are tested against (openenv-core,
# skyrl-gym, verifiers, trl, mini-swe-agent, pinned in pyproject's `integrations` extra), kept out of
# .venv because they bring about a hundred packages of their own (web servers, LLM clients, UIs).
# The environment is layered over .venv: a .pth file adds .venv's site-packages after its own, so torch,
# transformers and the editable repogym are shared, not installed twice. Idempotent.
# Users of one integration install it into their own environment instead: pip install "repogym[integrations]".
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# shellcheck source=scripts/venvs.sh
source scripts/venvs.sh
VENV="$VENV_DIR/.venv-integrations"
[ -x "$MAIN_VENV/bin/python" ] || bash scripts/setup.sh
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import openenv, skyrl_gym, verifiers, trl, minisweagent, repogym" 2>/dev/null; then
  echo "setup_integrations: $VENV is ready"
  exit 0
fi
say "creating ${VENV#"$PWD/"} with the peers' packages (a few minutes on first run)..."
[ -x "$VENV/bin/python" ] || quietly "creating $VENV" "$PYTHON" -m venv "$VENV"
base_site=$("$MAIN_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
own_site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
# addsitedir (not a bare path) so .venv's own .pth files run too: the editable repogym is one of them.
echo "import site; site.addsitedir('$base_site')" > "$own_site/zz_repogym_base.pth"
pip_quietly "upgrading pip" "$VENV/bin/python" install -q --upgrade pip
pins=$("$MAIN_VENV/bin/python" - <<'PY'
import tomllib
print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["integrations"]))
PY
)
# Keep .venv's torch and transformers: the extras must not replace what the rest of repogym runs on.
"$MAIN_VENV/bin/python" -m pip freeze | grep -iE '^(torch|transformers|accelerate)==' > "$VENV/constraints.txt"
# shellcheck disable=SC2086
# --no-compile: bytecode is written on first import, for the modules the tests import (scripts/setup_vllm.sh).
pip_quietly "installing $pins" "$VENV/bin/python" install -q --no-compile -c "$VENV/constraints.txt" $pins
"$VENV/bin/python" -c "import openenv, skyrl_gym, verifiers, trl, minisweagent, repogym; print('setup_integrations: ready')"
