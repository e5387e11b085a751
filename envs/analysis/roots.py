"""Source roots: the folders a project's import names start from, so module names are import names.

A src-layout project keeps ``src/pkg/mod.py``; its tests ``import pkg.mod``, so the module is ``pkg.mod``, not
``src.pkg.mod``. The roots come from the project's own packaging data, read statically (nothing is imported or
run): ``pyproject.toml`` (setuptools ``package-dir`` and ``packages.find.where``, hatch's wheel ``packages`` and
``sources``, poetry's ``packages`` ``from``), ``setup.cfg`` (``package_dir``, ``packages.find where``) and
``setup.py`` (``package_dir=`` and ``find_packages("src")`` / ``where=``, as literals). Without any, the layout
decides: a ``src/`` folder holding a package is a root. The repository root is always the last root, so
top-level packages, tests and scripts keep their names.
"""

from __future__ import annotations

import ast
import configparser
import tomllib
from collections.abc import Mapping

from repogym.envs.core import pyast

_LAYOUT_ROOTS = ("src", "lib", "python")


def _norm(folder: str) -> str:
    folder = folder.strip().replace("\\", "/").strip("/")
    while folder.startswith("./"):
        folder = folder[2:]
    return "" if folder in (".", "") else folder


def _text(files: Mapping[str, bytes | None], path: str) -> str | None:
    data = files.get(path)
    if data is None:
        return None
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


def _from_pyproject(text: str) -> list[str]:
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, MemoryError):
        return []
    tool = data.get("tool", {}) if isinstance(data.get("tool"), dict) else {}
    roots: list[str] = []
    setuptools = tool.get("setuptools", {}) if isinstance(tool.get("setuptools"), dict) else {}
    package_dir = setuptools.get("package-dir", {})
    if isinstance(package_dir, dict) and isinstance(package_dir.get(""), str):
        roots.append(package_dir[""])
    packages = setuptools.get("packages", {})
    find = packages.get("find", {}) if isinstance(packages, dict) else {}
    if isinstance(find, dict):
        where = find.get("where", [])
        roots += [w for w in ([where] if isinstance(where, str) else where) if isinstance(w, str)]
    hatch = tool.get("hatch", {}) if isinstance(tool.get("hatch"), dict) else {}
    wheel = hatch.get("build", {}).get("targets", {}).get("wheel", {}) if isinstance(hatch.get("build"), dict) else {}
    if isinstance(wheel, dict):
        for package in wheel.get("packages", []) if isinstance(wheel.get("packages"), list) else []:
            if isinstance(package, str) and "/" in package.strip("/"):
                roots.append(package.strip("/").rpartition("/")[0])  # "src/pkg" -> "src"
        sources = wheel.get("sources")
        if isinstance(sources, list):
            roots += [s for s in sources if isinstance(s, str)]
        elif isinstance(sources, dict):
            roots += [k for k, v in sources.items() if isinstance(k, str) and v in ("", None)]
    poetry = tool.get("poetry", {}) if isinstance(tool.get("poetry"), dict) else {}
    for package in poetry.get("packages", []) if isinstance(poetry.get("packages"), list) else []:
        if isinstance(package, dict) and isinstance(package.get("from"), str):
            roots.append(package["from"])
    return roots


def _from_setup_cfg(text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    roots: list[str] = []
    if parser.has_option("options", "package_dir"):
        for line in parser.get("options", "package_dir").replace(";", "\n").splitlines():
            name, eq, folder = line.partition("=")
            if eq and not name.strip():
                roots.append(folder)
    if parser.has_option("options.packages.find", "where"):
        roots += parser.get("options.packages.find", "where").split()
    return roots


def _from_setup_py(text: str) -> list[str]:
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # any text: never stop indexing
        return []
    roots: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if name in ("find_packages", "find_namespace_packages"):
            where = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "where"), None)
            if isinstance(where, ast.Constant) and isinstance(where.value, str):
                roots.append(where.value)
        for keyword in node.keywords:
            if keyword.arg == "package_dir" and isinstance(keyword.value, ast.Dict):
                for key, value in zip(keyword.value.keys, keyword.value.values):
                    if (isinstance(key, ast.Constant) and key.value == "" and isinstance(value, ast.Constant)
                            and isinstance(value.value, str)):
                        roots.append(value.value)
    return roots


def _from_layout(paths: list[str]) -> list[str]:
    """``src/`` (or ``lib/``, ``python/``) holding a package (a folder with an ``__init__.py``) is a root."""
    roots = []
    for folder in _LAYOUT_ROOTS:
        if any(p.startswith(folder + "/") and p.count("/") == 2 and p.endswith("/__init__.py") for p in paths):
            roots.append(folder)
    return roots


def source_roots(files: Mapping[str, bytes | None]) -> tuple[str, ...]:
    """The import roots of a repository given as ``{path: content}`` (packaging files included when present):
    declared roots first, else roots by layout; the repository root (``""``) last. Deepest first among the rest,
    so a path is named from the most specific root it lies under."""
    declared: list[str] = []
    for path, read in (("pyproject.toml", _from_pyproject), ("setup.cfg", _from_setup_cfg),
                       ("setup.py", _from_setup_py)):
        text = _text(files, path)
        if text is not None:
            declared += read(text)
    found = [r for r in declared if ".." not in _norm(r).split("/")]
    return ordered_roots(found or _from_layout(sorted(files)))


def ordered_roots(roots) -> tuple[str, ...]:
    """``roots`` (folders, relative) normalised, each once, deepest first, and the repository root (``""``) last."""
    found = [r for r in dict.fromkeys(_norm(str(r)) for r in roots) if r]
    return (*sorted(found, key=lambda r: (-r.count("/"), r)), "")


def module_for(path: str, roots: tuple[str, ...] = ("",)) -> str:
    """The import name of ``path`` under the first of ``roots`` it lies in: ``src/pkg/mod.py`` -> ``pkg.mod``
    with root ``src``; ``pkg/__init__.py`` -> ``pkg``."""
    for root in roots:
        if not root:
            break
        if path.startswith(root + "/"):
            path = path[len(root) + 1:]
            break
    parts = path[:-3].split("/") if path.endswith(".py") else path.split("/")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


PACKAGING_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
"""The files :func:`source_roots` reads, at the repository root."""

__all__ = ["PACKAGING_FILES", "module_for", "ordered_roots", "source_roots"]
