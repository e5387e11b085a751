# Sourced by the scripts: where repogym's virtual environments live and how repogym goes into them.
# They live in the checkout by default (.venv, .venv-integrations, .venv-vllm). REPOGYM_VENV_DIR puts them
# in another folder, for a read-only checkout.
VENV_DIR=${REPOGYM_VENV_DIR:-.}
mkdir -p "$VENV_DIR"
VENV_DIR=$(cd "$VENV_DIR" && pwd)
MAIN_VENV="$VENV_DIR/.venv"

# True when the checkout can be written: pip's editable install, ruff's and pytest's caches write into it.
checkout_writable() {
  [ -w . ] && [ -w pyproject.toml ]
}

# install_repogym PYTHON EXTRAS [PIP ARGS...] (EXTRAS: "[dev]" or ""): repogym into PYTHON's environment,
# editable from the checkout where it can be written, else from a copy of it (setuptools writes its build
# files into the source folder, which a read-only checkout refuses).
install_repogym() {
  local python=$1 extras=$2
  shift 2
  if checkout_writable; then
    "$python" -m pip install -q "$@" -e ".$extras"
  else
    local copy
    copy=$(mktemp -d)
    tar -c --exclude='./.venv*' --exclude='./.git' --exclude='__pycache__' . | tar -x -C "$copy"
    "$python" -m pip install -q "$@" "$copy$extras"
    rm -rf "$copy"
  fi
}
