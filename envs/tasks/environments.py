"""A task's environment, described by data: the ``setup`` keys, and the install steps they imply.

``Task.setup`` holds everything the sandbox's environment needs (tasks with equal setups share it):

=============== =========================================================================================
key             meaning
=============== =========================================================================================
``python``      Python version of the image (``3.9``, ``3.11`` (default), ``3.13``); the local backend runs only
                its own interpreter's
``pip``         requirements installed into the environment from the host-side wheelhouse (binary wheels)
``pre_install`` shell commands run in the fresh tree before the install step (e.g. ``sed`` on ``setup.py``)
``install``     one shell command that installs the repository itself, e.g. ``python -m pip install -e .``
``runner``      how tests run and report: ``pytest`` (default), ``django``, ``sympy``
``cpus``        CPUs the sandbox gets at least (tests of parallel workers skip on one)
``image``       a prebuilt image to run instead of repogym's own (docker backend only)
``workdir``     where that image keeps the repository (``/testbed`` in the datasets' images)
``source``      where the repository comes from (see :mod:`repogym.envs.tasks.repos`)
=============== =========================================================================================

The install steps run at every load of the task's tree, as the agent's user, before the base commit is made,
so what they produce (package metadata, a setuptools-scm ``_version.py``, the editable hook) is part of the base
and survives a reset. pip installs into ``.repogym-install`` in the tree (the environment itself is
read-only), from the environment's wheels only and without dependencies (``setup.pip`` provides them); the
environment processes that folder as a site folder in every interpreter that is not isolated (``-I``), and
grading puts it back from the base whatever a patch did to it. :data:`BUILD_REQUIREMENTS` join ``setup.pip``
when there is an install step.
"""

from __future__ import annotations

import re
from typing import Any

from repogym.envs.core.errors import ConfigError

INSTALL_DIR = ".repogym-install"
"""Where an install step's pip puts what it installs, relative to the repository root."""
INSTALL_HOOK_NAME = "repogym_install.pth"


def install_hook(repo_dir: str = "/repo") -> str:
    """The ``.pth`` line an environment with an install step carries: ``INSTALL_DIR`` as a site folder, except in
    isolated interpreters (the harness's runner and launcher), which run no code of the repository."""
    return f"import sys, site; sys.flags.isolated or site.addsitedir({repo_dir + '/' + INSTALL_DIR!r})\n"
BUILD_REQUIREMENTS = ("pip>=23.1", "setuptools>=64,<71", "wheel")
"""What an install step needs in the environment (a name ``setup.pip`` already lists is left to that pin).
setuptools 64 is the first with editable wheels (PEP 660); 71 and later import an installed ``importlib_metadata``
in place of their own copy, and old environments hold one too old for them."""


def install_steps(setup: dict[str, Any]) -> tuple[str, ...]:
    """``setup.pre_install`` then ``setup.install``, checked; empty when the task installs nothing."""
    pre = setup.get("pre_install") or []
    if isinstance(pre, str) or not isinstance(pre, list) or not all(isinstance(c, str) and c.strip() for c in pre):
        raise ConfigError(f"setup.pre_install: expected a list of shell commands, got {pre!r:.80}")
    install = setup.get("install") or ""
    if not isinstance(install, str):
        raise ConfigError(f"setup.install: expected one shell command, got {install!r:.80}")
    return tuple(pre) + ((install,) if install.strip() else ())


def requirement_name(requirement: str) -> str:
    """The normalised project name of a requirement (``Foo_Bar>=1`` -> ``foo-bar``)."""
    return re.match(r"\s*([A-Za-z0-9._-]*)", requirement).group(1).lower().replace("_", "-").replace(".", "-")


def environment_requirements(setup: dict[str, Any]) -> list[str]:
    """``setup.pip``, plus :data:`BUILD_REQUIREMENTS` it does not pin when the setup has an install step."""
    pip = [str(p) for p in setup.get("pip") or []]
    if not setup.get("install"):
        return pip
    named = {requirement_name(p) for p in pip}
    return [r for r in BUILD_REQUIREMENTS if requirement_name(r) not in named] + pip

