"""Where a task's repository comes from, and the snapshot of its base commit that sandboxes load.

A snapshot is the tree at ``base_commit`` as a tar archive, nothing more: no ``.git``, so the agent's
sandbox starts from one fresh commit and holds no history past (or before) the base.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from repogym.envs.errors import ConfigError, InfraError
from repogym.envs.tasks.schema import Task


# Fixed identity and dates: repositories repogym builds get the same commit ids on every machine.
FIXED_GIT_ENV = {
    "GIT_AUTHOR_NAME": "repogym", "GIT_AUTHOR_EMAIL": "tasks@repogym.invalid",
    "GIT_COMMITTER_NAME": "repogym", "GIT_COMMITTER_EMAIL": "tasks@repogym.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


def fixed_git(repo: Path | str, *args: str, input: bytes | None = None, where: str = "tasks.repos",
              env: dict[str, str] | None = None) -> str:
    """Run git in ``repo`` with :data:`FIXED_GIT_ENV`; :class:`InfraError` (naming ``where``) with git's message."""
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True,
                          env={**os.environ, **FIXED_GIT_ENV, **(env or {})})
    if proc.returncode != 0:
        raise InfraError(where, f"git {' '.join(args[:3])} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout.decode(errors="replace")


def cache_dir() -> Path:
    """repogym's cache (``REPOGYM_CACHE``, default ``~/.cache/repogym``)."""
    path = Path(os.environ.get("REPOGYM_CACHE") or Path.home() / ".cache" / "repogym")
    path.mkdir(parents=True, exist_ok=True)
    return path


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


@functools.lru_cache(maxsize=None)
def _resolve(source: str) -> Path:
    kind, _, where = source.partition(":")
    if kind == "builtin":
        from repogym.envs.tasks.builtin import build_repo
        return build_repo(where)
    if kind == "path":
        return Path(where)
    if kind == "git":
        target = cache_dir() / "clones" / hashlib.sha256(where.encode()).hexdigest()[:16]
        if not target.exists():
            import git  # GitPython
            git.Repo.clone_from(where, target, no_checkout=True)
        return target
    raise ConfigError(f"unknown source {source!r}: expected builtin:NAME, path:DIR or git:URL")


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
