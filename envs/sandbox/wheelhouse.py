"""The host-side wheelhouse: sandboxes have no network, so their packages are downloaded here first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def download_wheels(requirements: list[str], python: str, dest: Path) -> str | None:
    """``pip download`` binary wheels of ``requirements`` for Python ``python`` into ``dest``; pip's error or ``None``."""
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), "--only-binary=:all:",
                           "--python-version", python, *requirements], capture_output=True, text=True)
    return proc.stderr.strip() or "pip download failed" if proc.returncode != 0 else None
