"""Twin tests: every graded test gets must-fail twins it cannot be told apart from.

Code under test runs inside the test runner, so it can force outcomes (replace ``runtest``, flip reports)
or return objects equal to anything. Grading therefore rewrites, after the hidden ``test_patch``, each
FAIL_TO_PASS test (and a sample of PASS_TO_PASS) into a group of **variants** in its own place in its file:
the real test and its twins, each a copy that calls the same code the same way and differs only in what it
expects, at one point drawn per grading:

- ``literal``: a comparison with a literal (``assert f(x) == 3``, ``assertEqual(f(x), "abc")``, a literal
  inside ``pytest.approx`` or a numpy ``assert_*equal``/``assert_allclose``, or a name bound once to a
  literal and read only there) expects another literal of the same kind: one number, one character, one
  element changed. An honest value equal to the real literal is unequal to the twin's, so the twin fails;
  an always-equal object passes it. Up to ``LITERAL_TWINS`` twins, all changing the same literal (``envs/rewards/twin_shapes.py``).
- ``negated``: the condition reversed (``==`` and ``!=``, ``in`` and ``not in``, ``is`` and ``is not``,
  ``assert x`` and ``assert not x``, unittest's ``assertTrue``/``assertFalse``, ``assertIn``/``assertNotIn``,
  ``assertEqual``/``assertNotEqual``...); an ordering comparison becomes ``not (...)``.
- ``exception``: an expected exception no longer expected (``with pytest.raises(E): body`` becomes
  ``body``; ``raises(E, lambda: expr)`` becomes ``expr``): the exception an honest run raises fails it.

Every variant, the real one included, is rendered by the same ``ast.unparse`` and renamed to a fresh name
drawn from one distribution (ordinary words, the project's test prefix), in an order drawn per grading, in
the same file and class, with the same decorators and fixtures: no global, marker, attribute or name tells
them apart. A forger that cannot compute the right answer must guess which variant is real; forcing them all
to pass (or returning always-equal objects, for ``literal`` points) passes a twin, and a twin whose real
variant passed must not pass (the ``twin`` guard, ``envs/rewards/guards.py``). The report's ids are mapped
back to the task's before grading reads them (:meth:`TwinPlan.restore`).

A point counts only where an honest run reaches it: a statement of the test's body, or of a ``with`` block in
it that is not ``pytest.raises``-like, with no ``return``/``yield``/``break``/``continue`` before it. A test
no twin can be made for (not a function of the file or of a top-level class, no such point, a method using
zero-argument ``super()``, a test the file calls or reads by name) keeps its name and is listed in :attr:`TwinPlan.unprotected`; when no test at all
gets a twin, one must-fail test goes into a file of its own, so an honest run still fails something.

Per runner (``envs/sandbox/testrun.py``): **pytest** ids ``path::[Class::]name[params]``; **django** ids
``name (module.Class)`` for the method ``Class.name`` of ``tests/<module>.py``; **sympy** bare names, looked
for in the test files the run covers, reported as ``path::name``.

Not guaranteed: tests the agent can read (generated tasks keep theirs in its repository; the base's copy is
in the grading sandbox's git store) can be matched against the variants by their text, as their answers can be
hard-coded. A guessing forger survives one test with probability ``1/(k+1)`` (``k`` twins) and a task with
``n`` such tests ``(1/(k+1))**n``. Always-equal objects are caught only at ``literal`` points.
"""

from __future__ import annotations

import ast
import re
import secrets
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from repogym.envs.core import pyast
from repogym.envs.rewards.twin_shapes import fresh_name, shuffled, twin_group
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.sandbox.testrun import django_label

PASS_TO_PASS_SAMPLE = 2
"""PASS_TO_PASS tests given a twin per grading, drawn at random."""


def split_id(test_id: str, runner: str) -> tuple[str, str, str, str] | None:
    """``(file, name, before, after)`` of a reported id: its file (django: its module), the test function's name,
    and the text around that name (classes before; parameters after), so ``before + other + after`` is the id of
    the function ``other`` run the same way. None for an id of no test function."""
    if runner == "django":
        match = re.match(r"^(\w+) \(([\w.]+)\)$", test_id)
        return (match.group(2).rpartition(".")[0], match.group(1), "", f" ({match.group(2)})") if match else None
    head, bracket, params = test_id.partition("[")
    path, sep, scoped = head.partition("::")
    if not sep:
        return None
    scope, _, name = scoped.rpartition("::")
    return path, name, f"{path}::{scope + '::' if scope else ''}", bracket + params


@dataclass(frozen=True)
class Twin:
    """One planted must-fail test: every run of the function ``name`` in ``file`` (in any class that has it, with
    any parameters) is one of its runs."""

    test_id: str
    """As the runner reports it (in the class that defines it)."""
    file: str
    """Its file (django: its module), as :func:`split_id` reads it."""
    name: str
    real: str | None
    """The name of the real variant it twins (the same run of it must pass for this twin's run to be judged);
    None for a must-fail test of its own."""
    kind: str
    """``literal``, ``negated``, ``exception`` or ``must_fail``."""


@dataclass
class TwinPlan:
    """What one grading planted: the twins, the real tests' new names, and what stands unprotected."""

    runner: str = "pytest"
    twins: list[Twin] = field(default_factory=list)
    renamed: dict[tuple[str, str], str] = field(default_factory=dict)
    """``{(file, new name): old name}`` of the real tests (in every class of the file that runs them)."""
    unprotected: list[str] = field(default_factory=list)
    """Graded tests (task ids) no twin could be made for."""
    files: list[str] = field(default_factory=list)
    """Files of the harness's own to run too (a must-fail test of its own)."""

    def twin_runs(self, outcomes: dict[str, str]) -> list[tuple[Twin, str, str, str | None]]:
        """``(twin, reported id, outcome, outcome of the same run of its real variant)`` for every twin run."""
        by_name = {(t.file, t.name): t for t in self.twins}
        found = []
        for test_id, outcome in outcomes.items():
            parts = split_id(test_id, self.runner)
            twin = by_name.get(parts[:2]) if parts else None
            if twin:
                real = outcomes.get(parts[2] + twin.real + parts[3]) if twin.real else None
                found.append((twin, test_id, outcome, real))
        return found

    def restore(self, outcomes: dict[str, str]) -> dict[str, str]:
        """The report as the task's ids read it: twins' runs left out, renamed tests under their own names.

        Fails closed: a record under a renamed test's old name (no test has it in this run, so only a forger
        wrote it) never makes that test pass; of two outcomes for one id the one that is not ``passed`` stays.
        """
        twins = {(t.file, t.name) for t in self.twins}
        old_names = {(file, old) for (file, _), old in self.renamed.items()}
        restored: dict[str, str] = {}
        for test_id, outcome in outcomes.items():
            parts = split_id(test_id, self.runner)
            original = test_id
            if parts and parts[:2] in twins:
                continue
            if parts and parts[:2] in self.renamed:
                original = parts[2] + self.renamed[parts[:2]] + parts[3]
            elif parts and parts[:2] in old_names and outcome == "passed":
                outcome = "failed"
            if restored.get(original, "passed") == "passed":
                restored[original] = outcome
        return restored


# -- files ------------------------------------------------------------------------------------------------------

def _find(tree: ast.Module, parts: list[str]) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None] | None:
    """The test function at ``Class::name`` or ``name`` (top-level classes only; a method a class inherits from
    another class of the file is found there), and the class that defines it."""
    if len(parts) == 1:
        found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == parts[0]]
        return (found[-1], None) if found else None
    if len(parts) != 2:
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    queue, seen = [parts[0]], set()
    while queue:  # the class, then its bases in the file, breadth first (close enough to the MRO for tests)
        owner = classes.get(queue.pop(0))
        if owner is None or owner.name in seen:
            continue
        seen.add(owner.name)
        found = [n for n in owner.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == parts[1]]
        if found:
            return found[-1], owner
        if any(isinstance(t, ast.Name) and t.id == parts[1] for n in owner.body if isinstance(n, ast.Assign)
               for t in n.targets):
            return None  # bound some other way in this class: not a def a twin can copy
        queue += [b.id for b in owner.bases if isinstance(b, ast.Name)]
    return None


def _span(func: ast.AST, siblings: list[ast.stmt]) -> tuple[int, int] | None:
    """The lines ``(first, last)`` of ``func`` with its decorators, when no sibling statement shares them."""
    first = min([func.lineno] + [d.lineno for d in func.decorator_list])
    last = func.end_lineno
    for other in siblings:
        if other is not func and other.lineno <= last and (other.end_lineno or other.lineno) >= first:
            return None
    return first, last


def _indented(text: str, indent: str) -> list[str]:
    return [(indent + line) if line.strip() else "" for line in text.split("\n")]


def twin_source(source: str, test_ids: list[str], taken: set[str] | None = None) -> tuple[
        str, dict[str, tuple[str, str, list[tuple[str, str]]]]] | None:
    """``source`` with each test of ``test_ids`` (``path::[Class::]name`` in this file) replaced by its variants.

    Returns ``(new source, {test id: (old name, real's new ``[Class::]name``, [(twin ``[Class::]name``, kind)])})``
    for the tests that got twins (the class: the one that defines the function); None when the source does not
    parse.
    """
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return None
    taken, loaded = set(taken or ()), set()  # every name defined or used; those read (a call by name among them)
    for n in ast.walk(tree):  # (one walk: a graded file can be long)
        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            taken.add(n.name)
        elif isinstance(n, ast.Name):
            taken.add(n.id)
            if isinstance(n.ctx, ast.Load):
                loaded.add(n.id)
        elif isinstance(n, ast.Attribute):
            loaded.add(n.attr)
    lines = source.split("\n")
    edits: list[tuple[int, int, list[str]]] = []
    made: dict[str, tuple[str, str, list[tuple[str, str]]]] = {}
    done: dict[int, tuple[str, str, list[tuple[str, str]]]] = {}
    for test_id in test_ids:
        rest = test_id.split("::", 1)[1].split("[", 1)[0] if "::" in test_id else ""
        found = _find(tree, rest.split("::")) if rest else None
        if found is None:
            continue
        func, owner = found
        if id(func) in done:  # another parameter of the same test
            made[test_id] = done[id(func)]
            continue
        span = _span(func, owner.body if owner else tree.body)
        # A test the file calls by name (toolz's test_is_partial calls test_is_valid) keeps its name.
        called = func.name in loaded
        group = twin_group(func, taken) if span and not called else None
        if group is None:
            continue
        variants, real_name, twins = group
        scope = f"{owner.name}::" if owner else ""
        indent = " " * func.col_offset
        text: list[str] = []
        for i, (node, _) in enumerate(variants):
            if i:
                text += [""] * (1 if owner else 2)
            text += _indented(ast.unparse(ast.fix_missing_locations(node)), indent)
        edits.append((span[0], span[1], text))
        done[id(func)] = made[test_id] = (func.name, scope + real_name, [(scope + name, kind) for name, kind in twins])
    for first, last, text in sorted(edits, reverse=True):
        lines[first - 1:last] = text
    return "\n".join(lines), made


# -- per runner -------------------------------------------------------------------------------------------------

def _reported(path: str, scoped: str, runner: str) -> str:
    """The runner's id of ``Class::name`` / ``name`` in ``path``."""
    if runner != "django":
        return f"{path}::{scoped}"
    owner, _, name = scoped.rpartition("::")
    return f"{name} ({django_label(path)}{'.' + owner if owner else ''})"


def _locations(test_ids: list[str], runner: str, test_files: list[str]) -> dict[str, list[str]]:
    """``{task test id: [path::[Class::]name ...]}``: where each graded test can be found."""
    if runner == "pytest":
        return {tid: [tid] for tid in test_ids if "::" in tid}
    if runner == "django":
        from repogym.envs.rewards.ids import django_id
        found = {}
        for tid in test_ids:
            canonical = django_id(tid)
            if canonical:
                name, dotted = canonical[:-1].split(" (", 1)
                module, _, owner = dotted.rpartition(".")
                found[tid] = [f"tests/{module.replace('.', '/')}.py::{owner}::{name}"]
        return found
    # sympy: a bare name is every function of that name in the files the run covers.
    return {tid: ([tid] if "::" in tid else [f"{p}::{tid}" for p in test_files]) for tid in test_ids}


def _described(sandbox: Sandbox, lines: list[str], test_files: list[str]) -> dict[str, list[str]]:
    """``{docstring line: [path::Class::name ...]}``: the test methods in ``test_files`` whose docstring's first
    line (as unittest prints it) is one of ``lines``."""
    found: dict[str, list[str]] = {}
    for path in test_files if lines else []:
        try:
            tree = pyast.parse(sandbox.read_file(path, limit=64 << 20).decode("utf-8"))
        except (FileNotFoundError, UnicodeDecodeError, OSError, SyntaxError, ValueError):
            continue
        for owner in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for func in (n for n in owner.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                doc = (ast.get_docstring(func) or "").strip().split("\n")[0].strip()
                if doc in lines:
                    found.setdefault(doc, []).append(f"{path}::{owner.name}::{func.name}")
    return found


def _own_file(folder: PurePosixPath, runner: str) -> tuple[str, str, Twin]:
    """``(path, source, twin)`` of a must-fail test in a test file of its own, in ``folder``."""
    name = fresh_name(set())
    path = str(folder / f"{name}.py")
    a = secrets.randbelow(900) + 100
    if runner == "django":
        owner = fresh_name(set(), "_").title().replace("_", "") + "Tests"
        source = (f"import unittest\n\n\nclass {owner}(unittest.TestCase):\n    def {name}(self):\n"
                  f"        assert {a} == {a + 1}\n")
        return path, source, Twin(f"{name} ({django_label(path)}.{owner})", django_label(path), name, None,
                                  "must_fail")
    return path, f"def {name}():\n    assert {a} == {a + 1}\n", Twin(f"{path}::{name}", path, name, None, "must_fail")


def plant_twins(sandbox: Sandbox, fail_to_pass: list[str], pass_to_pass: list[str] = (), *, runner: str = "pytest",
                test_files: list[str] | None = None) -> TwinPlan:
    """Rewrite the graded tests in ``sandbox`` into their variants; the :class:`TwinPlan` to read the run with.

    Every FAIL_TO_PASS test and :data:`PASS_TO_PASS_SAMPLE` PASS_TO_PASS tests drawn at random get twins.
    ``runner`` says how ids read (``envs/sandbox/testrun.py``); ``test_files``: the files the run covers (sympy's
    bare names are looked for there).
    """
    test_files = list(test_files or [])
    sample = shuffled([t for t in dict.fromkeys(pass_to_pass) if t not in fail_to_pass])[:PASS_TO_PASS_SAMPLE]
    graded = list(dict.fromkeys(fail_to_pass)) + sample
    where = _locations(graded, runner, test_files)
    if runner == "django":  # an id that is a docstring's first line: the methods of the run's files it describes
        where.update(_described(sandbox, [t for t in graded if t not in where], test_files))
    by_file: dict[str, list[str]] = {}
    for locations in where.values():
        for location in locations:
            by_file.setdefault(location.split("::", 1)[0], []).append(location)
    plan = TwinPlan(runner)
    covered: set[str] = set()
    for path, locations in by_file.items():
        if not path.endswith(".py"):
            continue
        try:
            source = sandbox.read_file(path, limit=64 << 20).decode("utf-8")
        except (FileNotFoundError, UnicodeDecodeError, OSError):
            continue
        planted = twin_source(source, list(dict.fromkeys(locations)))
        if not planted or not planted[1]:
            continue
        new_source, made = planted
        sandbox.write_file(path, new_source.encode())
        file = django_label(path) if runner == "django" else path
        for location, (old, real, twins) in made.items():
            covered.add(location)
            plan.renamed[file, real.rpartition("::")[2]] = old
            plan.twins.extend(Twin(_reported(path, scoped, runner), file, scoped.rpartition("::")[2],
                                   real.rpartition("::")[2], kind) for scoped, kind in twins)
    plan.twins = list({(t.file, t.name): t for t in plan.twins}.values())
    plan.unprotected = [tid for tid in fail_to_pass if not any(loc in covered for loc in where.get(tid, []))]
    if not plan.twins:  # an honest run must still fail something (the exit status and summary guards)
        first = next(iter(where.get(fail_to_pass[0], [])), None) if fail_to_pass else None
        first = first or (test_files[0] if test_files else None)
        folder = PurePosixPath(first.split("::", 1)[0]).parent if first else PurePosixPath(
            "tests" if runner == "django" else ".")
        path, source, twin = _own_file(folder, runner)
        sandbox.write_file(path, source.encode())
        plan.twins.append(twin)
        plan.files.append(path)
    return plan
