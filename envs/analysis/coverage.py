"""The measured coverage map: which tests ran which functions of a repository at one tree.

A :class:`CoverageMap` holds, for each function or method of the base tree (qualified as the index names it), the
pytest node ids (parameters left out) that ran it: a test covers a function when a line of its body ran while the
test's context was open (set-up and teardown included). It comes from one of two measurements:

- :func:`from_probe`: the report of ``coverage_probe.py``, the harness's stdlib-only pytest plugin (what
  :func:`repogym.envs.rewards.coverage_run.measure_coverage` runs in a sandbox when a task is validated);
- :func:`from_coverage_db`: a coverage.py data file (``.coverage``) written with per-test contexts, as
  ``pytest --cov=PKG --cov-context=test`` (pytest-cov) writes it; contexts that are not pytest node ids
  (``test_function`` contexts, the empty context of import time) are left out.

``scope`` says which files were measured (None: every file of the tree). A function of a measured file that no test
ran is *known* and covered by no test; code outside the scope, or not in the base tree at all (new functions), is
unknown: for it :func:`repogym.envs.analysis.impact.analyze_diff` falls back to the static graph.
Saved as compact JSON (``tests`` once, functions as indexes into it), keyed by the base tree: :func:`save`,
:func:`load`. Not guaranteed: processes a test starts, and code run through ``exec``, are not seen.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

from repogym.envs.analysis.extract import FileFacts
from repogym.envs.analysis.index import RepoIndex, strip_params
from repogym.envs.core.errors import ConfigError
from repogym.envs.core.paths import cache_dir

FORMAT_VERSION = 1
PROBE = Path(__file__).with_name("coverage_probe.py")
"""The stdlib-only pytest plugin copied into a sandbox to measure (never imported by the host)."""


@dataclass
class CoverageMap:
    """Tests per function of one tree, measured."""

    functions: dict[str, frozenset[str]] = field(default_factory=dict)
    """Qualified function or method name -> the node ids (parameters left out) of the tests that ran it."""
    tests: frozenset[str] = frozenset()
    """Every test the run went through (parameters left out), covering something or not."""
    scope: frozenset[str] | None = None
    """The files measured (paths from the repository root); None for every file of the tree."""
    key: str = ""
    """What tree it was measured on (a task's snapshot key; a file's name otherwise)."""
    info: dict = field(default_factory=dict)
    """Data about the run: ``python``, ``base_tree``, ``plain_s``/``measured_s`` (seconds), ``errors``."""

    def knows(self, symbol_file: str) -> bool:
        """Whether functions of ``symbol_file`` were measured (a function there that ran in no test is covered by
        none)."""
        return self.scope is None or symbol_file in self.scope

    def tests_of(self, qname: str) -> frozenset[str]:
        """The tests that ran ``qname`` (empty when none did)."""
        return self.functions.get(qname, frozenset())

    def to_json(self) -> dict:
        """The compact form :func:`from_json` reads: tests listed once, functions as indexes."""
        order = sorted(self.tests | {t for ids in self.functions.values() for t in ids})
        position = {t: i for i, t in enumerate(order)}
        return {"version": FORMAT_VERSION, "key": self.key, "info": self.info, "tests": order,
                "scope": sorted(self.scope) if self.scope is not None else None,
                "functions": {q: sorted(position[t] for t in ids) for q, ids in sorted(self.functions.items())}}

    @classmethod
    def from_json(cls, data: dict) -> CoverageMap:
        """Read :meth:`to_json`'s form; :class:`ConfigError` for anything else."""
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ConfigError(f"expected a repogym coverage map (version {FORMAT_VERSION}), got "
                              f"{type(data).__name__ if not isinstance(data, dict) else data.get('version')!r}")
        try:
            tests = list(data["tests"])
            functions = {q: frozenset(tests[i] for i in ids) for q, ids in data["functions"].items()}
            scope = data.get("scope")
            return cls(functions, frozenset(tests), frozenset(scope) if scope is not None else None,
                       str(data.get("key", "")), dict(data.get("info") or {}))
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ConfigError(f"malformed coverage map: {type(exc).__name__}: {exc}") from exc


def _defs_by_first_line(facts: FileFacts) -> dict[int, list]:
    table: dict[int, list] = {}
    for d in facts.defs:
        if d.kind != "class":
            table.setdefault(d.first_line, []).append(d)
            if d.line != d.first_line:
                table.setdefault(d.line, []).append(d)
    return table


def from_probe(report: dict, index: RepoIndex, key: str = "") -> CoverageMap:
    """The map of a ``coverage_probe.py`` report on the tree ``index`` was built from: each recorded code object
    (path, first line, name) named as the index names the def there; code the index lacks is left out."""
    if not isinstance(report, dict) or report.get("version") != 1:
        raise ConfigError("expected a coverage probe report (version 1)")
    try:
        recorded = [(str(p), int(line), str(name)) for p, line, name in report["functions"]]
        per_test = {str(t): [int(i) for i in ids] for t, ids in report["tests"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed coverage probe report: {type(exc).__name__}: {exc}") from exc
    tables: dict[str, dict] = {}
    qnames: list[str | None] = []
    for path, line, name in recorded:
        facts = index._files.get(path)
        if facts is None:
            qnames.append(None)
            continue
        if path not in tables:
            tables[path] = _defs_by_first_line(facts)
        match = [d for d in tables[path].get(line, ()) if d.name == name]
        qnames.append(match[0].qname if match else None)
    functions: dict[str, set[str]] = {}
    for node_id, ids in per_test.items():
        test = strip_params(node_id)
        for i in ids:
            qname = qnames[i] if 0 <= i < len(qnames) else None
            if qname is not None:
                functions.setdefault(qname, set()).add(test)
    info = {"python": report.get("python", ""), "errors": list(report.get("errors") or [])}
    return CoverageMap({q: frozenset(t) for q, t in functions.items()},
                       frozenset(strip_params(t) for t in per_test), None, key, info)


def _numbits_lines(numbits: bytes) -> list[int]:
    """coverage.py's numbits: bit ``n`` set for line ``n``."""
    return [i * 8 + bit for i, byte in enumerate(numbits) if byte for bit in range(8) if byte & (1 << bit)]


def innermost_functions(facts: FileFacts) -> dict[int, str]:
    """Line -> the innermost function or method whose *body* holds it (the ``def`` line and its decorators run
    when the def is made, not when it is called)."""
    out: dict[int, str] = {}
    for d in facts.defs:  # in source order: a nested def overwrites its parent's lines
        if d.kind == "class":
            if d.parent < 0 or facts.defs[d.parent].kind == "class":
                for line in range(d.line, d.end_line + 1):
                    out.pop(line, None)  # a class body runs when the module (or outer class) is made
            continue
        for line in range(d.line + 1, d.end_line + 1):
            out[line] = d.qname
    return out


def from_coverage_db(path, index: RepoIndex, root, key: str = "") -> CoverageMap:
    """The map of a coverage.py data file with per-test contexts (pytest-cov's ``--cov-context=test``: context
    ``<node id>|setup``, ``|run``, ``|teardown``), its file paths taken relative to ``root``."""
    path, root = Path(path), Path(root).resolve()
    if not path.is_file():
        raise ConfigError(f"expected a coverage data file, got {str(path)!r}: no such file")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            files = dict(db.execute("select id, path from file"))
            contexts = dict(db.execute("select id, context from context"))
            rows = list(db.execute("select file_id, context_id, numbits from line_bits"))
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"expected a coverage.py data file (SQLite, coverage 5+), got {str(path)!r}: {exc}") from exc
    relative = {}
    for file_id, name in files.items():
        full = Path(name) if Path(name).is_absolute() else root / name
        try:
            relative[file_id] = full.resolve().relative_to(root).as_posix()
        except ValueError:
            continue  # a file outside the repository
    tests_by_context = {}
    for context_id, name in contexts.items():
        node_id = name.rpartition("|")[0] if "|" in name else name
        if "::" in node_id:
            tests_by_context[context_id] = strip_params(node_id)
    if contexts and not tests_by_context and any(contexts.values()):
        raise ConfigError(f"{path}: no context is a pytest node id; measure with pytest-cov's --cov-context=test")
    lines_of: dict[str, dict[int, str]] = {}
    functions: dict[str, set[str]] = {}
    for file_id, context_id, numbits in rows:
        rel, test = relative.get(file_id), tests_by_context.get(context_id)
        if rel is None or test is None or rel not in index._files:
            continue
        if rel not in lines_of:
            lines_of[rel] = innermost_functions(index._files[rel])
        table = lines_of[rel]
        for qname in {table[n] for n in _numbits_lines(numbits) if n in table}:
            functions.setdefault(qname, set()).add(test)
    scope = frozenset(r for r in relative.values() if r in index._files)
    return CoverageMap({q: frozenset(t) for q, t in functions.items()}, frozenset(tests_by_context.values()),
                       scope, key or path.name, {"source": "coverage.py"})


def read_map(path, index: RepoIndex, root) -> CoverageMap:
    """A map from a file: repogym's JSON (:meth:`CoverageMap.to_json`), a probe report, or a coverage.py data file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"expected a coverage file, got {str(path)!r}: no such file")
    head = path.read_bytes()[:16]
    if head.startswith(b"SQLite format 3"):
        return from_coverage_db(path, index, root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"expected a coverage map (JSON) or a coverage.py data file, got {str(path)!r}: "
                          f"{exc}") from exc
    if isinstance(data, dict) and "info" not in data and "functions" in data and isinstance(data["functions"], list):
        return from_probe(data, index, path.name)
    return CoverageMap.from_json(data)


def cache_folder() -> Path:
    """Where measured maps are kept: ``REPOGYM_COVERAGE_MAPS``, default ``<repogym cache>/coverage`` (harness data;
    no sandbox sees it)."""
    override = os.environ.get("REPOGYM_COVERAGE_MAPS")
    return Path(override) if override else cache_dir() / "coverage"


_LOADED: dict[str, tuple[float, CoverageMap | None]] = {}  # key -> (file mtime, map), for cached()
_LOCK = threading.Lock()


def cached(key: str, folder=None) -> CoverageMap | None:
    """The map saved for ``key`` (under ``folder``, default :func:`cache_folder`), read once per file version and
    kept in memory; None when none was measured."""
    target = map_path(folder or cache_folder(), key)
    try:
        mtime = target.stat().st_mtime
    except FileNotFoundError:
        return None
    with _LOCK:
        hit = _LOADED.get(str(target))
        if hit is None or hit[0] != mtime:
            if len(_LOADED) > 32:
                _LOADED.clear()
            hit = (mtime, load(target.parent, key))
            _LOADED[str(target)] = hit
        return hit[1]


def save(cmap: CoverageMap, folder) -> Path:
    """Write ``cmap`` under ``folder`` named by its key; returns the path."""
    target = map_path(folder, cmap.key)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(cmap.to_json(), separators=(",", ":")), encoding="utf-8")
    tmp.replace(target)
    return target


def map_path(folder, key: str) -> Path:
    """Where the map of ``key`` lives under ``folder``."""
    import hashlib
    return Path(folder) / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def load(folder, key: str) -> CoverageMap | None:
    """The map saved under ``folder`` for ``key``, or None when there is none (or it is of another key)."""
    target = map_path(folder, key)
    if not target.is_file():
        return None
    cmap = CoverageMap.from_json(json.loads(target.read_text(encoding="utf-8")))
    return cmap if cmap.key == key else None


__all__ = ["PROBE", "CoverageMap", "cache_folder", "cached", "from_coverage_db", "from_probe", "innermost_functions", "load", "map_path",
           "read_map", "save"]
