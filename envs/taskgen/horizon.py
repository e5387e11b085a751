"""Long-horizon filtering of generated tasks: the bug must sit far, in the call graph, from the tests it breaks.

A mutation makes a long-horizon task when, for every FAIL_TO_PASS test, (1) the static call graph of
:class:`repogym.envs.analysis.RepoIndex` links the test to every mutated function in ``min_distance`` calls or more,
(2) no mutated function lives in a file the test calls or imports directly (its *nearest targets*: the
repository symbols its own body references, plus its module's imports), and (3) the test's source does not
name a mutated function (a guard against a call the index could not resolve, such as ``obj.method()``
on an object of unknown type, which would be a shorter path than the one the graph shows).

Guaranteed: the verdict is computed from the index and the files on disk alone, so it is deterministic.
Not guaranteed: the true runtime distance. The graph misses dynamic calls (see ``envs/analysis/resolve.py``),
so a failing test the graph does not link to the mutation at all makes the mutation *not* long-horizon:
the filter is conservative and drops bugs it cannot prove far.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


SEARCH_DEPTH = 12
"""How many calls away from a mutated function the graph is searched for tests."""
BASE_TURNS = 10
"""``min_turns`` of a task at exactly the minimum distance; each further call adds ``TURNS_PER_CALL``."""
TURNS_PER_CALL = 2
MAX_TURNS = 30


@dataclass(frozen=True)
class Verdict:
    """Whether a candidate is long-horizon; ``distance`` is the shortest test-to-bug path in calls."""

    long: bool
    distance: int | None = None
    reason: str = ""


def distances_from_tests(index, function: str) -> dict[str, int]:
    """Test id -> calls from that test to ``function`` in the static graph (tests it reaches only)."""
    return {s.test_id: d for s, d in index.dependents([function], max_depth=SEARCH_DEPTH) if s.test_id}


def reaches_from_afar(index, function: str, min_distance: int) -> bool:
    """Some test reaches ``function`` from ``min_distance`` calls or more: a long task is possible at all."""
    return any(d >= min_distance for d in distances_from_tests(index, function).values())


def nearest_target_files(index, test_symbol, is_test_file) -> set[str]:
    """Non-test files whose symbols the test's body references, or its module imports."""
    files = set()
    for source in (test_symbol.name, index.module_of(test_symbol.file)):
        for ref in index.references(source):
            target = index.symbols.get(ref.target)
            if target is not None and not is_test_file(target.file):
                files.add(target.file)
    return files


def _base_test_id(test_id: str) -> str:
    return test_id.split("[", 1)[0]  # parametrised ids name the same function


def judge(index, repo_root: Path, mutations, f2p: list[str], min_distance: int, is_test_file) -> Verdict:
    """Is the task made of ``mutations`` (breaking ``f2p``) long-horizon? See the module docstring."""
    tests = {s.test_id: s for s in index.symbols.values() if s.test_id}
    distances = {m.function: distances_from_tests(index, m.function) for m in mutations}
    files = {m.file for m in mutations}
    bare_names = {m.function.rsplit(".", 1)[-1] for m in mutations}
    shortest = None
    for test_id in f2p:
        symbol = tests.get(_base_test_id(test_id))
        if symbol is None:
            return Verdict(False, reason=f"{test_id}: not in the index")
        for function, by_test in distances.items():
            d = by_test.get(symbol.test_id)
            if d is None:
                return Verdict(False, reason=f"{test_id}: no static path to {function}")
            if d < min_distance:
                return Verdict(False, d, f"{test_id}: {function} is {d} calls away")
            shortest = d if shortest is None else min(shortest, d)
        near = nearest_target_files(index, symbol, is_test_file) & files
        if near:
            return Verdict(False, shortest, f"{test_id}: calls into {sorted(near)[0]} directly")
        if _mentions(repo_root / symbol.file, symbol.line, symbol.end_line, bare_names):
            return Verdict(False, shortest, f"{test_id}: names a mutated function")
    if shortest is None:
        return Verdict(False, reason="no failing test")
    return Verdict(True, shortest)


def min_turns(distance: int, min_distance: int) -> int:
    """A turn-count estimate: more calls between the failing test and the bug, more reading."""
    return min(MAX_TURNS, BASE_TURNS + TURNS_PER_CALL * max(0, distance - min_distance))


def _mentions(path: Path, first: int, last: int, names: set[str]) -> bool:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[first - 1:last]
    except OSError:
        return True  # unreadable: cannot rule a direct call out
    body = "\n".join(lines)
    return any(re.search(rf"\b{re.escape(name)}\b", body) for name in names)
