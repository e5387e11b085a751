"""How a project's tests run: test folders, the test command, import path, declared dependencies."""

from __future__ import annotations

import configparser
import logging
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

TEST_DIRS = ("tests", "test", "testing")


@dataclass
class Layout:
    """What running a project's tests takes."""

    test_paths: list[str]
    """Folders (or files) holding the tests, relative to the root."""
    test_command: str
    """Shell command run from the root; test ids or files are appended."""
    requirements: list[str] = field(default_factory=list)
    """Runtime dependencies the project declares (pyproject / setup.cfg)."""


def detect_layout(root: Path) -> Layout | None:
    """The layout of the project at ``root``, or ``None`` when it ships no pytest-style tests."""
    paths = [d for d in TEST_DIRS if (root / d).is_dir() and any((root / d).rglob("test*.py"))]
    if not paths:  # tests inside the package, e.g. toolz/tests/
        paths = sorted(str(d.relative_to(root)) for name in TEST_DIRS for d in root.glob(f"*/{name}")
                       if d.is_dir() and any(d.glob("test*.py")))
    if not paths:
        paths = sorted(p.name for p in root.glob("test_*.py")) or sorted(p.name for p in root.glob("*_test.py"))
    if not paths:
        return None
    pythonpath = "src:" if (root / "src").is_dir() and any((root / "src").glob("*/__init__.py")) else ""
    # Project addopts often name plugins the image lacks (--cov, -n); the harness sets its own options.
    command = (f"PYTHONPATH={pythonpath}.:$PYTHONPATH python -m pytest -q -p no:cacheprovider -o addopts='' "
               "-W ignore::DeprecationWarning")
    return Layout(paths, command, declared_requirements(root))


def declared_requirements(root: Path) -> list[str]:
    """``[project].dependencies`` of pyproject.toml, else ``install_requires`` of setup.cfg."""
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            deps = tomllib.loads(pyproject.read_text()).get("project", {}).get("dependencies")
            if deps is not None:
                return [d for d in deps if _applies(d)]
        except tomllib.TOMLDecodeError as exc:  # the source project's own file: then setup.cfg is asked
            log.warning("%s is not valid TOML (%s): its dependencies are not read", pyproject, exc)
    setup_cfg = root / "setup.cfg"
    if setup_cfg.is_file():
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(setup_cfg.read_text())
            raw = parser.get("options", "install_requires", fallback="")
            return [line.strip() for line in raw.splitlines() if line.strip() and _applies(line)]
        except configparser.Error as exc:  # the source project's own file
            log.warning("%s cannot be parsed (%s): its dependencies are not read", setup_cfg, exc)
    return []


def _applies(requirement: str) -> bool:
    # Skip requirements guarded for old Pythons; the images run 3.11.
    marker = requirement.partition(";")[2]
    return not re.search(r"python_version\s*<\s*['\"]3\.([0-9])['\"]", marker)
