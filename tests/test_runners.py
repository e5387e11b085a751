"""Test runners other than pytest: Django's ``tests/runtests.py`` (unittest) and sympy's ``bin/test``.

Each fixture is a real-shaped project built here (a git repository, a hidden ``test_patch``, SWE-bench's test
command and id forms), graded end to end: the gold patch resolves, the empty patch does not, a patch that
forces every outcome to pass is caught, a patch that rewrites the runner is dropped, and every id form a
dataset lists (Django's two forms and docstring lines, sympy's bare names) names the right tests.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.rewards import grade
from repogym.envs.rewards.evaluate import protected_paths, run_targets
from repogym.envs.rewards.ids import named_by, outcome_of
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.sandbox.testrun import TestRun, django_label, run_test_command
from repogym.envs.core.status import Status
from repogym.envs.tasks.schema import Task


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout

# ---------------------------------------------------------------------------------------------- django

DJANGO_RUNTESTS = '''\
#!/usr/bin/env python
"""A stand-in for Django's tests/runtests.py: labels under tests/, unittest's TextTestRunner."""
import argparse
import os
import sys
import unittest

RUNTESTS_DIR = os.path.abspath(os.path.dirname(__file__))
sys.path.append(os.path.dirname(RUNTESTS_DIR))  # the project (Django is installed in develop mode)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("modules", nargs="*")
    parser.add_argument("-v", "--verbosity", type=int, default=1)
    parser.add_argument("--settings")
    parser.add_argument("--parallel", type=int, default=0)
    options = parser.parse_args()
    loader = unittest.defaultTestLoader
    if options.modules:
        suite = loader.loadTestsFromNames(options.modules)
    else:
        suite = loader.discover(RUNTESTS_DIR, top_level_dir=RUNTESTS_DIR)
    result = unittest.TextTestRunner(verbosity=options.verbosity).run(suite)
    sys.exit(bool(result.failures or result.errors))


if __name__ == "__main__":
    main()
'''

SHOP_PRICE = '''\
def discount(price, percent):
    """price less percent of it."""
    return price - price * percent / 100


def add(a, b):
    return a + b
'''

DJANGO_VISIBLE = '''\
import unittest

from shop.price import add


class PriceTests(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
'''

DJANGO_HIDDEN = '''\
import unittest

from shop.price import discount


class DiscountTests(unittest.TestCase):
    def test_zero(self):
        assert discount(10, 0) == 10

    def test_full(self):
        """A full discount makes it free.

        More words that unittest does not print.
        """
        self.assertEqual(discount(10, 100), 0)

    def test_half(self):
        self.assertEqual(discount(10, 50), 5)
'''

DJANGO_F2P = ["test_zero (pricing.test_discount.DiscountTests)", "A full discount makes it free."]
DJANGO_P2P = ["test_half (pricing.test_discount.DiscountTests.test_half)", "test_add (pricing.test_price.PriceTests)"]

# Every test passes: TestCase.run reports success without running anything.
DJANGO_FORCE = '''\
import unittest


def _run(self, result=None):
    result.startTest(self)
    result.addSuccess(self)
    result.stopTest(self)


unittest.TestCase.run = _run
'''

# ----------------------------------------------------------------------------------------------- sympy

SYMPY_BIN_TEST = '''\
#!/usr/bin/env python
"""A stand-in for sympy's bin/test: sympy's runner module does the work."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sympy.testing.runtests import test  # noqa: E402

if __name__ == "__main__":
    sys.exit(not test(*[a for a in sys.argv[1:] if not a.startswith("-")], verbose="--verbose" in sys.argv))
'''

# A stand-in for sympy/testing/runtests.py with sympy's own names: SymPyTests.test_file runs each test_* function
# and tells PyTestReporter (entering_filename, entering_test, test_pass/test_fail/test_exception/test_xfail...),
# which prints what sympy prints and counts for the summary.
SYMPY_RUNTESTS = '''\
import os
import sys
import time
import traceback


class XFail(Exception):
    pass


class PyTestReporter:
    def __init__(self, root_dir, verbose):
        self._root_dir, self._verbose = root_dir, verbose
        self._passed, self._xfailed, self._failed, self._exceptions = 0, 0, [], []
        self._start = time.time()

    def write(self, text):
        sys.stdout.write(text)

    def entering_filename(self, filename, n):
        self._active_file = filename[len(self._root_dir) + 1:]
        self._active_file_error = False
        self.write("%s[%d] " % (self._active_file, n))

    def leaving_filename(self):
        self.write(" [FAIL]\\n" if self._active_file_error else " [OK]\\n")
        if self._verbose:
            self.write("\\n")

    def entering_test(self, f):
        self._active_f = f
        if self._verbose:
            self.write("\\n" + f.__name__ + " ")

    def test_pass(self, char="."):
        self._passed += 1
        self.write("ok" if self._verbose else char)

    def test_xfail(self):
        self._xfailed += 1
        self.write("f")

    def test_fail(self, exc_info):
        self._failed.append((self._active_file, self._active_f, exc_info))
        self.write("F")
        self._active_file_error = True

    def test_exception(self, exc_info):
        self._exceptions.append((self._active_file, self._active_f, exc_info))
        self.write("E")
        self._active_file_error = True

    def finish(self):
        for rel, f, exc_info in self._failed + self._exceptions:
            print(("%s:%s" % (rel, f.__name__)).center(78, "_"))
            print("".join(traceback.format_exception(*exc_info)))
        text = "tests finished: %d passed, " % self._passed
        for count, word in ((len(self._failed), "failed"), (len(self._exceptions), "exceptions"),
                            (self._xfailed, "expected to fail")):
            if count:
                text += "%d %s, " % (count, word)
        text += "in %.2f seconds" % (time.time() - self._start)
        print((" " + text + " ").center(78, "="))
        return not (self._failed or self._exceptions)


class SymPyTests:
    def __init__(self, reporter):
        self._reporter = reporter

    def test_file(self, filename):
        namespace = {"__file__": filename, "__name__": "test_module"}
        with open(filename) as fh:
            exec(compile(fh.read(), filename, "exec"), namespace)
        funcs = sorted((f for n, f in namespace.items() if n.startswith("test_") and callable(f)),
                       key=lambda f: f.__code__.co_firstlineno)
        self._reporter.entering_filename(filename, len(funcs))
        for f in funcs:
            self._reporter.entering_test(f)
            try:
                f()
            except Exception:
                t, v, tr = sys.exc_info()
                if t is AssertionError:
                    self._reporter.test_fail((t, v, tr))
                elif t.__name__ == "XFail":
                    self._reporter.test_xfail()
                else:
                    self._reporter.test_exception((t, v, tr))
            else:
                self._reporter.test_pass()
        self._reporter.leaving_filename()


def test(*paths, verbose=False):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.environ.get("PYTHONHASHSEED"):  # as sympy does: the tests run in a child with hash randomization
        import subprocess
        code = "import sys; from sympy.testing.runtests import test; sys.exit(not test(*%r, verbose=%r))"
        env = dict(os.environ, PYTHONHASHSEED="42")
        return subprocess.call([sys.executable, "-R", "-c", code % (paths, verbose)], cwd=root, env=env) == 0
    found = []
    for path in paths or ["sympy"]:
        path = os.path.join(root, path)
        if os.path.isfile(path):
            found.append(path)
        for folder, _, names in os.walk(path):
            found += [os.path.join(folder, n) for n in names if n.startswith("test_") and n.endswith(".py")]
    reporter = PyTestReporter(root, verbose)
    tests = SymPyTests(reporter)
    for path in sorted(set(found)):
        tests.test_file(path)
    return reporter.finish()
'''

MATHY_CORE = '''\
def double(x):
    return x + x
'''

SYMPY_VISIBLE = '''\
from sympy.core import double


def test_double():
    assert double(2) == 4
'''

SYMPY_VISIBLE_AFTER = SYMPY_VISIBLE + '''

def test_double_negative():
    assert double(-3) == -6
'''

SYMPY_HIDDEN = '''\
from sympy.core import double


def test_double():
    assert double(0) == 0


def test_double_float():
    assert double(-1.5) == -3.0
'''

# The code under test prints what sympy prints for a pass, then raises the runner's XFail; at exit it prints a summary
# of passes. Read from the output, every test passed.
SYMPY_PRINTS = '''\
import atexit
import sys


def double(x):
    sys.stdout.write(" ok\\n")
    raise sys.modules["sympy.testing.runtests"].XFail()


atexit.register(lambda: print("=" * 20 + " tests finished: 9 passed, in 0.01 seconds " + "=" * 20))
'''

# Inside the test process: sympy's reporter made to call every failure a pass (the broken code kept).
SYMPY_REPORTER_FORCE = MATHY_CORE.replace("x + x", "x + abs(x)") + '''
import sys

_runner = sys.modules["sympy.testing.runtests"].PyTestReporter
_runner.test_fail = _runner.test_exception = lambda self, exc_info: _runner.test_pass(self)
'''

SYMPY_F2P = ["test_double_negative", "test_double_float"]
SYMPY_P2P = ["test_double"]  # in both files: passes only when both passed

# Every F or E the runner prints becomes "ok".
SYMPY_FORCE = '''\
import sys


class _Ok:
    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        return self.stream.write("ok" if text in ("F", "E") else text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


sys.stdout = _Ok(sys.stdout)
'''


# --------------------------------------------------------------------------------------------- helpers

def _project(root: Path, base: dict[str, str], broken: dict[str, str], hidden: dict[str, str]) -> tuple[str, str, str]:
    """A git repository: ``base`` committed, then ``broken`` (the base commit); ``(base, gold, test_patch)``."""
    for rel, text in base.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "project")
    for rel, text in broken.items():
        (root / rel).write_text(text)
    _git(root, "commit", "-qam", "break it")
    base_commit = _git(root, "rev-parse", "HEAD").strip()
    gold = _git(root, "diff", "HEAD", "HEAD~1")
    originals = {rel: (root / rel).read_text() if (root / rel).exists() else None for rel in hidden}
    for rel, text in hidden.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "add", "-N", *hidden)
    test_patch = _git(root, "diff")
    for rel, text in originals.items():
        if text is None:
            _git(root, "rm", "-q", "--cached", rel)
            (root / rel).unlink()
        else:
            (root / rel).write_text(text)
    return base_commit, gold, test_patch


def _patch(task: Task, changes: dict[str, str], tmp_path: Path) -> str:
    """A diff against the task's base that writes ``changes`` (made with git in a copy of the source)."""
    source = Path(task.setup["source"].removeprefix("path:"))
    work = tmp_path / "patch"
    _git(tmp_path, "clone", "-q", str(source), str(work))
    _git(work, "checkout", "-q", task.base_commit)
    for rel, text in changes.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git(work, "add", "-A")
    return _git(work, "diff", "--cached")


@pytest.fixture(scope="module")
def django_task(tmp_path_factory) -> Task:
    root = tmp_path_factory.mktemp("django") / "repo"
    base = {"shop/__init__.py": "", "shop/price.py": SHOP_PRICE, "tests/runtests.py": DJANGO_RUNTESTS,
            "tests/test_sqlite.py": "DATABASES = {}\n", "tests/pricing/__init__.py": "",
            "tests/pricing/test_price.py": DJANGO_VISIBLE}
    broken = {"shop/price.py": SHOP_PRICE.replace("price - price * percent / 100", "price * percent / 100")}
    commit, gold, test_patch = _project(root, base, broken, {"tests/pricing/test_discount.py": DJANGO_HIDDEN})
    return Task(instance_id="shop__shop-1", repo="tests/shop", base_commit=commit,
                problem_statement="discount(10, 0) gives 0; it should give 10.", patch=gold, test_patch=test_patch,
                FAIL_TO_PASS=list(DJANGO_F2P), PASS_TO_PASS=list(DJANGO_P2P),
                test_command="./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
                setup={"source": f"path:{root}", "runner": "django"})


@pytest.fixture(scope="module")
def sympy_task(tmp_path_factory) -> Task:
    root = tmp_path_factory.mktemp("sympy") / "repo"
    base = {"bin/test": SYMPY_BIN_TEST, "sympy/__init__.py": "", "sympy/core.py": MATHY_CORE,
            "sympy/testing/__init__.py": "", "sympy/testing/runtests.py": SYMPY_RUNTESTS,
            "sympy/tests/__init__.py": "", "sympy/tests/test_core.py": SYMPY_VISIBLE}
    broken = {"sympy/core.py": MATHY_CORE.replace("x + x", "x + abs(x)")}
    hidden = {"sympy/tests/test_core.py": SYMPY_VISIBLE_AFTER, "sympy/tests/test_more.py": SYMPY_HIDDEN}
    commit, gold, test_patch = _project(root, base, broken, hidden)
    return Task(instance_id="mathy__mathy-1", repo="tests/mathy", base_commit=commit,
                problem_statement="double(-3) gives 0; it should give -6.", patch=gold, test_patch=test_patch,
                FAIL_TO_PASS=list(SYMPY_F2P), PASS_TO_PASS=list(SYMPY_P2P),
                test_command="PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
                setup={"source": f"path:{root}", "runner": "sympy"})


@pytest.fixture
def factory(backend):
    return sandbox_factory(backend, {}, SandboxConfig(run_id="pytest-runners"))


# ----------------------------------------------------------------------------------------------- ids

REPORTED = {"test_a (app.tests.ATests)": "passed", "test_b (app.tests.ATests)": "failed",
            "test_c (app.tests.BTests)": "passed", "test_d (app.tests.BTests)": "passed"}
DOCS = {"test_b (app.tests.ATests)": "Shared doc.", "test_c (app.tests.BTests)": "Shared doc.",
        "test_d (app.tests.BTests)": "Only d."}


def test_django_ids_name_exactly_the_tests_they_denote():
    django = {"runner": "django", "docs": DOCS}
    assert named_by("test_a (app.tests.ATests)", REPORTED, **django) == ["test_a (app.tests.ATests)"]
    assert named_by("test_a (app.tests.ATests.test_a)", REPORTED, **django) == ["test_a (app.tests.ATests)"]
    assert named_by("Only d.", REPORTED, **django) == ["test_d (app.tests.BTests)"]
    assert outcome_of("Only d.", REPORTED, **django) == "passed"
    # A docstring line several tests share passes only when all did.
    assert outcome_of("Shared doc.", REPORTED, **django) == "failed"
    for nothing in ("test_a", "test_a (app.tests)", "test_a (app.tests.ATests.test_b)", "Only", "Only d",
                    "test_a (app.tests.BTests)", "app.tests.ATests.test_a", ""):
        assert named_by(nothing, REPORTED, **django) == [], nothing
        assert outcome_of(nothing, REPORTED, **django) == "missing"
    # The pytest rules do not leak in: a cut id is not a django id.
    assert named_by("test_a", REPORTED, runner="pytest") == ["test_a (app.tests.ATests)"]


def test_sympy_bare_names_name_every_file_they_are_in():
    reported = {"a/test_x.py::test_f": "passed", "b/test_y.py::test_f": "failed", "a/test_x.py::test_g": "passed",
                "a/test_x.py::test_g2": "failed"}
    assert named_by("test_f", reported, runner="sympy") == ["a/test_x.py::test_f", "b/test_y.py::test_f"]
    assert outcome_of("test_f", reported, runner="sympy") == "failed"
    assert outcome_of("test_g", reported, runner="sympy") == "passed"
    assert outcome_of("a/test_x.py::test_f", reported, runner="sympy") == "passed"
    for nothing in ("test", "test_h", "f", "x.py::test_f", "test_g2 "):
        assert outcome_of(nothing, reported, runner="sympy") == "missing", nothing


def test_summaries_count_in_each_runners_terms():
    django = TestRun({}, summary="Ran 7 tests in 0.01s; FAILED (failures=2, errors=1, skipped=1)", runner="django")
    assert django.summary_counts() == {"ran": 7, "ok": 0, "failures": 2, "errors": 1, "skipped": 1}
    assert TestRun({}, summary="tests finished: 3 passed, 1 failed, in 0.05 seconds",
                   runner="sympy").summary_counts() == {"passed": 3, "failed": 1}


def test_targets_labels_and_protected_runner_files(django_task, sympy_task):
    assert django_label("tests/pricing/test_discount.py") == "pricing.test_discount"
    assert django_label("tests/pricing/test_discount.py::DiscountTests::test_zero") == \
        "pricing.test_discount.DiscountTests.test_zero"
    assert django_label("pricing.test_price") == "pricing.test_price"
    assert run_targets(django_task) == ["pricing.test_discount", "pricing.test_price"]
    assert run_targets(sympy_task) == ["sympy/tests/test_core.py", "sympy/tests/test_more.py"]
    assert "tests/runtests.py" in protected_paths(django_task)
    assert {"bin/test", "sympy/testing/runtests.py", "sympy/utilities/runtests.py"} <= set(protected_paths(sympy_task))


def test_an_unknown_runner_is_a_config_error_listing_the_valid_ones(django_task):
    task = replace(django_task, setup={**django_task.setup, "runner": "nose"})

    def no_sandbox():
        raise AssertionError("a task with an unknown runner is not graded")

    with pytest.raises(ConfigError, match="unknown test runner 'nose': expected one of pytest, django, sympy"):
        grade(task, "", no_sandbox)


# ------------------------------------------------------------------------------------- django, graded

def test_django_gold_resolves_and_empty_does_not(factory, django_task):
    gold = grade(django_task, django_task.patch, factory)
    assert gold.status == Status.RESOLVED, (gold.error, gold.tests, gold.log_tail)
    assert set(gold.tests) == set(DJANGO_F2P + DJANGO_P2P) and set(gold.tests.values()) == {"passed"}
    assert set(gold.guards.values()) == {"ok"}
    assert len(gold.twins) >= 2 and not gold.unprotected
    assert any(t.endswith(" (pricing.test_discount.DiscountTests)") for t in gold.twins)
    empty = grade(django_task, "", factory)
    assert empty.status == Status.UNRESOLVED
    assert empty.tests == {DJANGO_F2P[0]: "failed", DJANGO_F2P[1]: "failed", DJANGO_P2P[0]: "passed",
                           DJANGO_P2P[1]: "passed"}
    assert set(empty.guards.values()) == {"ok"}


def test_django_forced_passes_are_caught(factory, django_task, tmp_path):
    patch = django_task.patch + _patch(django_task, {"shop/__init__.py": DJANGO_FORCE}, tmp_path)
    record = grade(django_task, patch, factory)
    assert record.status == Status.UNRESOLVED
    assert record.error["where"] == "rewards.guard.twin"
    assert record.guards["exit_status"] != "ok" and "OK" in record.guards["summary"]


# The attack on the django runner: discount returns a float equal to everything (no perturbed canary was
# ever made for assertEqual, so every guard said ok).
DJANGO_ALWAYS_EQUAL = SHOP_PRICE.replace("    return price - price * percent / 100\n", "    return _Anything(0)\n") + '''

class _Anything(float):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = float.__hash__
'''


def test_django_always_equal_values_are_caught_by_literal_twins(factory, django_task, tmp_path):
    record = grade(django_task, _patch(django_task, {"shop/price.py": DJANGO_ALWAYS_EQUAL}, tmp_path), factory)
    assert record.status == Status.UNRESOLVED
    assert record.error["where"] == "rewards.guard.twin" and "(literal)" in record.guards["twin"], record.guards
    assert record.tests[DJANGO_F2P[0]] == "passed"  # the forgery works on the real test: only a twin shows it


def test_django_runner_rewrite_is_dropped(factory, django_task, tmp_path):
    lying = "import sys\nprint('Ran 9 tests in 0.001s')\nprint()\nprint('OK')\nsys.exit(0)\n"
    record = grade(django_task, _patch(django_task, {"tests/runtests.py": lying}, tmp_path), factory)
    assert record.status == Status.UNRESOLVED and "tests/runtests.py" in record.dropped
    assert record.tests[DJANGO_F2P[0]] == "failed"


def test_django_run_tests_for_the_agent(factory, django_task):
    sandbox = factory()
    try:
        from repogym.envs.tasks.repos import snapshot
        sandbox.load(snapshot(django_task))
        run = run_test_command(sandbox, django_task.test_command, ["tests/pricing/test_price.py"], runner="django")
        assert run.outcomes == {"test_add (pricing.test_price.PriceTests)": "passed"} and not run.problems
        assert run.exit_status == 0 and run.finish_status == 0 and run.summary.startswith("Ran 1 test in ")
    finally:
        sandbox.close()


# -------------------------------------------------------------------------------------- sympy, graded

@pytest.mark.slow
def test_sympy_gold_resolves_and_empty_does_not(factory, sympy_task):
    gold = grade(sympy_task, sympy_task.patch, factory)
    assert gold.status == Status.RESOLVED, (gold.error, gold.tests, gold.log_tail)
    assert set(gold.guards.values()) == {"ok"} and len(gold.twins) >= 2 and not gold.unprotected
    assert any(t.startswith("sympy/tests/test_core.py::test_") for t in gold.twins)
    empty = grade(sympy_task, "", factory)
    assert empty.status == Status.UNRESOLVED
    assert empty.tests == {"test_double_negative": "failed", "test_double_float": "failed", "test_double": "passed"}


def test_sympy_a_name_in_two_files_passes_only_when_both_do(factory, sympy_task, tmp_path):
    # Breaks double(0) only: test_double passes in test_core.py and fails in test_more.py.
    fixed = "def double(x):\n    return x + x if x else 1\n"
    record = grade(sympy_task, _patch(sympy_task, {"sympy/core.py": fixed}, tmp_path), factory)
    assert record.status == Status.UNRESOLVED and record.tests["test_double"] == "failed"
    assert record.tests["test_double_negative"] == "passed"


@pytest.mark.slow
def test_sympy_results_come_from_its_reporter_not_from_what_tests_print(factory, sympy_task, tmp_path):
    def patch(name, changes):
        (tmp_path / name).mkdir()
        return _patch(sympy_task, changes, tmp_path / name)

    # Every F or E rewritten to "ok" on stdout: the output reads as all passed; the reporter's stream does not.
    printed_ok = grade(sympy_task, patch("ok", {"sympy/__init__.py": SYMPY_FORCE}), factory)
    assert printed_ok.status == Status.UNRESOLVED and printed_ok.tests["test_double_negative"] == "failed"
    # Code under test prints " ok" mid-line, raises the runner's XFail, and prints a summary of passes at exit.
    xfail = grade(sympy_task, patch("xfail", {"sympy/core.py": SYMPY_PRINTS}), factory)
    assert xfail.status == Status.UNRESOLVED, (xfail.tests, xfail.guards)
    assert xfail.tests["test_double_negative"] == "xfailed"
    # The same stdout wrapper beside the real fix changes nothing: it still resolves.
    gold = grade(sympy_task, sympy_task.patch + patch("gold", {"sympy/__init__.py": SYMPY_FORCE}), factory)
    assert gold.status == Status.RESOLVED and set(gold.guards.values()) == {"ok"}, (gold.error, gold.guards)


def test_sympy_forced_passes_are_caught(factory, sympy_task, tmp_path):
    # In the test process: the runner's reporter told that every failure is a pass.
    record = grade(sympy_task, _patch(sympy_task, {"sympy/core.py": SYMPY_REPORTER_FORCE}, tmp_path), factory)
    assert record.status == Status.UNRESOLVED
    assert record.error["where"] == "rewards.guard.twin" and record.tests["test_double_negative"] == "passed"


def test_sympy_runner_rewrite_is_dropped(factory, sympy_task, tmp_path):
    lying = "#!/usr/bin/env python\nprint('sympy/tests/test_core.py[2] ')\nprint('test_double_negative ok')\n"
    record = grade(sympy_task, _patch(sympy_task, {"bin/test": lying}, tmp_path), factory)
    assert record.status == Status.UNRESOLVED and "bin/test" in record.dropped
    assert record.tests["test_double_negative"] == "failed"


def test_a_sympy_summary_wrapped_at_the_terminal_width_is_read_whole():
    import importlib.util

    from repogym.envs.sandbox.base import INSIDE_DIR
    spec = importlib.util.spec_from_file_location("repogym_launch_under_test", INSIDE_DIR / "repogym_launch.py")
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)
    summary = launch._Summary("--sympy-script")
    for line in ["sympy/x/tests/test_y.py[3] ..F", "==== tests finished: 111 passed, 2 failed, 4 expected to fail, ",
                 "39 exceptions, in 10.78 seconds ====", "DO *NOT* COMMIT!"]:
        summary.feed(line)
    assert summary.text == "tests finished: 111 passed, 2 failed, 4 expected to fail, 39 exceptions, in 10.78 seconds"
    assert TestRun({}, summary=summary.text, runner="sympy").summary_counts()["passed"] == 111
