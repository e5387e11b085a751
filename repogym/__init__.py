"""repogym: a Gymnasium gym for coding agents on real repositories. ``import repogym`` registers the envs."""

import os as _os
from pathlib import Path as _Path

# torch's OpenMP threads spin while idle by default; with other processes on the cores (rollout workers, the
# learner, sandboxes) that collapsed CPU generation 10x. Read when torch loads, so set before it does; Ray's
# local workers inherit it.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Imported from a source checkout (a script or test run from its root, where Python puts the current folder
# first) rather than from an install: the design keeps envs/, agents/, trainer/ ... at the top of the
# repository, so repogym.envs and its siblings are found there, as the editable install's finder would.
# An installed repogym has no pyproject.toml beside it and is left as it is.
_checkout = _Path(__file__).resolve().parents[1]
if (_checkout / "pyproject.toml").is_file() and (_checkout / "envs" / "__init__.py").is_file():
    __path__.append(str(_checkout))

import repogym.envs  # noqa: E402, F401  (registers repogym/RepoTask-v0)

try:  # one source of the version: the installed package's metadata (what `repogym --version` prints)
    from importlib.metadata import PackageNotFoundError as _NotInstalled, version as _version

    __version__ = _version("repogym")
except _NotInstalled:  # imported from a checkout that was never installed
    __version__ = "unknown"
