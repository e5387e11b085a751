"""What a sandbox loads: a repository tree at one commit, and the install steps to run in it.

The tasks layer makes snapshots (:func:`repogym.envs.tasks.repos.snapshot`); sandboxes only load them, so the type
lives here, at the sandbox's level.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RepoSnapshot:
    """A repository tree at one commit."""

    key: str
    """Stable id of this tree (repo + commit)."""
    tar: bytes
    """An uncompressed tar of the tree, paths relative to the repository root."""
    install: tuple[str, ...] = ()
    """Shell commands run in the loaded tree before its base commit is made (the task's install steps)."""
    tree_env: tuple[tuple[str, str], ...] = ()
    """Environment variables the install steps and every later command in the loaded tree get
    (``SETUPTOOLS_SCM_PRETEND_VERSION``: the commit's version, which a one-commit tree without tags cannot give)."""
