"""A Python repository's environment, inferred from its files at a commit: the ``setup`` of a task with no table entry.

What is read (never executed): ``pyproject.toml`` (``[project]``, ``[build-system]``, ``[dependency-groups]``,
pytest's table), ``setup.cfg``, ``setup.py`` (through :mod:`ast`: the literal arguments of its ``setup()`` call,
names bound to literals followed), ``requirements*.txt`` and ``requirements/*.txt`` (``-r`` followed),
``tox.ini`` (``[testenv]`` ``deps``, ``extras``, ``commands``), ``environment.yml`` and ``ci/requirements/*.yml``,
and GitHub Actions workflows (their ``python-version`` lists). Requirements for documentation, typing and
linting are left out; the project's own test extras (``test``, ``tests``, ``testing``, ``dev``) are in.

What is decided (each with the file that decided it, in :attr:`Inference.provenance`):

- ``python``: among the Pythons repogym has images for (:data:`IMAGE_PYTHONS`), the newest one that
  ``python_requires`` allows, that the project lists (classifiers, else CI's ``python-version``; a listed 3.10
  allows 3.9 but not 3.11) and that had been out :data:`PYTHON_SETTLE_DAYS` days at the commit's date, so its
  dependencies had wheels for it; when none is all three, the oldest that ``python_requires`` allows.
- ``pip``: every requirement, and every requirement of theirs, pinned to the newest release uploaded before the
  commit with a wheel for that Python (:mod:`repogym.envs.tasks.pins`, :mod:`repogym.envs.tasks.pypi`), pytest held
  at a floor the harness and the Python need (:data:`PYTEST_FLOOR`); build requirements (``[build-system]
  requires``) are pinned the same way, since the install step runs with build isolation off. A pin from after the
  commit (the first with a wheel for the Python) has its own requirements pinned as of its upload. A requirement
  PyPI does not know, or with no wheel for the Python, is left out with a note, and so is every release that needs
  it; a release whose metadata pip refuses gives way to the one before it; where two chosen releases disagree over a
  third, one is moved back to its newest release that agrees. When PyPI cannot be reached, the requirements stay
  unpinned and the provenance says so.
- ``install``: ``python -m pip install -e .`` when there is a ``setup.py``, ``setup.cfg`` or ``pyproject.toml``.
- runner and test command: pytest (:data:`PYTEST`), which also runs unittest- and nose-style tests.
- ``toolchain``: ``build`` (compilers and headers in the image) when the project has extension modules: ``Extension``
  or ``cythonize`` in ``setup.py``, C/C++/Cython sources outside tests and docs, a meson or scikit-build backend.

Not guaranteed: that the environment builds, or that the tests pass at the base commit (``repogym validate``
says).
"""

from __future__ import annotations

import ast
import configparser
import datetime
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from repogym.envs.core import pyast
from repogym.envs.core.errors import InfraError
from repogym.envs.tasks.pins import parse_requirement, resolve, unpinned
from repogym.envs.tasks.pypi import PyPI
# Private to repos.py, used here on purpose: git with hooks and fsmonitor off, and a mirror read through
# repogym's own view of it (its config never used). A public reader there would be better.
from repogym.envs.tasks.repos import _git, _locate, _stderr
from repogym.envs.tasks.schema import Task

IMAGE_PYTHONS = ("3.9", "3.11", "3.13")
"""The Pythons repogym builds images for (``envs/sandbox/images.py``), oldest first."""
PYTHON_RELEASED = {"3.9": datetime.date(2020, 10, 5), "3.11": datetime.date(2022, 10, 24),
                   "3.13": datetime.date(2024, 10, 7)}
PYTHON_SETTLE_DAYS = 180
"""Days after a Python's release before a commit is taken to target it (wheels for it take months to appear)."""
PYTEST_FLOOR = {"3.9": ">=6.2.5", "3.11": ">=7.2", "3.13": ">=8.2"}
"""The oldest pytest that runs on each image Python and under the harness's plugin."""
PYTEST = "python -m pytest -rA -p no:cacheprovider"
BUILD_TOOLCHAIN = "build"
"""``setup.toolchain`` of a project with extension modules: an image with compilers (``envs/sandbox/images.py``)."""
EDITABLE = "python -m pip install -e ."
TEST_EXTRAS = ("test", "tests", "testing", "dev", "develop", "development")
"""The project's own extras (and dependency groups) whose requirements its tests need."""
LEFT_OUT_WORDS = ("doc", "lint", "typing", "mypy", "style", "release", "bench", "pre-commit", "precommit", "build")
"""A requirement file whose name holds one of these (or ``min``, ``minimum``, ``oldest`` as a word: a run at the
lowest supported versions) is not about running the tests."""
LEFT_OUT_PROJECTS = {"pre-commit", "tox", "twine", "nox", "pip-tools", "check-manifest", "bump2version",
                     "bumpversion", "build", "flake8", "black", "mypy", "sphinx", "ruff", "pip", "python"}
"""Tools a requirement file names that running the tests does not use (``pip`` and ``python`` are the image's)."""
CONDA_NAMES = {"matplotlib-base": "matplotlib", "iris": "scitools-iris", "dask-core": "dask", "pytables": "tables",
               "pytorch": "torch",
               "msgpack-python": "msgpack", "python-graphviz": "graphviz", "hdf5": "python", "netcdf-fortran": "python"}
"""conda package names that are not PyPI's (``python``: a library with no Python package, left out)."""
FILES_READ = ("pyproject.toml", "setup.cfg", "setup.py", "tox.ini", "environment.yml", "environment.yaml",
              "pytest.ini", "conftest.py")


@dataclass
class ProjectFiles:
    """The files inference reads, from a repository's tree at one commit."""

    files: dict[str, str]
    """Path -> text of the files read (see :func:`files_from_git`)."""
    paths: list[str]
    """Every path of the tree."""
    date: datetime.datetime | None
    """When the commit was made."""


def files_from_git(repo: str | Path, commit: str) -> ProjectFiles:
    """The files inference reads from the git repository ``repo`` at ``commit`` (read with git, never checked out)."""
    listing = _git(repo, "ls-tree", "-r", "-z", "--name-only", commit)
    if listing.returncode != 0:
        raise InfraError("tasks.infer_env", f"git ls-tree {commit} in {repo} failed: {_stderr(listing)}")
    paths = [p for p in listing.stdout.decode(errors="replace").split("\0") if p]
    files: dict[str, str] = {}
    for path in filter(_wanted, paths):
        shown = _git(repo, "cat-file", "blob", f"{commit}:{path}")
        if shown.returncode == 0 and len(shown.stdout) < 1_000_000:
            files[path] = shown.stdout.decode("utf-8", errors="replace")
    stamp = _git(repo, "show", "-s", "--format=%ct", commit).stdout.decode().strip()
    date = datetime.datetime.fromtimestamp(int(stamp), tz=datetime.timezone.utc) if stamp.isdigit() else None
    return ProjectFiles(files, paths, date)


def _wanted(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    if path in FILES_READ:
        return True
    if "/" not in path and re.fullmatch(r".*requirements.*\.(txt|in)", name):
        return True
    if re.fullmatch(r"(requirements|reqs)/[^/]+\.(txt|in)", path):
        return True
    if re.fullmatch(r"(ci|\.ci)/(requirements/)?[^/]+\.ya?ml", path):
        return True
    return bool(re.fullmatch(r"\.github/workflows/[^/]+\.ya?ml", path))


@dataclass
class Inference:
    """An inferred environment: the task's ``setup`` and ``test_command``, and which file decided what."""

    setup: dict[str, Any]
    test_command: str
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Found:
    """What the files say, each item with the file that said it."""

    name: str = ""
    requirements: list[tuple[str, str]] = field(default_factory=list)
    extras: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """The project's own extras: name -> (requirement, where)."""
    wanted: set[str] = field(default_factory=lambda: set(TEST_EXTRAS))
    """The extras the tests need: the test-named ones, and those an install line names (``-e .[all]``)."""
    build: list[tuple[str, str]] = field(default_factory=list)
    build_backend: str = ""
    requires_python: tuple[str, str] | None = None
    listed_pythons: tuple[list[str], str] | None = None
    ci_pythons: tuple[list[str], str] | None = None
    pytest_config: str = ""
    extensions: str = ""
    notes: list[str] = field(default_factory=list)


# -- reading the files -----------------------------------------------------------------------------------

def read_project(project: ProjectFiles) -> _Found:
    """What the project's files say about its requirements, Python, build and tests."""
    found = _Found()
    files = project.files
    if "pyproject.toml" in files:
        _read_pyproject(files["pyproject.toml"], found)
    if "setup.cfg" in files:
        _read_setup_cfg(files["setup.cfg"], found)
    if "setup.py" in files:
        _read_setup_py(files["setup.py"], found)
    for path in _requirement_files(files):
        for requirement in _requirement_lines(files, path, set()):
            if requirement.startswith("."):
                found.wanted |= _own_extras(requirement)
            else:
                found.requirements.append((requirement, path))
    if "tox.ini" in files:
        _read_tox(files["tox.ini"], files, found)
    for path in sorted(p for p in files if p.endswith((".yml", ".yaml"))):
        if path.startswith(".github/"):
            _read_workflow(path, files[path], found)
        elif not _left_out(path):
            _read_conda(path, files[path], found)
    if "pytest.ini" in files or "conftest.py" in files:
        found.pytest_config = found.pytest_config or ("pytest.ini" if "pytest.ini" in files else "conftest.py")
    found.extensions = found.extensions or next((p for p in project.paths if _source_of_extension(p)), "")
    _add_extras(found)
    return found


def _own_extras(line: str) -> set[str]:
    """The extras of a ``.[a,b]`` line."""
    return {canonicalize_name(e) for e in re.findall(r"[A-Za-z0-9_.-]+", line.partition("[")[2])}


def _add_extras(found: _Found) -> None:
    """The wanted extras' requirements joined to the rest; an extra naming the project's own extras
    (``all = ["proj[s3,ec2]"]``) brings theirs."""
    own, done = canonicalize_name(found.name) if found.name else "", set()
    for line, _ in found.requirements:  # "proj[all]" in a requirement file
        requirement = parse_requirement(line)
        if requirement is not None and own and canonicalize_name(requirement.name) == own:
            found.wanted |= {canonicalize_name(e) for e in requirement.extras}
    while found.wanted & set(found.extras) - done:
        extra = sorted(found.wanted & set(found.extras) - done)[0]
        done.add(extra)
        for line, where in found.extras[extra]:
            requirement = parse_requirement(line)
            if requirement is not None and own and canonicalize_name(requirement.name) == own:
                found.wanted |= {canonicalize_name(e) for e in requirement.extras}
            else:
                found.requirements.append((line, where))


def _source_of_extension(path: str) -> bool:
    """A C, C++ or Cython source outside tests, docs and examples (their files are data, not the project's code)."""
    folders = path.lower().split("/")[:-1]
    return path.endswith((".pyx", ".c", ".cpp")) and not any(
        f.startswith(("test", "doc", "example", "bench", "fixture")) for f in folders)


def _left_out(name: str) -> bool:
    name = name.lower()
    return any(word in name for word in LEFT_OUT_WORDS) or bool(re.search(r"(^|[-_./])(min|minimum|oldest)([-_.]|$)",
                                                                          name))


def _requirement_files(files: dict[str, str]) -> list[str]:
    """The requirement files to read: those about tests when there are any (with ``requirements.txt``), else all
    but the left-out ones (a ``dev`` file often locks every tool a developer uses)."""
    kept = [p for p in sorted(files) if p.endswith((".txt", ".in")) and not _left_out(p.rsplit("/", 1)[-1])
            and not _shadowed(p, files)]
    tests = [p for p in kept if "test" in p.rsplit("/", 1)[-1].lower()]
    return tests + [p for p in kept if p == "requirements.txt"] if tests else kept


def _shadowed(path: str, files: dict[str, str]) -> bool:
    # pip-compile's input beside its output: the pinned .txt says the same, more exactly.
    return path.endswith(".in") and path[:-3] + ".txt" in files


def _read_pyproject(text: str, found: _Found) -> None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found.notes.append(f"pyproject.toml does not parse ({exc}): not read")
        return
    build = data.get("build-system") or {}
    found.build += [(r, "pyproject.toml [build-system]") for r in _strings(build.get("requires"))]
    found.build_backend = str(build.get("build-backend") or "")
    if found.build_backend.split(".")[0] in ("mesonpy", "scikit_build_core", "maturin"):
        found.extensions = f"pyproject.toml build-backend {found.build_backend}"
    meta = data.get("project") or {}
    found.name = str(meta.get("name") or found.name)
    found.requirements += [(r, "pyproject.toml [project] dependencies") for r in _strings(meta.get("dependencies"))]
    for extra, items in (meta.get("optional-dependencies") or {}).items():
        found.extras.setdefault(canonicalize_name(extra), []).extend(
            (r, f"pyproject.toml optional-dependencies.{extra}") for r in _strings(items))
    for group, items in (data.get("dependency-groups") or {}).items():
        if canonicalize_name(group) in TEST_EXTRAS:
            found.requirements += [(r, f"pyproject.toml dependency-groups.{group}") for r in _strings(items)]
    if isinstance(meta.get("requires-python"), str):
        found.requires_python = (meta["requires-python"], "pyproject.toml requires-python")
    _classifiers(_strings(meta.get("classifiers")), "pyproject.toml classifiers", found)
    poetry = (data.get("tool") or {}).get("poetry") or {}
    for name, spec in (poetry.get("dependencies") or {}).items():
        if name.lower() == "python":
            if isinstance(spec, str) and found.requires_python is None:
                found.requires_python = (_poetry_spec(spec), "pyproject.toml tool.poetry.dependencies.python")
        elif isinstance(spec, (str, dict)):
            found.requirements.append((name + _poetry_spec(spec if isinstance(spec, str) else
                                                           str(spec.get("version") or "*")),
                                       "pyproject.toml tool.poetry.dependencies"))
    if ((data.get("tool") or {}).get("pytest") or {}).get("ini_options") is not None:
        found.pytest_config = "pyproject.toml [tool.pytest.ini_options]"


def _poetry_spec(spec: str) -> str:
    """Poetry's ``^1.2`` / ``~1.2`` / ``*`` as a PEP 440 specifier."""
    spec = spec.strip()
    if spec in ("", "*"):
        return ""
    caret = re.fullmatch(r"\^(\d+)(?:\.(\d+))?(?:\.(\d+))?", spec)
    if caret:
        parts = [int(p) for p in caret.groups() if p is not None]
        first = next((i for i, p in enumerate(parts) if p), len(parts) - 1)
        upper = parts[:first] + [parts[first] + 1]
        return f">={'.'.join(map(str, parts))},<{'.'.join(map(str, upper))}"
    tilde = re.fullmatch(r"~(\d+(?:\.\d+)*)", spec)
    if tilde:
        return f"~={tilde.group(1)}" if "." in tilde.group(1) else f">={tilde.group(1)}"
    return spec if spec[0] in "<>=!~" else f"=={spec}"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]
    if isinstance(value, (list, tuple)):
        return [v.strip() for v in value if isinstance(v, str) and v.strip()]
    return []


def _classifiers(classifiers: list[str], where: str, found: _Found) -> None:
    versions = sorted({m.group(1) for c in classifiers
                       if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c.strip()))},
                      key=lambda v: Version(v))
    if versions and found.listed_pythons is None:
        found.listed_pythons = (versions, where)


def _ini(text: str, name: str, found: _Found) -> configparser.RawConfigParser | None:
    """``text`` (the file ``name``) read as an INI file; None, with a note, when it does not parse."""
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        found.notes.append(f"{name} does not parse ({exc.__class__.__name__}): not read")
        return None
    return parser


def _read_setup_cfg(text: str, found: _Found) -> None:
    parser = _ini(text, "setup.cfg", found)
    if parser is None:
        return
    if parser.has_section("metadata"):
        found.name = found.name or parser.get("metadata", "name", fallback="")
        _classifiers(_strings(parser.get("metadata", "classifiers", fallback="")), "setup.cfg classifiers", found)
    if parser.has_section("options"):
        found.requirements += [(r, "setup.cfg install_requires")
                               for r in _strings(parser.get("options", "install_requires", fallback=""))]
        found.requirements += [(r, "setup.cfg tests_require")
                               for r in _strings(parser.get("options", "tests_require", fallback=""))]
        found.build += [(r, "setup.cfg setup_requires")
                        for r in _strings(parser.get("options", "setup_requires", fallback=""))]
        requires = parser.get("options", "python_requires", fallback="").strip()
        if requires and found.requires_python is None:
            found.requires_python = (requires, "setup.cfg python_requires")
    if parser.has_section("options.extras_require"):
        for extra, value in parser.items("options.extras_require"):
            found.extras.setdefault(canonicalize_name(extra), []).extend(
                (r, f"setup.cfg extras_require.{extra}") for r in _strings(value))
    if parser.has_section("tool:pytest") and not found.pytest_config:
        found.pytest_config = "setup.cfg [tool:pytest]"


def _read_setup_py(text: str, found: _Found) -> None:
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError) as exc:  # Python 2 only syntax, or a NUL byte
        found.notes.append(f"setup.py does not parse as Python 3 ({exc.__class__.__name__}): not read")
        return
    bound: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, node.value)
    if any(isinstance(n, ast.Call) and _callee(n) in ("Extension", "cythonize", "Pybind11Extension")
           for n in ast.walk(tree)):
        found.extensions = "setup.py ext_modules"
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and _callee(n) == "setup"), None)
    if call is None:
        return
    args: dict[str, Any] = {}
    for keyword in call.keywords:
        value = _literal(keyword.value, bound, 0)
        if keyword.arg is not None:
            args[keyword.arg] = value
        elif isinstance(value, dict):  # setup(**metadata)
            args.update({k: v for k, v in value.items() if isinstance(k, str)})
    found.name = found.name or (args.get("name") if isinstance(args.get("name"), str) else "")
    found.requirements += [(r, "setup.py install_requires") for r in _strings(args.get("install_requires"))]
    found.requirements += [(r, "setup.py tests_require") for r in _strings(args.get("tests_require"))]
    found.build += [(r, "setup.py setup_requires") for r in _strings(args.get("setup_requires"))]
    extras = args.get("extras_require")
    if isinstance(extras, dict):
        for extra, items in extras.items():
            if isinstance(extra, str):
                found.extras.setdefault(canonicalize_name(extra.split(":")[0]), []).extend(
                    (r, f"setup.py extras_require.{extra}") for r in _strings(items))
    if isinstance(args.get("python_requires"), str) and found.requires_python is None:
        found.requires_python = (args["python_requires"], "setup.py python_requires")
    _classifiers(_strings(args.get("classifiers")), "setup.py classifiers", found)


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _literal(node: ast.AST, bound: dict[str, ast.AST], depth: int) -> Any:
    """The value of a literal expression, names bound to literals followed; None when it is not one."""
    if depth > 8:
        return None
    if isinstance(node, ast.Name):
        return _literal(bound[node.id], bound, depth + 1) if node.id in bound else None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_literal(e, bound, depth + 1) for e in node.elts]
        return [i for i in items if i is not None]
    if isinstance(node, ast.Dict):
        keys = [_literal(k, bound, depth + 1) if k is not None else None for k in node.keys]
        return {k: _literal(v, bound, depth + 1) for k, v in zip(keys, node.values) if isinstance(k, str)}
    if isinstance(node, ast.Call) and _callee(node) == "dict" and not node.args:
        return {k.arg: _literal(k.value, bound, depth + 1) for k in node.keywords if k.arg}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left, bound, depth + 1), _literal(node.right, bound, depth + 1)
        if isinstance(left, list) and isinstance(right, list):
            return left + right
        if isinstance(left, str) and isinstance(right, str):
            return left + right
        return left if isinstance(left, list) else right if isinstance(right, list) else None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # not a literal
        return None


def _requirement_lines(files: dict[str, str], path: str, seen: set[str]) -> list[str]:
    """The requirements of a requirements file, ``-r`` includes followed (documentation ones left out)."""
    if path in seen or path not in files:
        return []
    seen.add(path)
    folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    out: list[str] = []
    for line in files[path].replace("\\\n", " ").splitlines():
        line = re.split(r"(^|\s)#", line, maxsplit=1)[0].strip()
        include = re.match(r"(?:-r|--requirement)\s*=?\s*(\S+)", line)
        if include:
            target = _normpath(folder + include.group(1))
            if not _left_out(target.rsplit("/", 1)[-1]):
                out += _requirement_lines(files, target, seen)
            continue
        own = re.fullmatch(r"(?:-e|--editable)?\s*(\.\[[^\]]*\])", line)
        if own:  # the project itself with extras: its caller reads them
            out.append(own.group(1))
            continue
        if not line or line.startswith(("-", ".", "/")) or "://" in line or line.startswith("git+"):
            continue
        out.append(re.split(r"\s+--", line, maxsplit=1)[0].strip())
    return out


def _normpath(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            parts = parts[:-1]
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def _read_tox(text: str, files: dict[str, str], found: _Found) -> None:
    parser = _ini(text, "tox.ini", found)
    if parser is None or not parser.has_section("testenv"):
        return
    for line in _strings(parser.get("testenv", "deps", fallback="")):
        if "{" in line or line.startswith("-c"):
            continue  # a tox substitution, or constraints
        include = re.match(r"-r\s*(\S+)", line)
        if include:
            target = _normpath(include.group(1))
            if target not in files or _left_out(target):
                continue
            found.requirements += [(r, f"tox.ini deps ({target})") for r in _requirement_lines(files, target, set())
                                   if not r.startswith(".")]
        elif not line.startswith("-"):
            found.requirements.append((line, "tox.ini deps"))
    found.wanted |= {canonicalize_name(e) for e in re.split(r"[\s,]+", parser.get("testenv", "extras", fallback=""))
                     if e and "{" not in e}
    if "pytest" in parser.get("testenv", "commands", fallback="") and not found.pytest_config:
        found.pytest_config = "tox.ini commands"
    if parser.has_section("pytest") and not found.pytest_config:
        found.pytest_config = "tox.ini [pytest]"


def _yaml(path: str, text: str, found: _Found) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        found.notes.append(f"{path} does not parse ({exc.__class__.__name__}): not read")
        return None


def _read_workflow(path: str, text: str, found: _Found) -> None:
    data = _yaml(path, text, found)
    if not isinstance(data, dict):
        return
    versions: set[str] = set()

    def walk(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif key in ("python-version", "python", "python_version") and re.fullmatch(r"3\.\d+", str(value)):
            versions.add(str(value))

    walk(data)
    if versions:  # every workflow counts: a daily job may test only the oldest Python
        known = set(found.ci_pythons[0]) if found.ci_pythons else set()
        where = ".github/workflows" if found.ci_pythons else path
        found.ci_pythons = (sorted(versions | known, key=Version), where)


def _read_conda(path: str, text: str, found: _Found) -> None:
    data = _yaml(path, text, found)
    if not isinstance(data, dict) or not isinstance(data.get("dependencies"), list):
        return
    for item in data["dependencies"]:
        if isinstance(item, dict):
            found.requirements += [(r, f"{path} pip") for r in _strings(item.get("pip"))
                                   if "://" not in r and not r.startswith(("-", "."))]
        elif isinstance(item, str):
            # conda's "name=1.2" / "name>=1.2" / "name 1.2": the name is PyPI's for most scientific packages
            match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(?:(==?|>=|<=|<|>)\s*([\w.*]+))?.*", item.strip())
            if match:
                name, op, version = match.groups()
                name = CONDA_NAMES.get(name.lower(), name)
                spec = "" if not op else (f"=={version}" if op == "=" and "*" not in version else
                                          "" if op == "=" else f"{op}{version}")
                found.requirements.append((name + spec, f"{path} (conda)"))


# -- deciding ----------------------------------------------------------------------------------------------

def choose_python(found: _Found, date: datetime.datetime | None) -> tuple[str, str]:
    """The image Python for the project, and why (see the module docstring)."""
    allowed = list(IMAGE_PYTHONS)
    why = []
    if found.requires_python:
        try:
            spec = SpecifierSet(found.requires_python[0])
            allowed = [p for p in IMAGE_PYTHONS if spec.contains(f"{p}.0", prereleases=True)] or allowed
            why.append(f"{found.requires_python[1]} {found.requires_python[0]!r}")
        except InvalidSpecifier:
            why.append(f"{found.requires_python[1]} {found.requires_python[0]!r} is not a specifier: ignored")
    chosen = list(allowed)
    listed = found.listed_pythons or found.ci_pythons
    if listed:
        newest = max(Version(v) for v in listed[0])
        fits = [p for p in chosen if Version(p) <= newest]
        chosen = fits or chosen
        why.append(f"{listed[1]} up to {newest}")
    if date is not None:
        settled = [p for p in chosen
                   if PYTHON_RELEASED[p] + datetime.timedelta(days=PYTHON_SETTLE_DAYS) <= date.date()]
        chosen = settled or chosen[:1]
        why.append(f"commit of {date.date().isoformat()}")
    python = chosen[-1] if chosen else allowed[0]
    return python, "; ".join(why) or "nothing says: the default"


def infer(project: ProjectFiles, *, pypi: PyPI | None = None) -> Inference:
    """The environment of a Python project at a commit (see the module docstring)."""
    pypi = pypi or PyPI()
    found = read_project(project)
    python, python_why = choose_python(found, project.date)
    own = canonicalize_name(found.name) if found.name else ""
    # What the harness and the install step ask ("the ..." askers) binds where the project's own ranges disagree
    # (pins.py). pytest's own repository runs its own pytest.
    roots = [] if own == "pytest" else [(f"pytest{PYTEST_FLOOR[python]}", "the harness (runner pytest)")]
    roots += [(r, who) for r, who in found.requirements if (req := parse_requirement(r)) is not None
              and canonicalize_name(req.name) not in LEFT_OUT_PROJECTS | {own}]
    # Build requirements the install step needs (build isolation is off), at least what editable installs need.
    build = [("setuptools>=64,<71", "the install step (editable wheels)"), ("wheel>=0.37.1", "the install step")]
    build += [(r, who) for r, who in found.build
              if (req := parse_requirement(r)) is not None and canonicalize_name(req.name) != own]
    installs = any(p in project.files for p in ("setup.py", "setup.cfg", "pyproject.toml"))
    provenance: dict[str, Any] = {
        "date": project.date.isoformat() if project.date else None,
        "python": f"{python}: {python_why}",
        "install": ("pip install -e . (" + ", ".join(p for p in ("pyproject.toml", "setup.cfg", "setup.py")
                                                      if p in project.files) + ")") if installs
        else "nothing to install (no setup.py, setup.cfg or pyproject.toml)",
        "runner": f"pytest ({found.pytest_config or 'no pytest configuration: pytest runs unittest-style tests too'})",
        "requirements": sorted({who for _, who in found.requirements}),
    }
    if found.extensions:
        provenance["extensions"] = (f"{found.extensions}: the project builds extension modules in place, so its image "
                                    f"carries the {BUILD_TOOLCHAIN!r} toolchain (compilers, headers)")
    notes = list(found.notes)
    try:
        pins, why, left_out = resolve(roots + (build if installs else []), python, project.date, pypi)
        provenance["pins"] = why
        notes += left_out
        provenance["pypi"] = "pinned as of the commit's date"
    except InfraError as exc:
        pins = unpinned(roots + (build if installs else []), python)
        provenance["pypi"] = f"PyPI could not be reached ({exc.message}): requirements left unpinned"
    if notes:
        provenance["notes"] = notes
    setup: dict[str, Any] = {"python": python, "pip": pins}
    if installs:
        setup["install"] = EDITABLE
    if found.extensions and installs:
        setup["toolchain"] = BUILD_TOOLCHAIN
    return Inference(setup=setup, test_command=PYTEST, provenance=provenance)


# Where a project declares what `pip install -e .` itself requires (not its test or extra requirements).
_INSTALL_REQUIREMENTS = ("pyproject.toml [project] dependencies", "pyproject.toml tool.poetry.dependencies",
                         "setup.cfg install_requires", "setup.py install_requires")


def pin_conflicts(project: ProjectFiles, setup: dict[str, Any]) -> list[str]:
    """Each ``name==version`` of ``setup.pip`` that the project's own install requirements at the commit refuse
    (under ``setup.python``), as ``"astroid==2.11.7 against pyproject.toml [project] dependencies: astroid>=2.12.2"``.
    A table entry keyed by a release line can be wrong for some commits of that line; the install step runs
    without dependencies, so such a pin would hold and the project would not import."""
    python = str(setup.get("python") or "3.11")
    pins = {}
    for pin in setup.get("pip") or []:
        req = parse_requirement(str(pin))
        if req is not None and len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==":
            pins[canonicalize_name(req.name)] = (str(pin), next(iter(req.specifier)).version)
    conflicts = []
    for text, where in read_project(project).requirements:
        req = parse_requirement(text)
        if req is None or where not in _INSTALL_REQUIREMENTS or canonicalize_name(req.name) not in pins:
            continue
        if req.marker is not None and not req.marker.evaluate({"python_version": python, "extra": ""}):
            continue
        pin, version = pins[canonicalize_name(req.name)]
        if not req.specifier.contains(version, prereleases=True):
            conflicts.append(f"{pin} against {where}: {text}")
    return conflicts


def infer_for_repo(repo: str, commit: str, *, pypi: PyPI | None = None) -> Inference:
    """The environment of GitHub repository ``repo`` (``owner/name``) at ``commit``, read from where the task's
    repository comes from (``REPOGYM_MIRRORS``, else a clone in the cache: :mod:`repogym.envs.tasks.repos`).
    :class:`ConfigError` when the commit is not there, :class:`InfraError` when the clone cannot be made."""
    _, reader = _locate(Task(instance_id=f"infer:{repo}@{commit}", repo=repo, base_commit=commit,
                             problem_statement=""))
    return infer(files_from_git(reader, commit), pypi=pypi)
