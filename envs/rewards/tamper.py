"""The tamper filter: changes to tests and test configuration never reach grading.

An agent may edit tests in its own sandbox (to explore), but what is graded is its diff minus every file
that defines or configures tests: anything under a ``tests``/``test``/``testing`` folder, ``test_*.py``,
``*_test.py``, ``conftest.py``, ``pytest.ini``, ``tox.ini``, ``noxfile.py``. ``setup.cfg`` and
``pyproject.toml`` are kept unless their pytest section changed (checked in the sandbox, see
:func:`pytest_section`).
"""

from __future__ import annotations

import configparser
import tomllib
from pathlib import PurePosixPath

from envs.tasks.patches import split_patch

TEST_DIRS = {"tests", "test", "testing"}
TEST_FILES = {"conftest.py", "pytest.ini", "tox.ini", "noxfile.py", ".pytest.ini"}
CONFIG_WITH_PYTEST_SECTION = {"setup.cfg", "pyproject.toml"}


def is_test_path(path: str) -> bool:
    """Whether a repository path defines or configures tests."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (any(p in TEST_DIRS for p in parts[:-1]) or name in TEST_FILES
            or (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py"))


def filter_patch(patch: str) -> tuple[str, list[str]]:
    """The patch without test files, and the paths dropped."""
    kept, dropped = [], []
    for part in split_patch(patch):
        if any(is_test_path(p) for p in part.paths):
            dropped.extend(sorted(part.paths))
        else:
            kept.append(part.text)
    return "".join(kept), dropped


def config_files_touched(patch: str) -> list[str]:
    """``setup.cfg`` / ``pyproject.toml`` files the patch changes (their pytest section needs a check)."""
    return sorted({p for part in split_patch(patch) for p in part.paths
                   if PurePosixPath(p).name in CONFIG_WITH_PYTEST_SECTION})


def pytest_section(name: str, text: str) -> str | None:
    """The pytest configuration in a setup.cfg or pyproject.toml, normalised; unparsable text counts as a change."""
    try:
        if name.endswith(".toml"):
            data = tomllib.loads(text)
            return repr(data.get("tool", {}).get("pytest"))
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        return repr({s: dict(parser[s]) for s in parser.sections() if s in ("tool:pytest", "pytest")})
    except Exception:
        return "<unparsable>"
