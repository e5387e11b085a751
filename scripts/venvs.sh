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

# The set-up is quiet unless something is wrong: each phase says what it does in one line, and a step's own
# output is kept aside, shown whole when the step fails. When it succeeds, only what the tool itself marks (pip's
# lines that start with ERROR: or WARNING:, not a build backend's indented chatter) shows: every error line (a
# dependency conflict), and of the warnings the first and their number (a pip.conf naming a missing index folder
# warns once per package).

# say MESSAGE: one line about the phase that begins, prefixed with the script's name.
say() {
  echo "$(basename "$0" .sh): $*"
}

# quietly WHAT COMMAND [ARGS...]: run COMMAND with its output kept aside (see above); its exit status is returned.
quietly() {
  local what=$1 log status=0
  shift
  log=$(mktemp "${TMPDIR:-/tmp}/repogym-setup.XXXXXX")
  "$@" >"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    echo "$(basename "$0" .sh): $what failed (exit status $status); its output:" >&2
    cat "$log" >&2
  else
    grep -E '^ERROR:' "$log" >&2 || true
    local warnings
    warnings=$(grep -cE '^WARNING:' "$log" || true)
    if [ "$warnings" -gt 0 ]; then
      grep -m1 -E '^WARNING:' "$log" >&2
      if [ "$warnings" -gt 1 ]; then
        echo "  (and $((warnings - 1)) more warning(s) while $what)" >&2
      fi
    fi
  fi
  rm -f "$log"
  return "$status"
}

# pip_quietly WHAT PYTHON [PIP ARGS...]: PYTHON's pip, quietly; without the notices a set-up is no place for (a
# newer pip exists; pip runs as root, as it does in containers and CI).
pip_quietly() {
  local what=$1 python=$2
  shift 2
  quietly "$what" env PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 "$python" -m pip "$@"
}

# install_repogym PYTHON EXTRAS [PIP ARGS...] (EXTRAS: "[dev]" or ""): repogym into PYTHON's environment,
# editable from the checkout where it can be written, else from a copy of it (setuptools writes its build
# files into the source folder, which a read-only checkout refuses). Quietly.
install_repogym() {
  local python=$1 extras=$2
  shift 2
  if checkout_writable; then
    pip_quietly "installing repogym" "$python" install -q "$@" -e ".$extras"
  else
    local copy status=0
    copy=$(mktemp -d)
    tar -c --exclude='./.venv*' --exclude='./.git' --exclude='__pycache__' . | tar -x -C "$copy"
    pip_quietly "installing repogym" "$python" install -q "$@" "$copy$extras" || status=$?
    rm -rf "$copy"
    return "$status"
  fi
}
