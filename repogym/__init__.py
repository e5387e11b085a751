"""repogym: a Gymnasium gym for coding agents on real repositories. ``import repogym`` registers the envs."""

import repogym.envs  # noqa: F401  (registers repogym/RepoTask-v0)

__version__ = "0.1.0"
