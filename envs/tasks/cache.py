"""repogym's cache folder: built task repositories, clones, generated suites, sandbox heartbeats.

Its own module, imported by everything that keeps files there, so that none of them imports another just
to find the folder (``tasks.repos`` resolves builtin repositories, which live in the cache).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """repogym's cache (``REPOGYM_CACHE``, default ``~/.cache/repogym``), created if missing."""
    path = Path(os.environ.get("REPOGYM_CACHE") or Path.home() / ".cache" / "repogym")
    path.mkdir(parents=True, exist_ok=True)
    return path
