"""repogym's own folders on the host: the cache and the bundled task repositories.

Their own module, at the bottom of the stack, imported by everything that keeps files there or hides them from a
sandbox (tasks, sandboxes, taskgen, agents' model store), so that none of them imports another just to find a folder.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """repogym's cache (``REPOGYM_CACHE``, default ``~/.cache/repogym``), created if missing: built task repositories,
    clones, generated suites, sandbox environments and heartbeats."""
    path = Path(os.environ.get("REPOGYM_CACHE") or Path.home() / ".cache" / "repogym")
    path.mkdir(parents=True, exist_ok=True)
    return path


def task_repos_dir() -> Path:
    """The bundled ``task_repos/`` folder (override with ``REPOGYM_TASK_REPOS``)."""
    override = os.environ.get("REPOGYM_TASK_REPOS")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "task_repos"
