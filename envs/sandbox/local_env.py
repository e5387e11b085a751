"""The local backend's interpreters: one virtualenv per task setup, never the host's own packages.

A local sandbox runs commands and tests with a virtualenv made for its task's ``setup``, not with the
environment repogym itself runs in, whose site-packages could hold anything (a newer release of the very
project under test, with the fix in it). The virtualenv has this interpreter's Python, pytest (the version
repogym runs with, unless ``setup.pip`` pins one) and ``setup.pip``, installed from a host-side wheelhouse
that ``pip download`` fills (binary wheels only, as the Docker images get them; ``REPOGYM_WHEELHOUSE`` names a
folder of wheels to use, and fill, instead, e.g. one filled beforehand for a machine offline). Made once per setup under
the cache (``local-envs/<key>``): built beside it and renamed into place, so a build that dies leaves
nothing half-made and concurrent builders agree on one. Sandboxes mount it at ``/.repogym-python``.

The base interpreter it points to is mounted at a fixed place too (:data:`BASE_MOUNT`), unless it lies in the
system folders every sandbox sees anyway (``/usr``): the agent's view must not depend on where Python is installed
(under ``/tmp``, it would show in the agent's ``/tmp``; under ``/root/.pyenv``, a host path would appear). Such a
virtualenv is made with copies of the interpreter (not links to its host path) and its ``pyvenv.cfg`` names
:data:`BASE_MOUNT` as home once built, so it runs in sandboxes only; its shared ``libpython`` is found there
through ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

from repogym.envs.core.errors import ConfigError, SandboxError
from repogym.envs.core.paths import cache_dir
from repogym.envs.sandbox.install import (INSTALL_HOOK_NAME, LIST_PLUGINS, environment_requirements, install_hook,
                                          install_steps, requirement_name)
from repogym.envs.sandbox.wheelhouse import download_wheels

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
BASE_MOUNT = "/.repogym-base"  # where sandboxes see the base interpreter when it is not under the system folders
SYSTEM_PREFIXES = ("/usr", "/bin", "/lib", "/lib64")


def base_mounted() -> bool:
    """Whether this interpreter's base must be mounted at :data:`BASE_MOUNT` (it is outside the system folders)."""
    base = Path(sys.base_prefix).resolve()
    return not any(base == Path(p) or base.is_relative_to(p) for p in SYSTEM_PREFIXES)


def requirements_of(setup: dict[str, Any]) -> list[str]:
    """What a setup's virtualenv installs: pytest (unless pinned by ``setup.pip``), then ``setup.pip``."""
    pip = environment_requirements(setup)
    return ([] if "pytest" in {requirement_name(p) for p in pip} else [f"pytest=={version('pytest')}"]) + pip


def env_key(setup: dict[str, Any]) -> str:
    """Setups with the same key share a virtualenv (same Python, same requirements)."""
    key = json.dumps({"python": PYTHON, "requirements": requirements_of(setup), "plugin_list": LIST_PLUGINS,
                      **({"install_hook": install_hook()} if install_steps(setup) else {}),
                      **({"base": BASE_MOUNT} if base_mounted() else {})}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def ensure_local_env(setup: dict[str, Any] | None = None) -> Path:
    """The virtualenv for ``setup`` (its prefix), made on first use."""
    setup = setup or {}
    root = cache_dir() / "local-envs"
    target = root / env_key(setup)
    if (target / "pyvenv.cfg").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        building.chmod(0o755)  # the sandbox's unprivileged user runs it
        _make(building, requirements_of(setup), install_hook() if install_steps(setup) else None)
        try:
            os.rename(building, target)
        except OSError:  # another process made it first: theirs is as good
            if not (target / "pyvenv.cfg").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def _make(prefix: Path, requirements: list[str], hook: str | None) -> None:
    base = Path(sys.base_prefix) / "bin" / f"python{PYTHON}"
    copies = ["--copies"] if base_mounted() else []
    made = subprocess.run([str(base), "-m", "venv", "--without-pip", "--clear", *copies, str(prefix)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise SandboxError("sandbox.local.env", f"could not make a virtualenv with {base}: {made.stderr.strip()[-600:]}")
    wheelhouse = Path(os.environ.get("REPOGYM_WHEELHOUSE") or cache_dir() / "wheelhouse" / PYTHON)
    fetch_error = download_wheels(requirements, PYTHON, wheelhouse)
    # Without PYTHONPATH: pip would count what that path holds as installed and leave the virtualenv without it.
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install",
                                "-q", "--no-index", "--find-links", str(wheelhouse), *requirements],
                               capture_output=True, text=True, env=clean)
    if installed.returncode != 0:  # the wheelhouse cannot serve them: say why the download did not either
        why = fetch_error or installed.stderr.strip()
        raise ConfigError(f"could not install {requirements} for the local sandbox (binary wheels for Python "
                          f"{PYTHON}): {why[-600:]}")
    if requirements:  # the pytest plugins they brought, for the launcher to name (plugin autoload is off)
        listed = subprocess.run([str(prefix / "bin" / "python"), "-I", "-c", LIST_PLUGINS], capture_output=True, text=True)
        if listed.returncode != 0:
            raise SandboxError("sandbox.local.env", f"could not list the pytest plugins: {listed.stderr.strip()[-600:]}")
    if hook:
        site = next((prefix / "lib").glob("python*/site-packages"))
        (site / INSTALL_HOOK_NAME).write_text(hook)
    # Sandboxes mount the env elsewhere (and it is renamed into place): scripts find python on PATH instead.
    for script in (prefix / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            head, _, rest = script.read_bytes().partition(b"\n")
            if head.startswith(b"#!") and str(prefix).encode() in head:
                script.write_bytes(b"#!/usr/bin/env python\n" + rest)
    if copies:  # from now on for sandboxes only: home is where they mount the base interpreter
        config = prefix / "pyvenv.cfg"
        base_prefix = str(Path(sys.base_prefix).resolve())
        config.write_text(config.read_text().replace(base_prefix, BASE_MOUNT)
                          .replace(str(Path(sys.base_prefix)), BASE_MOUNT))
