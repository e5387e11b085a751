"""The host-side wheelhouse: sandboxes have no network, so their packages are downloaded here first.

``pip download --python-version X`` checks wheels' tags and ``Requires-Python`` against X, but evaluates the
environment markers of dependencies with the host's interpreter: for a 3.9 image on a 3.11 host it skips
``exceptiongroup; python_version < "3.11"`` and applies pandas' numpy floor for 3.11. So when the target is
not the host's Python, the requirements are downloaded without their dependencies, then each downloaded
wheel's ``Requires-Dist`` is evaluated for the target and what is missing is downloaded the same way, until
nothing is. Version conflicts are left to the installing pip, which runs with the target's interpreter.

The download says what it fetches and then the time elapsed at least every 10 s (on the caller's ``log``, else
stderr): a first install of a task's packages can take minutes.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any, Callable

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from repogym.envs.core.ticker import ticking

HOST_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
MAX_ROUNDS = 12  # dependency depth; real trees are far shallower


def download_wheels(requirements: list[str], python: str, dest: Path,
                    log: Callable[[str], Any] | None = None) -> str | None:
    """Binary wheels of ``requirements`` and their dependencies for Python ``python`` in ``dest``; pip's error or
    ``None``. Progress goes to ``log`` (else stderr)."""
    with ticking(f"downloading wheels of {' '.join(requirements)} for Python {python}", log):
        return _download(requirements, python, dest)


def _download(requirements: list[str], python: str, dest: Path) -> str | None:
    if python == HOST_PYTHON:
        return _pip_download(requirements, python, dest, deps=True)
    wanted = list(requirements)
    for _ in range(MAX_ROUNDS):
        if not wanted:
            return None
        error = _pip_download(wanted, python, dest, deps=False)
        if error:
            return error
        wanted = missing_dependencies(dest, python)
    return f"dependencies still missing after {MAX_ROUNDS} rounds: {wanted}"


def _pip_download(requirements: list[str], python: str, dest: Path, *, deps: bool) -> str | None:
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), "--only-binary=:all:",
                           "--python-version", python, *([] if deps else ["--no-deps"]), *requirements],
                          capture_output=True, text=True)
    return proc.stderr.strip() or "pip download failed" if proc.returncode != 0 else None


def missing_dependencies(folder: Path, python: str) -> list[str]:
    """Requirements of the wheels in ``folder`` that apply on Linux CPython ``python`` and no wheel there provides."""
    present: set[str] = set()
    needed: dict[str, str] = {}
    environment = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
                   "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    for wheel in sorted(folder.glob("*.whl")):
        metadata = _metadata(wheel)
        if metadata is None:
            continue
        present.add(canonicalize_name(metadata.get("Name", "")))
        for line in metadata.get_all("Requires-Dist") or []:
            try:
                requirement = Requirement(line)
                applies = requirement.marker is None or requirement.marker.evaluate({**environment, "extra": ""})
            except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
                continue
            if applies:
                requirement.marker = None
                needed.setdefault(canonicalize_name(requirement.name), str(requirement))
    return [text for name, text in sorted(needed.items()) if name not in present]


def _metadata(wheel: Path):
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            return Parser().parsestr(archive.read(name).decode("utf-8", errors="replace"), headersonly=True)
    except (zipfile.BadZipFile, StopIteration, OSError):
        return None
