"""RepoIndex: symbols, resolved references and their reverse graph for a tree of Python files.

Guaranteed:
- building never raises on bad Python; broken files are indexed as far as tree-sitter recovers and
  listed in ``parse_errors``;
- ``update_file`` re-parses only the file given (incrementally, via ``tree.edit`` + the old tree) and
  gives the same symbols, references and unresolved entries as a fresh ``from_files`` of the new
  content. Other files are re-resolved (never re-parsed) only when the file's *interface* changed
  (its defs, module-level bindings, class bases or star imports): then every file that imports it,
  directly or transitively, is re-linked;
- ``copy`` shares parse trees and per-file facts (both treated as immutable) and copies the tables.
- module names are import names: a file under a source root (``src/``, from the packaging data or the layout:
  :mod:`repogym.envs.analysis.roots`) is named from that root.
Not guaranteed: anything resolve.py says it does not model. Only ``.py`` files are indexed.
"""

from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Iterable
from pathlib import Path

import repogym.envs.analysis.extract as _extract
from repogym.envs.analysis.extract import FileFacts, extract
from repogym.envs.analysis.model import Reference, Symbol, SyntaxIssue, Unresolved
from repogym.envs.analysis.resolve import Resolver
from repogym.envs.analysis.roots import PACKAGING_FILES, module_for, ordered_roots
from repogym.envs.analysis.roots import source_roots as _source_roots
from repogym.envs.core.errors import ConfigError

_SKIP_DIRS = frozenset({"__pycache__", "build", "venv", "node_modules"})


def _clean_path(path: str) -> str:
    path = str(path).replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def _point(source: bytes, offset: int) -> tuple[int, int]:
    row = source.count(b"\n", 0, offset)
    return row, offset - (source.rfind(b"\n", 0, offset) + 1)


def _edit_for(old: bytes, new: bytes) -> dict:
    """The single ``tree.edit`` covering everything between the common prefix and suffix."""
    a, b = memoryview(old), memoryview(new)
    limit = min(len(old), len(new))
    lo, hi = 0, limit
    while lo < hi:  # binary search: each probe is one memcmp, not a Python loop over bytes
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    prefix = lo
    lo, hi = 0, limit - prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(old) - mid:] == b[len(new) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    old_end, new_end = len(old) - lo, len(new) - lo
    return dict(start_byte=prefix, old_end_byte=old_end, new_end_byte=new_end,
                start_point=_point(old, prefix), old_end_point=_point(old, old_end),
                new_end_point=_point(new, new_end))


def strip_params(node_id: str) -> str:
    """A pytest node id without its parameters: ``t.py::test_x[1-a]`` -> ``t.py::test_x``."""
    if node_id.endswith("]"):
        head, sep, last = node_id.rpartition("::")
        return head + sep + last.partition("[")[0]
    return node_id


class RepoIndex:
    """Static index of a repository's Python code; build with ``from_folder`` or ``from_files``."""

    def __init__(self) -> None:
        self.symbols: dict[str, Symbol] = {}
        self.module_imports: dict[str, set[str]] = {}
        self._files: dict[str, FileFacts] = {}
        self._links: dict[str, tuple] = {}  # path -> (refs, unresolved, imported modules, dispatch names, tests)
        self._run_as: dict[str, set[str]] = {}  # test method -> the node ids pytest runs it under (class methods)
        self._defs: dict[str, tuple[FileFacts, int]] = {}
        self._modules: dict[str, FileFacts] = {}
        self._packages: Counter = Counter()  # every dotted prefix of a module name
        self._method_names: Counter = Counter()
        self._callers: dict[str, dict[str, int]] = {}  # target -> {source: number of references}
        self._importers: dict[str, set[str]] = {}  # imported name (in the repo or not) -> paths
        self._cache: dict[str, list] = {}
        self.source_roots: tuple[str, ...] = ("",)
        """Folders module names start from (deepest first; ``""``, the repository root, last)."""

    # -- building ----------------------------------------------------------------------------
    @classmethod
    def from_folder(cls, root, source_roots: Iterable[str] | None = None) -> RepoIndex:
        """Index every ``*.py`` under ``root`` (hidden folders, __pycache__, build, venv skipped); source roots as
        in :meth:`from_files`, read from the folder's packaging files."""
        root = Path(root)
        if not root.is_dir():
            raise ConfigError(f"expected a folder to index, got {str(root)!r}")
        files = {}
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
            for name in names:
                if name.endswith(".py"):
                    full = Path(folder, name)
                    files[full.relative_to(root).as_posix()] = full.read_bytes()
        for name in PACKAGING_FILES:
            if name not in files and (root / name).is_file():
                files[name] = (root / name).read_bytes()
        return cls.from_files(files, source_roots)

    @classmethod
    def from_files(cls, files: dict[str, bytes], source_roots: Iterable[str] | None = None) -> RepoIndex:
        """Index ``{relative path: source bytes}``; only ``.py`` paths with a source are indexed. Module names
        start from ``source_roots`` (folders; the repository root is always the last), by default those the
        packaging files among ``files`` (``pyproject.toml``, ``setup.cfg``, ``setup.py``) or the layout give."""
        index = cls()
        files = {_clean_path(p): s for p, s in files.items()}
        index.source_roots = ordered_roots(source_roots) if source_roots is not None else _source_roots(files)
        for path, source in sorted(files.items()):
            if source is None or not path.endswith(".py"):
                continue
            source = _as_bytes(path, source)
            index._add(extract(path, source, _extract.parse_source(source), index.source_roots))
        resolver = Resolver(index)
        for path in list(index._files):
            index._link(path, resolver)
        return index

    def copy(self) -> RepoIndex:
        """A copy sharing trees and per-file facts; updating one never changes the other."""
        new = RepoIndex.__new__(RepoIndex)
        new.symbols = dict(self.symbols)
        new.module_imports = dict(self.module_imports)  # the sets are replaced on re-link, never mutated
        new._files = dict(self._files)
        new._links = dict(self._links)
        new._defs = dict(self._defs)
        new._modules = dict(self._modules)
        new._packages = Counter(self._packages)
        new._method_names = Counter(self._method_names)
        new._callers = {k: dict(v) for k, v in self._callers.items()}
        new._importers = {k: set(v) for k, v in self._importers.items()}
        new._run_as = {k: set(v) for k, v in self._run_as.items()}
        new._cache = {}
        new.source_roots = self.source_roots
        return new

    def update_file(self, path: str, source: bytes | None) -> None:
        """Re-index one file after it changed (``source``) or was deleted (None)."""
        path = _clean_path(path)
        if not path.endswith(".py"):
            raise ConfigError(f"expected a .py path, got {path!r}")
        old = self._files.get(path)
        new = None
        if source is not None:
            source = _as_bytes(path, source)
            if old is not None:
                tree = old.tree.copy()  # trees may be shared with copies of this index: edit our own
                tree.edit(**_edit_for(old.source, source))
                new_tree = _extract.parse_source(source, tree)
            else:
                new_tree = _extract.parse_source(source)
            new = extract(path, source, new_tree, self.source_roots)
        if old is None and new is None:
            return
        if old is not None:
            self._unlink(path)
            self._remove(old)
        affected = set()
        if new is not None:
            self._add(new)
            affected.add(path)
        if old is None or new is None or old.interface != new.interface:
            affected |= self._importers_of({f.module for f in (old, new) if f is not None})
            changed_methods = _method_names(old) ^ _method_names(new)
            if changed_methods:
                affected |= {p for p, link in self._links.items() if link[3] & changed_methods}
            if path.rpartition("/")[2] == "conftest.py":  # its fixtures type the parameters of tests below it
                folder = path.rpartition("/")[0]
                affected |= {p for p in self._files if not folder or p.startswith(folder + "/")}
        resolver = Resolver(self)
        for other in sorted(affected):
            if other in self._files:
                if other in self._links:
                    self._unlink(other)
                self._link(other, resolver)
        self._cache.clear()

    # -- queries -----------------------------------------------------------------------------
    def module_of(self, path: str) -> str:
        """The import name of the module at ``path`` (named from its source root)."""
        return module_for(_clean_path(path), self.source_roots)

    @property
    def unresolved(self) -> list[Unresolved]:
        """Every unresolved use, by file then line."""
        if "unresolved" not in self._cache:
            self._cache["unresolved"] = [u for p in sorted(self._links) for u in self._links[p][1]]
        return self._cache["unresolved"]

    @property
    def parse_errors(self) -> list[SyntaxIssue]:
        """One entry per file whose tree has ERROR/MISSING nodes (the first one), by file."""
        if "parse_errors" not in self._cache:
            self._cache["parse_errors"] = [self._files[p].syntax_issue for p in sorted(self._files)
                                           if self._files[p].syntax_issue is not None]
        return self._cache["parse_errors"]

    @property
    def files(self) -> list[str]:
        """Indexed paths, sorted."""
        return sorted(self._files)

    def symbols_in(self, path: str) -> list[Symbol]:
        """The module symbol of ``path`` then its defs in source order ([] if not indexed)."""
        facts = self._files.get(_clean_path(path))
        return list(facts.symbols) if facts is not None else []

    def references(self, qname: str) -> list[Reference]:
        """Outgoing resolved references of ``qname`` (its own body, not nested defs), by line."""
        symbol = self.symbols.get(qname)
        if symbol is None:
            return []
        return [r for r in self._links[symbol.file][0] if r.source == qname]

    def test_ids(self, qname: str) -> list[str]:
        """The pytest node ids ``qname`` runs as (parameters left out): its own, and for a test method those of every
        collected class that inherits it (a mixin's test under each class that runs it); [] for a non-test."""
        symbol = self.symbols.get(qname)
        ids = set(self._run_as.get(qname, ()))
        if symbol is not None and symbol.test_id and (symbol.kind == "function" or not ids):
            ids.add(symbol.test_id)
        return sorted(ids)

    def test_symbol(self, test_id: str) -> Symbol | None:
        """The test function or method a node id (parameters ignored) runs, or None."""
        if "test_symbols" not in self._cache:
            table = {}
            for method, ids in self._run_as.items():
                for node_id in ids:
                    table[node_id] = method
            for symbol in self.symbols.values():
                if symbol.test_id:
                    table.setdefault(symbol.test_id, symbol.name)
            self._cache["test_symbols"] = table
        name = self._cache["test_symbols"].get(strip_params(test_id))
        return self.symbols.get(name) if name else None

    def overridden(self, qname: str) -> list[str]:
        """The methods of repository ancestors that the method ``qname`` overrides (a call on the base's type may run
        it), nearest first; [] for anything else."""
        symbol = self.symbols.get(qname)
        if symbol is None or symbol.kind != "method":
            return []
        cls, _, name = qname.rpartition(".")
        if cls not in self._defs:
            return []
        order, _ = Resolver(self).mro(cls)
        return [f"{c}.{name}" for c in order[1:] if f"{c}.{name}" in self._defs]

    def dependents(self, qnames: Iterable[str], max_depth: int = 3) -> list[tuple[Symbol, int]]:
        """Transitive users of ``qnames`` (distance 1 = direct), excluding them, by (distance, name)."""
        return self.reverse_walk(qnames, max_depth, self._callers)

    def tests_reaching(self, qnames: Iterable[str], max_depth: int = 5) -> list[Symbol]:
        """Test functions/methods among the dependents of ``qnames`` up to ``max_depth``, by test id."""
        found = [s for s, _ in self.dependents(qnames, max_depth) if s.test_id]
        return sorted(found, key=lambda s: s.test_id)

    def reverse_walk(self, qnames: Iterable[str], max_depth: int,
                     first_hop: dict[str, dict[str, int]]) -> list[tuple[Symbol, int]]:
        """Breadth-first walk of the reverse graph; the first hop uses ``first_hop``'s edges.

        ``analyze_diff`` passes the *before* index's edges so removed symbols find their former users.
        """
        seeds = set(qnames)
        distance: dict[str, int] = {}
        frontier = deque((q, 0) for q in sorted(seeds))
        while frontier:
            current, depth = frontier.popleft()
            if depth >= max_depth:
                continue
            edges = (first_hop if depth == 0 else self._callers).get(current, {})
            for source in edges:
                if source in seeds or source in distance or source not in self.symbols:
                    continue
                distance[source] = depth + 1
                frontier.append((source, depth + 1))
        return sorted(((self.symbols[q], d) for q, d in distance.items()), key=lambda t: (t[1], t[0].name))

    # -- table maintenance -------------------------------------------------------------------
    def _add(self, facts: FileFacts) -> None:
        self._files[facts.path] = facts
        self._modules.setdefault(facts.module, facts)
        parts = facts.module.split(".")
        for i in range(1, len(parts) + 1):
            self._packages[".".join(parts[:i])] += 1
        for symbol in facts.symbols:
            self.symbols.setdefault(symbol.name, symbol)
        for i, d in enumerate(facts.defs):
            self._defs.setdefault(d.qname, (facts, i))
        self._method_names.update(_method_names(facts))
        for name in facts.imported_modules:
            self._importers.setdefault(name, set()).add(facts.path)

    def _remove(self, facts: FileFacts) -> None:
        del self._files[facts.path]
        if self._modules.get(facts.module) is facts:
            del self._modules[facts.module]
        parts = facts.module.split(".")
        for i in range(1, len(parts) + 1):
            key = ".".join(parts[:i])
            self._packages[key] -= 1
            if self._packages[key] <= 0:
                del self._packages[key]
        for symbol in facts.symbols:
            if self.symbols.get(symbol.name) is symbol:
                del self.symbols[symbol.name]
        for d in facts.defs:
            if self._defs.get(d.qname, (None,))[0] is facts:
                del self._defs[d.qname]
        self._method_names.subtract(_method_names(facts))
        self._method_names += Counter()  # drop names whose count fell to zero
        for name in facts.imported_modules:
            users = self._importers.get(name)
            if users is not None:
                users.discard(facts.path)
                if not users:
                    del self._importers[name]

    def _link(self, path: str, resolver: Resolver) -> None:
        facts = self._files[path]
        refs, unresolved, imported, dispatch, collected = resolver.link(facts)
        self._links[path] = (refs, unresolved, imported, dispatch, collected)
        for method, node_id in collected:
            self._run_as.setdefault(method, set()).add(node_id)
        for ref in refs:
            sources = self._callers.setdefault(ref.target, {})
            sources[ref.source] = sources.get(ref.source, 0) + 1
        self.module_imports[facts.module] = imported

    def _unlink(self, path: str) -> None:
        refs, _unresolved, _imported, _dispatch, collected = self._links.pop(path)
        for method, node_id in collected:
            ids = self._run_as[method]
            ids.discard(node_id)
            if not ids:
                del self._run_as[method]
        for ref in refs:
            sources = self._callers[ref.target]
            count = sources[ref.source] - 1
            if count:
                sources[ref.source] = count
            else:
                del sources[ref.source]
                if not sources:
                    del self._callers[ref.target]
        if path in self._files:
            self.module_imports.pop(self._files[path].module, None)

    def _importers_of(self, modules: set[str]) -> set[str]:
        """Paths importing any of ``modules`` (or names inside them), transitively."""
        found: set[str] = set()
        pending = list(modules)
        seen_modules = set(pending)
        while pending:
            module = pending.pop()
            # ``from m import x`` records ``m`` as well as ``m.x``, so the exact name finds every user
            for user in self._importers.get(module, set()) - found:
                found.add(user)
                user_module = self._files[user].module
                if user_module not in seen_modules:
                    seen_modules.add(user_module)
                    pending.append(user_module)
        return found


def _method_names(facts: FileFacts | None) -> set[str]:
    return {d.name for d in facts.defs if d.kind == "method"} if facts is not None else set()


def _as_bytes(path: str, source) -> bytes:
    if isinstance(source, str):
        return source.encode("utf-8")
    if not isinstance(source, (bytes, bytearray)):
        raise ConfigError(f"expected bytes for {path!r}, got {type(source).__name__}")
    return bytes(source)
