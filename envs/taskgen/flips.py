"""Operator-flip tasks: a procedural family for measuring whether what a policy learns carries over.

Each task is one flipped comparison in a precondition check (``assert low <= high`` became
``assert low > high``) of a generated project. The failing test's traceback names the file, the line and
its text, and the fix is to read that line and flip the operator back: a procedure (copy what you read,
negate one operator) rather than a string to recall, because every function, argument and file name is
drawn fresh. A policy that only memorised the training tasks' fixes solves none of the held-out ones.

:func:`build_flips` writes two suites into the cache (``<cache>/suites``), found by name afterwards:

- ``NAME``: the training tasks (most functions of most modules of the ``train_projects``);
- ``NAME-heldout``: tasks the policy never trains on, each marked with why it is held out in
  ``extra["heldout"]``: ``function`` (other functions of training files), ``file`` (whole modules of the
  training projects) or ``project`` (projects built from a vocabulary the training projects never use).

The problem statement is pytest's ``--tb=short`` report of the failing test (checked against a real run by
the tests); the same seed gives the same projects, commits and suites on every machine.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import keyword
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.paths import cache_dir
from repogym.envs.tasks.fixed_git import fixed_git
from repogym.envs.tasks.schema import Task, load_tasks, save_tasks

NEGATED = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}
"""Each comparison and its negation: the mutation and its fix."""
_ARITHMETIC = ("+", "-", "*")
# Two disjoint vocabularies: the held-out projects share no identifier with the training ones.
_TRAIN_WORDS = (
    "scale total count limit width height offset index weight score level depth margin budget quota "
    "price stock rate speed ratio delta floor ceiling radius length size step start stop base value "
    "span gap load cost").split()
_TRAIN_VERBS = "scale clamp shift pad trim merge split round bound grow shrink fold".split()
_UNSEEN_WORDS = (
    "alpha beta gamma omega sigma theta kappa zeta tau rho phi psi chi eta iota mu nu xi "
    "upsilon").split()
_UNSEEN_VERBS = "warp bend twist spin flip tilt mix blend".split()
assert not [w for w in _TRAIN_WORDS + _UNSEEN_WORDS if keyword.iskeyword(w)], "argument names must be identifiers"


@dataclass
class FlipsConfig:
    """Settings of :func:`build_flips`; every field goes into the suites' identity (their cache key)."""

    name: str = "flips"
    """Suite name: writes ``NAME`` (training) and ``NAME-heldout``."""
    seed: int = 0
    train_projects: int = 2
    """Projects the training tasks come from (their held-out functions and files too)."""
    unseen_projects: int = 1
    """Projects held out whole, named from another vocabulary."""
    modules: int = 5
    """Modules per project."""
    functions: int = 6
    """Functions per module (one task each)."""
    heldout_modules: int = 1
    """Modules of each training project held out whole (``file``)."""
    heldout_functions: int = 1
    """Functions of each training module held out (``function``)."""
    heldout_in_projects: int | None = None
    """Training projects that give held-out functions and files (the first ones; None: all). The others train on
    every task: more training tasks without a larger held-out split to evaluate."""

    def check(self) -> "FlipsConfig":
        if self.modules <= self.heldout_modules:
            raise ConfigError(f"flips: modules ({self.modules}) must exceed heldout_modules ({self.heldout_modules})")
        if self.functions <= self.heldout_functions:
            raise ConfigError(f"flips: functions ({self.functions}) must exceed heldout_functions "
                              f"({self.heldout_functions})")
        if self.heldout_in_projects is not None and self.heldout_in_projects < 0:
            raise ConfigError("flips: heldout_in_projects must be >= 0 (or null: all training projects)")
        if self.train_projects < 1:
            raise ConfigError("flips: train_projects must be at least 1")
        return self


@dataclass(frozen=True)
class _Function:
    name: str
    args: tuple[str, str]
    op: str
    right: str  # the second argument's name, or an integer literal
    arithmetic: str
    call: tuple[int, int]
    expected: int

    def check_line(self, op: str | None = None) -> str:
        return f"    assert {self.args[0]} {op or self.op} {self.right}"


def _satisfying(rng: random.Random, op: str, literal: bool) -> tuple[int, int, int | None]:
    """Arguments (a, b), and a literal k when ``literal``, with ``a op b`` (or ``a op k``) true."""
    k = rng.randint(1, 9) if literal else None
    while True:
        a, b = rng.randint(0, 12), rng.randint(0, 12)
        against = b if k is None else k
        if op == "==":
            a = against
        if _holds(a, op, against):
            return a, b, k


def _holds(a: int, op: str, b: int) -> bool:
    return {"<": a < b, ">=": a >= b, ">": a > b, "<=": a <= b, "==": a == b, "!=": a != b}[op]


def _module(rng: random.Random, words: list[str], verbs: list[str], count: int) -> list[_Function]:
    functions: list[_Function] = []
    names, lines = set(), set()
    while len(functions) < count:
        name = f"{rng.choice(verbs)}_{rng.choice(words)}"
        a, b = rng.sample(words, 2)
        op = rng.choice(sorted(NEGATED))
        literal = rng.random() < 0.3
        x, y, k = _satisfying(rng, op, literal)
        right = str(k) if literal else b
        f = _Function(name, (a, b), op, right, rng.choice(_ARITHMETIC), (x, y), 0)
        flipped = f.check_line(NEGATED[op])
        # Unique names, and each check line (fixed and flipped) once per file: `edit` needs one exact match.
        if name in names or {f.check_line(), flipped} & lines:
            continue
        names.add(name)
        lines |= {f.check_line(), flipped}
        expected = {"+": x + y, "-": x - y, "*": x * y}[f.arithmetic]
        functions.append(_Function(name, (a, b), op, right, f.arithmetic, (x, y), expected))
    return functions


def _source(functions: list[_Function], flipped: str | None = None) -> str:
    out = ['"""Generated by repogym (operator-flip tasks)."""', ""]
    for f in functions:
        out += ["", f"def {f.name}({f.args[0]}, {f.args[1]}):",
                f.check_line(NEGATED[f.op] if f.name == flipped else None),
                f"    return {f.args[0]} {f.arithmetic} {f.args[1]}", ""]
    return "\n".join(out[:-1]) + "\n"


def _tests(package: str, module: str, functions: list[_Function]) -> str:
    out = [f"from {package}.{module} import {', '.join(f.name for f in functions)}", ""]
    for f in functions:
        out += ["", f"def test_{f.name}():", f"    assert {f.name}({f.call[0]}, {f.call[1]}) == {f.expected}", ""]
    return "\n".join(out[:-1]) + "\n"


def _line_of(text: str, needle: str) -> int:
    return text.splitlines().index(needle) + 1


def problem_statement(package: str, module: str, f: _Function, functions: list[_Function]) -> str:
    """pytest's ``--tb=short`` report of the failing test, as the agent would see it running that test."""
    test_file, source_file = f"tests/test_{module}.py", f"{package}/{module}.py"
    call = f"    assert {f.name}({f.call[0]}, {f.call[1]}) == {f.expected}"
    flipped = f.check_line(NEGATED[f.op])
    test_line = _line_of(_tests(package, module, functions), call)
    source_line = _line_of(_source(functions, f.name), flipped)
    return ("A test fails after a recent change; the fix belongs in the library code, not in the tests.\n\n"
            f"FAILED {test_file}::test_{f.name}\n\n"
            f"{test_file}:{test_line}: in test_{f.name}\n{call}\n"
            f"{source_file}:{source_line}: in {f.name}\n{flipped}\nE   AssertionError\n")


def _project(rng: random.Random, package: str, words: list[str], verbs: list[str], config: FlipsConfig
             ) -> dict[str, list[_Function]]:
    modules: dict[str, list[_Function]] = {}
    while len(modules) < config.modules:
        name = rng.choice(words)
        if name not in modules:
            modules[name] = _module(rng, words, verbs, config.functions)
    return modules


def _self_check(modules: dict[str, list[_Function]]) -> None:
    """Every test passes on the correct code and its own flip fails it (run in-process: plain arithmetic)."""
    for functions in modules.values():
        for f in functions:
            for flipped in (None, f.name):
                scope: dict = {}
                exec(compile(_source(functions, flipped), "<flips>", "exec"), scope)  # noqa: S102 - our own text
                try:
                    ok = scope[f.name](*f.call) == f.expected
                except AssertionError:
                    ok = False
                if ok != (flipped is None):
                    raise AssertionError(f"flips: generated {f.name} does not {'pass' if ok is False else 'fail'}")


def _write_repo(root: Path, package: str, modules: dict[str, list[_Function]]) -> tuple[Path, str]:
    """A git repository holding the correct project; returns it and its commit."""
    repo = root / package
    (repo / package).mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / package / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text(f'[project]\nname = "{package}"\nversion = "0.1.0"\n\n'
                                         '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for module, functions in modules.items():
        (repo / package / f"{module}.py").write_text(_source(functions))
        (repo / "tests" / f"test_{module}.py").write_text(_tests(package, module, functions))
    where = "taskgen.flips"
    fixed_git(repo, "init", "-q", "-b", "main", where=where)
    fixed_git(repo, "add", "-A", where=where)
    fixed_git(repo, "commit", "-q", "-m", f"{package}: generated project", where=where)
    return repo, fixed_git(repo, "rev-parse", "HEAD", where=where).strip()


def _mutant_commit(repo: Path, head: str, path: str, text: str) -> str:
    """``head``'s tree with ``path`` replaced, as a parentless commit (no history leads to the fix)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}

        def run(*args: str, input: bytes | None = None) -> str:
            return fixed_git(repo, *args, input=input, where="taskgen.flips", env=env).strip()

        run("read-tree", head)
        blob = run("hash-object", "-w", "--stdin", input=text.encode())
        run("update-index", "--cacheinfo", f"100644,{blob},{path}")
        commit = run("commit-tree", run("write-tree"), "-m", "flipped comparison")
        run("update-ref", f"refs/flips/{commit}", commit)
        return commit


def _gold_patch(path: str, before: str, after: str) -> str:
    diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                f"a/{path}", f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n" + "".join(diff)


def suite_files(config: FlipsConfig) -> tuple[Path, Path]:
    """Where :func:`build_flips` writes the training and held-out suites of ``config``."""
    suites = cache_dir() / "suites"
    suites.mkdir(parents=True, exist_ok=True)
    return suites / f"{config.name}.jsonl", suites / f"{config.name}-heldout.jsonl"


def build_flips(config: FlipsConfig | None = None) -> tuple[list[Task], list[Task]]:
    """Generate the projects and write both suites (see the module doc); returns (training, held-out) tasks.

    Built once per config: a second call with the same config reads the suites back."""
    config = (config or FlipsConfig()).check()
    key = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:12]
    train_file, heldout_file = suite_files(config)
    stamp = cache_dir() / "flips" / f"{config.name}-{key}.done"
    if stamp.exists() and train_file.exists() and heldout_file.exists():
        return load_tasks(train_file), load_tasks(heldout_file)
    root = cache_dir() / "flips" / f"{config.name}-{key}"
    if root.exists():
        shutil.rmtree(root)  # a build that died half way
    rng = random.Random(config.seed)
    train: list[Task] = []
    heldout: list[Task] = []
    split_in = config.train_projects if config.heldout_in_projects is None else config.heldout_in_projects
    projects = [(f"{config.name.replace('-', '_')}_p{i}", _TRAIN_WORDS, _TRAIN_VERBS, False, i < split_in)
                for i in range(config.train_projects)]
    projects += [(f"{config.name.replace('-', '_')}_u{i}", _UNSEEN_WORDS, _UNSEEN_VERBS, True, True)
                 for i in range(config.unseen_projects)]
    for package, words, verbs, unseen, split in projects:
        modules = _project(rng, package, list(words), list(verbs), config)
        _self_check(modules)
        repo, head = _write_repo(root, package, modules)
        all_tests = [f"tests/test_{m}.py::test_{f.name}" for m, fs in modules.items() for f in fs]
        for m_index, (module, functions) in enumerate(modules.items()):
            path = f"{package}/{module}.py"
            for f_index, f in enumerate(functions):
                mutated = _source(functions, f.name)
                failing = f"tests/test_{module}.py::test_{f.name}"
                why = ("project" if unseen else None if not split
                       else "file" if m_index >= config.modules - config.heldout_modules
                       else "function" if f_index >= config.functions - config.heldout_functions else None)
                task = Task(
                    instance_id=f"repogym__{package}-{module}-{f.name}", repo=f"repogym/{package}",
                    base_commit=_mutant_commit(repo, head, path, mutated),
                    problem_statement=problem_statement(package, module, f, functions),
                    patch=_gold_patch(path, mutated, _source(functions)), FAIL_TO_PASS=[failing],
                    PASS_TO_PASS=[t for t in all_tests if t != failing], difficulty=1,
                    setup={"source": f"path:{repo}"},
                    extra={"family": "flips", **({"heldout": why} if why else {})})
                (heldout if why else train).append(task)
    save_tasks(train, train_file)
    save_tasks(heldout, heldout_file)
    stamp.write_text(json.dumps(asdict(config)))
    return train, heldout


__all__ = ["NEGATED", "FlipsConfig", "build_flips", "problem_statement", "suite_files"]
