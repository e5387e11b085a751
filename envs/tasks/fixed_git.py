"""git with a fixed identity and fixed dates: repositories repogym builds get the same commit ids on every machine.

Used by the builtin task builder, the task generator and its sources; kept apart from :mod:`.repos` so that
building a repository never imports the module that resolves one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from repogym.envs.core.errors import InfraError

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
