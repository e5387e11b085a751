"""The tamper filter: changes to tests, test configuration and interpreter start-up hooks never reach grading.

An agent may edit tests in its own sandbox (to explore), but what is graded is its diff minus every file
that defines or configures tests, or that runs code when Python starts:

- anything under a ``tests``/``test``/``testing`` folder, ``test_*.py``, ``*_test.py``, and any file the
  task's own tests live in or its hidden ``test_patch`` touches (whatever their names);
- ``conftest.py`` anywhere; ``pytest.ini``, ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml``, ``tox.ini``,
  ``noxfile.py``;
- ``sitecustomize.py``, ``usercustomize.py``, ``*.pth`` files and the install step's ``.repogym-install`` folder
  (run at interpreter start, before pytest);
- code that stands in for other code (:func:`is_shadow_path`): bytecode (``*.pyc``, anything under
  ``__pycache__``), installed-distribution metadata (``*.dist-info``, ``*.egg-info``: a ``pytest11`` entry
  point is a plugin pytest loads by itself), and the Python files of top-level modules or packages (at the
  root or under ``src/``) named like the standard library, ``pytest``, ``_pytest``, ``pluggy`` or ``py``;
- the task's test runner's own files when it is not pytest (:data:`RUNNER_FILES`: ``tests/runtests.py``
  for django; ``bin/test``, ``sympy/testing/runtests.py`` and ``sympy/utilities/runtests.py`` for sympy),
  passed in with the task's protected paths (``envs/rewards/evaluate.py``), so a patch cannot make the
  runner print ``ok`` for everything;
- ``setup.cfg`` and ``pyproject.toml`` only when their pytest section changed (checked in the sandbox,
  see :func:`pytest_section`); their other sections are the agent's to change.

Two lines of defence: :func:`filter_patch` drops such files from the patch text, and grading then asks git
in the sandbox what really changed (:func:`is_tamper_path` over the changed paths), so a patch the
splitter misreads still cannot change them. Every dropped path is listed in ``info["eval"]["dropped"]``.
"""

from __future__ import annotations

import configparser
import sys
import tomllib
from pathlib import PurePosixPath
from typing import Collection, Iterable

from repogym.envs.sandbox.install import INSTALL_DIR
from repogym.envs.tasks.patches import split_patch

TEST_DIRS = {"tests", "test", "testing"}
TEST_FILES = {"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "noxfile.py"}
STARTUP_FILES = {"sitecustomize.py", "usercustomize.py"}
CONFIG_WITH_PYTEST_SECTION = {"setup.cfg", "pyproject.toml"}
SHADOWED = frozenset(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy", "py"}
"""Names a top-level module or package of the repository may not take (what the harness imports)."""
RUNNER_FILES = {"pytest": (), "django": ("tests/runtests.py",),
                "sympy": ("bin/test", "sympy/testing/runtests.py", "sympy/utilities/runtests.py")}
"""The files of each test runner (``task.setup["runner"]``) that a graded patch may not change."""
METADATA_SUFFIXES = (".dist-info", ".egg-info")
MODULE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")


def is_test_path(path: str) -> bool:
    """Whether a repository path defines or configures tests."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (any(p in TEST_DIRS for p in parts[:-1]) or name in TEST_FILES
            or (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py"))


def is_startup_path(path: str) -> bool:
    """Whether a path is code Python runs when it starts (``sitecustomize``, ``usercustomize``, ``.pth``, anything
    in the folder a task's install step filled, which every interpreter adds as a site folder)."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return name in STARTUP_FILES or name.endswith(".pth") or (bool(parts) and parts[0] == INSTALL_DIR)


def is_shadow_path(path: str) -> bool:
    """Whether ``path`` is bytecode, distribution metadata, or a top-level module named like what the harness
    imports (``json.py``, ``pytest/``, ``src/pluggy.py``, ``os.cpython-311-x86_64-linux-gnu.so``)."""
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    name = parts[-1]
    if name.endswith(".pyc") or "__pycache__" in parts or any(p.endswith(METADATA_SUFFIXES) for p in parts):
        return True
    if not name.endswith(MODULE_SUFFIXES):
        return False
    top = parts[1:] if parts[0] == "src" and len(parts) > 1 else parts
    if len(top) > 1:  # a package: Python code under a top-level folder with a shadowing name
        return top[0] in SHADOWED
    return top[0].split(".", 1)[0] in SHADOWED


def is_tamper_path(path: str, protected: Collection[str] = ()) -> bool:
    """Whether a change to ``path`` is dropped before grading; ``protected`` are the task's own test files."""
    return is_test_path(path) or is_startup_path(path) or is_shadow_path(path) or path in protected


def filter_patch(patch: str, protected: Iterable[str] = ()) -> tuple[str, list[str]]:
    """The patch without tampering, and the paths dropped (``protected``: the task's test files)."""
    protected = set(protected)
    kept, dropped = [], []
    for part in split_patch(patch):
        if any(is_tamper_path(p, protected) for p in part.paths):
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
    except Exception:  # the agent's file: whatever a parser raises on it, it counts as changed (fail closed)
        return "<unparsable>"
