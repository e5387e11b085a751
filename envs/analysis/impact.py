"""What a patch touches: changed symbols, their dependents, the tests that reach them, new breakage.

``analyze_diff`` builds the after-state as ``before.copy()`` plus one incremental ``update_file`` per
touched ``.py`` file, so its cost is proportional to the patch, not to the repository.
Guaranteed: a changed line is attributed to the innermost def around it (decorator lines count as the
decorated def's); a line directly in a class body (outside its methods) marks the class; module-level
lines mark the module; lines that are blank on both sides are ignored. Removed symbols find their
former users through the *before* index's reverse graph. ``tests`` also lists changed tests themselves.
Not guaranteed: anything the index does not resolve (see ``resolve.py``); non-Python files are listed
nowhere except through the ``.py`` files that changed with them.
"""

from __future__ import annotations

import subprocess
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from repogym.envs.analysis.coverage import CoverageMap
from repogym.envs.analysis.diffs import FileDiff, parse_diff
from repogym.envs.analysis.extract import FileFacts
from repogym.envs.analysis.index import RepoIndex
from repogym.envs.analysis.roots import PACKAGING_FILES
from repogym.envs.core.errors import ConfigError

_TEST_DEPTH = 5  # tests are searched at least this deep: a test 4 calls away still exercises the change


@dataclass
class DiffAnalysis:
    """The impact of one diff; every list is sorted and holds plain JSON-ready dicts."""

    changed: list[dict] = field(default_factory=list)
    """{"name", "kind", "file", "line", "change": modified|added|removed, "signature_changed"}."""
    dependents: list[dict] = field(default_factory=list)
    """{"name", "kind", "file", "line", "distance"}: users of changed symbols (after the patch)."""
    tests: list[dict] = field(default_factory=list)
    """{"name", "file", "line", "test_id", "source"}: tests covering a changed symbol, or changed themselves;
    ``source`` is ``measured`` (a coverage map saw the test run it) or ``static`` (the reverse graph)."""
    syntax_errors: list[dict] = field(default_factory=list)
    """{"file", "line", "message"}: parse errors the patch introduced."""
    unresolved: list[dict] = field(default_factory=list)
    """{"file", "line", "expression", "reason"} in the touched files, after the patch."""

    def to_dict(self) -> dict:
        """Exactly the five lists, by name."""
        return {"changed": self.changed, "dependents": self.dependents, "tests": self.tests,
                "syntax_errors": self.syntax_errors, "unresolved": self.unresolved}

    def render(self) -> str:
        """Human-readable sections, one entry per line."""
        out = []

        def section(title: str, rows: list[str]) -> None:
            out.append(f"{title} ({len(rows)})")
            out.extend(f"  {row}" for row in rows) if rows else out.append("  (none)")

        section("changed", [f"{c['name']}  {c['file']}:{c['line']}  ({c['change']}"
                            f"{', signature changed' if c['signature_changed'] else ''})" for c in self.changed])
        section("dependents", [f"{d['name']}  {d['file']}:{d['line']}  (distance {d['distance']})"
                               for d in self.dependents])
        section("tests", [f"{t['test_id']}  {t['file']}:{t['line']}  ({t['source']})" for t in self.tests])
        section("syntax errors", [f"{e['file']}:{e['line']}  {e['message']}" for e in self.syntax_errors])
        section("unresolved", [f"{u['expression']}  {u['file']}:{u['line']}  ({u['reason']})"
                               for u in self.unresolved])
        return "\n".join(out)


def _innermost(facts: FileFacts, line: int) -> str:
    """Qualified name of the innermost def spanning ``line`` (decorators included), else the module."""
    best = facts.module
    for d in facts.defs:  # defs are in source order, so a later match is nested deeper
        if d.first_line <= line <= d.end_line:
            best = d.qname
        elif d.first_line > line:
            break
    return best


def _touched_symbols(facts: FileFacts | None, lines: dict[int, str]) -> set[str]:
    if facts is None:
        return set()
    return {_innermost(facts, n) for n, text in lines.items() if text.strip()}


def analyze_diff(before: RepoIndex, diff: str, after_files: dict[str, bytes | None],
                 max_depth: int = 3, coverage: CoverageMap | None = None) -> DiffAnalysis:
    """Impact of ``diff`` on ``before``; ``after_files`` holds the new content of each touched file. With
    ``coverage`` (measured on ``before``'s tree), the covering tests of code it measured are the measured ones."""
    if max_depth < 1:
        raise ConfigError(f"expected max_depth >= 1, got {max_depth}")
    file_diffs = parse_diff(diff)
    after = before.copy()
    pairs: list[tuple[FileDiff, str | None, str | None]] = []  # (diff, old .py path, new .py path)
    for fd in file_diffs:
        old = fd.old_path if fd.old_path and fd.old_path.endswith(".py") else None
        new = fd.new_path if fd.new_path and fd.new_path.endswith(".py") else None
        if old is None and new is None:
            continue
        if old is not None and old != new:
            after.update_file(old, None)
        if new is not None:
            if new not in after_files:
                raise ConfigError(f"expected after_files to hold the new content of {new!r}")
            after.update_file(new, after_files[new])
        pairs.append((fd, old, new))

    touched_before = {old for _, old, _ in pairs if old}
    touched_after = {new for _, _, new in pairs if new and new in after._files}
    before_names = {s.name for p in touched_before for s in before.symbols_in(p)}
    after_names = {s.name for p in touched_after for s in after.symbols_in(p)}
    edited = set()
    for fd, old, new in pairs:
        edited |= _touched_symbols(after._files.get(new) if new else None, fd.added)
        edited |= _touched_symbols(before._files.get(old) if old else None, fd.removed)

    changed = []
    for name in sorted(edited | (before_names ^ after_names)):
        in_before, in_after = name in before.symbols, name in after.symbols
        if in_after and not in_before:
            change, symbol = "added", after.symbols[name]
        elif in_before and not in_after:
            change, symbol = "removed", before.symbols[name]
        elif in_after:
            change, symbol = "modified", after.symbols[name]
        else:
            continue
        sig_changed = change == "modified" and before.symbols[name].signature != symbol.signature
        changed.append({"name": name, "kind": symbol.kind, "file": symbol.file, "line": symbol.line,
                        "change": change, "signature_changed": sig_changed})
    changed.sort(key=lambda c: (c["file"], c["line"], c["name"]))

    seeds = {c["name"] for c in changed}
    removed = {c["name"] for c in changed if c["change"] == "removed"}
    first_hop = {}
    for name in seeds:
        edges = dict(after._callers.get(name, {}))
        if name in removed:
            edges.update(before._callers.get(name, {}))
        for base in (before if name in removed else after).overridden(name):
            edges.update(after._callers.get(base, {}))  # a call on the base's type may run this override
        first_hop[name] = edges
    dependents = [{"name": s.name, "kind": s.kind, "file": s.file, "line": s.line, "distance": d}
                  for s, d in after.reverse_walk(seeds, max_depth, first_hop)]
    if coverage is not None and not coverage.tests:
        coverage = None  # a run that went through no test measured nothing
    tests = _covering_tests(before, after, changed, first_hop, max(max_depth, _TEST_DEPTH), coverage)

    syntax_errors = []
    for fd, old, new in pairs:
        facts = after._files.get(new) if new else None
        if facts is None or facts.syntax_issue is None:
            continue
        issue = facts.syntax_issue
        prior = before._files.get(old) if old else None
        if prior is not None and prior.syntax_issue is not None and (
                prior.syntax_issue.message == issue.message
                and _line_text(prior.source, prior.syntax_issue.line) == _line_text(facts.source, issue.line)):
            continue  # the same error was there before the patch
        syntax_errors.append({"file": issue.file, "line": issue.line, "message": issue.message})
    unresolved = [{"file": u.file, "line": u.line, "expression": u.expression, "reason": u.reason}
                  for u in after.unresolved if u.file in touched_after]
    return DiffAnalysis(changed, dependents, tests, sorted(syntax_errors, key=lambda e: (e["file"], e["line"])),
                        unresolved)


def _covering_tests(before: RepoIndex, after: RepoIndex, changed: list[dict], first_hop: dict, depth: int,
                    coverage: CoverageMap | None) -> list[dict]:
    """The tests covering ``changed``, each ``{"name", "file", "line", "test_id", "source"}``.

    ``measured``: the map saw the test run the changed function (a modified or removed function or method of a
    measured file; for a class, any of its methods). ``static``: found on the reverse graph, from changed code the
    map has not seen (new code, changed signatures, module-level lines, files outside its scope) and from changed
    pytest fixtures (a module- or session-scoped one runs in the set-up of its first test only, yet every test
    asking for it gets its value); the walk stops at each caller the map has measured and takes that caller's
    measured tests instead of going further."""
    found: dict[str, str] = {}  # test id -> source; measured wins

    def add(ids, source: str) -> None:
        for test_id in ids:
            if found.get(test_id) != "measured":
                found[test_id] = source

    def measured(name: str) -> bool:
        symbol = before.symbols.get(name)
        return (coverage is not None and symbol is not None and symbol.kind in ("function", "method")
                and coverage.knows(symbol.file))

    unseen = set()
    for c in changed:
        name = c["name"]
        if measured(name):
            add(coverage.tests_of(name), "measured")
            entry = before._defs.get(name)
            fixture = entry is not None and entry[0].defs[entry[1]].is_fixture
            if not c["signature_changed"] and not fixture:  # a shared fixture runs in one test's set-up only
                continue
        elif coverage is not None and c["kind"] == "class" and c["change"] != "added" and coverage.knows(c["file"]):
            prefix = name + "."
            for symbol in before.symbols_in(c["file"]):
                if symbol.name.startswith(prefix) and symbol.kind == "method":
                    add(coverage.tests_of(symbol.name), "measured")
            continue
        unseen.add(name)
    seeds = {c["name"] for c in changed}
    for name in unseen - {c["name"] for c in changed if c["change"] == "removed"}:
        add(after.test_ids(name), "static")
    distance: dict[str, int] = {}
    frontier = deque((name, 0) for name in sorted(unseen))
    while frontier:
        current, level = frontier.popleft()
        if level >= depth:
            continue
        for source in (first_hop if level == 0 else after._callers).get(current, {}):
            if source in seeds or source in distance or source not in after.symbols:
                continue
            distance[source] = level + 1
            if measured(source):  # the map knows who runs this caller: no need to guess further
                add(coverage.tests_of(source), "static")
                continue
            add(after.test_ids(source), "static")
            frontier.append((source, level + 1))
    out = []
    for test_id, source in found.items():
        symbol = after.test_symbol(test_id)
        if symbol is None and before.test_symbol(test_id) is not None:
            continue  # the test was removed: nothing left to run
        path = test_id.split("::", 1)[0]
        out.append({"name": symbol.name if symbol else test_id.rpartition("::")[2], "file": path,
                    "line": symbol.line if symbol is not None and symbol.file == path else 0, "test_id": test_id,
                    "source": source})
    return sorted(out, key=lambda t: t["test_id"])


def _line_text(source: bytes, line: int) -> bytes:
    lines = source.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else b""


# -- git ---------------------------------------------------------------------------------------
def _git(repo, *args: str, stdin: bytes | None = None) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, check=False)
    except FileNotFoundError as exc:
        raise ConfigError("expected the `git` executable on PATH") from exc
    if done.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} failed in {repo}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _blobs(repo, rev: str, paths: list[str]) -> dict[str, bytes | None]:
    """Contents of ``paths`` at ``rev`` in one ``git cat-file --batch`` call; None where missing."""
    if not paths:
        return {}
    out = _git(repo, "cat-file", "--batch", stdin="".join(f"{rev}:{p}\n" for p in paths).encode())
    result, pos = {}, 0
    for path in paths:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            result[path] = out[pos:pos + size]
            pos += size + 1
        else:
            result[path] = None  # "<rev>:<path> missing"
    return result


def diff_between_revs(repo, rev_range: str, source_roots=None) -> tuple[RepoIndex, str, dict]:
    """(index of ``.py`` files at A, ``git diff A B``, touched files at B) for ``A..B``; ``source_roots`` as in
    :meth:`RepoIndex.from_files` (default: from A's packaging files).

    ``A..`` or plain ``A`` compares with the working tree (tracked files only: untracked ones are not
    in ``git diff``).
    """
    base, _, head = rev_range.partition("..")
    if not base or head.startswith("."):
        raise ConfigError(f"expected a revision range 'A..B', 'A..' or 'A', got {rev_range!r}")
    paths = [p for p in _git(repo, "ls-tree", "-r", "-z", "--name-only", base).decode().split("\0")
             if p.endswith(".py") or p in PACKAGING_FILES]  # the packaging files name the source roots
    before = RepoIndex.from_files(_blobs(repo, base, paths), source_roots)
    diff_args = ["diff", "--no-color", "--no-ext-diff", "-M", base] + ([head] if head else [])
    diff = _git(repo, *diff_args).decode("utf-8", "replace")
    touched = sorted({p for fd in parse_diff(diff) for p in (fd.new_path,) if p})
    if head:
        after_files: dict[str, bytes | None] = _blobs(repo, head, touched)
    else:
        after_files = {p: (Path(repo, p).read_bytes() if Path(repo, p).is_file() else None) for p in touched}
    for fd in parse_diff(diff):
        if fd.old_path and fd.old_path != fd.new_path:
            after_files.setdefault(fd.old_path, None)
    return before, diff, after_files
