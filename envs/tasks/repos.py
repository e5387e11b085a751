"""Where a task's repository comes from, and the snapshot of its base commit that sandboxes load.

A snapshot is the tree at ``base_commit`` as a tar archive, nothing more: no ``.git``, so the agent's
sandbox starts from one fresh commit and holds no history past (or before) the base.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from repogym.envs.errors import ConfigError, InfraError
from repogym.envs.registry import Registry
from repogym.envs.tasks.cache import cache_dir
from repogym.envs.tasks.schema import Task


@dataclass(frozen=True)
class RepoSnapshot:
    """A repository tree at one commit."""

    key: str
    """Stable id of this tree (repo + commit)."""
    tar: bytes
    """An uncompressed tar of the tree, paths relative to the repository root."""


def task_source(task: Task) -> str:
    """``builtin:NAME``, ``path:DIR`` or ``git:URL`` for a task (``setup.source`` or the ``repogym/`` prefix)."""
    source = task.setup.get("source")
    if source:
        return str(source)
    if task.repo.startswith("repogym/"):
        return "builtin:" + task.repo.split("/", 1)[1]
    raise ConfigError(f"task {task.instance_id}: no source for repo {task.repo!r}; set setup.source to "
                      "'path:/a/git/repo' or 'git:URL'")


def repo_path(task: Task) -> Path:
    """A local git repository that holds the task's base commit."""
    return _resolve(task_source(task))


def _clone(url: str) -> Path:
    """A no-checkout clone of ``url`` in the cache (made once)."""
    target = cache_dir() / "clones" / hashlib.sha256(url.encode()).hexdigest()[:16]
    if not target.exists():
        import git  # GitPython
        git.Repo.clone_from(url, target, no_checkout=True)
    return target


SOURCE_KINDS: Registry[Callable[[str], Path]] = Registry("task source kind", {
    "builtin": "repogym.envs.tasks.builtin:build_repo",
    "path": Path,
    "git": _clone,
}, error=lambda message: ConfigError(f"{message} (a source is builtin:NAME, path:DIR or git:URL)"))
"""``KIND`` of a ``KIND:WHERE`` source -> the function making ``WHERE`` a local git repository."""


@functools.lru_cache(maxsize=None)
def _resolve(source: str) -> Path:
    kind, _, where = source.partition(":")
    return SOURCE_KINDS.resolve(kind)(where)


def snapshot(task: Task) -> RepoSnapshot:
    """The tree at the task's base commit."""
    return snapshot_of(str(repo_path(task)), task.base_commit)


@functools.lru_cache(maxsize=64)
def snapshot_of(repo: str, commit: str) -> RepoSnapshot:
    """The tree of ``repo`` at ``commit`` (cached)."""
    proc = subprocess.run(["git", "-C", repo, "archive", "--format=tar", commit], capture_output=True)
    if proc.returncode != 0:
        raise InfraError("tasks.repos", f"git archive {commit} in {repo} failed: {proc.stderr.decode(errors='replace').strip()}")
    return RepoSnapshot(key=f"{repo}@{commit}", tar=proc.stdout)
