"""The old home of :func:`cache_dir`, now :mod:`repogym.envs.core.paths` (the sandboxes need it too, below tasks).

Kept for callers outside the tasks and sandbox layers that still import it from here."""

from __future__ import annotations

from repogym.envs.core.paths import cache_dir

__all__ = ["cache_dir"]
