"""The install steps a sandbox's environment runs, built from a task's ``setup`` (its keys: :mod:`repogym.envs.tasks.environments`).

The install steps run at every load of the task's tree, as the agent's user, before the base commit is made,
so what they produce (package metadata, a setuptools-scm ``_version.py``, the editable hook) is part of the base
and survives a reset. pip installs into :data:`INSTALL_DIR` in the tree (the environment itself is
read-only), from the environment's wheels only and without dependencies (``setup.pip`` provides them); the
environment processes that folder as a site folder in every interpreter that is not isolated (``-I``), and
grading puts it back from the base whatever a patch did to it. :data:`BUILD_REQUIREMENTS` join ``setup.pip``
when there is an install step.

Here, at the sandbox's level, because the sandbox backends build environments from them (images, local
virtualenvs); the tasks layer imports them from here.
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


PLUGIN_LIST = "share/repogym/pytest-plugins"
"""Where an environment with ``setup.pip`` packages lists the pytest plugins they brought, under its interpreter's
``sys.prefix`` (read-only to the tests' user): one ``<entry point name> <module>`` line per ``pytest11`` entry
point. Plain pytest loads those by itself; the harness runs pytest with plugin autoload off and names these with
``-p`` (``inside/repogym_launch.py``), so no plugin but the environment's own can load that way."""

LIST_PLUGINS = ("import importlib.metadata as m, os, sys; found = m.entry_points(); "
                "found = found.select(group='pytest11') if hasattr(found, 'select') else found.get('pytest11', []); "
                f"path = os.path.join(sys.prefix, {PLUGIN_LIST!r}); os.makedirs(os.path.dirname(path), exist_ok=True); "
                "open(path, 'w').write(''.join(sorted({'%s %s\\n' % (e.name, e.value.strip()) for e in found "
                "if ':' not in e.value and ' ' not in e.name})))")
"""One line of Python, run by an environment's own interpreter with ``-I`` once its packages are installed (the
project's own install, in the tree, is not among them), that writes :data:`PLUGIN_LIST`. An entry point naming
an attribute (``module:object``) is left out: ``-p`` loads modules."""


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
