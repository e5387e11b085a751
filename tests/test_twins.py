"""Twin tests (``envs/rewards/twins.py``): for every assertion shape real suites use, the twins fail honest code,
pass forged code, and cannot be told apart from the real test by name, order, decorators or globals.

Each shape is a small test file run for real by pytest (one subprocess for all of them) against an honest
``calc`` module and against one returning always-equal objects.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from repogym.envs.rewards.guards import check_run, tripped
from repogym.envs.rewards.twin_shapes import twin_group
from repogym.envs.rewards.twins import Twin, TwinPlan, twin_source
from repogym.envs.sandbox.testrun import TestRun

HONEST = '''\
def clamp(x, low, high):
    if not isinstance(x, (int, float)):
        raise TypeError("x must be a number")
    return max(low, min(x, high))


def name(n):
    return "item-%d" % n


def pair(n):
    return [n, n + 1]


def table():
    return {"a": 1, "b": [2.5, -3]}
'''

ALWAYS_EQUAL = '''\
class Anything(float):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = float.__hash__


def clamp(x, low, high):
    return Anything(0)


name = pair = table = lambda *args: Anything(0)
'''

SHAPES = {
    # shape: (test file body, test id within it, twin kinds it may get, caught when always-equal)
    "eq_int": ("def test_x():\n    assert clamp(15, 0, 10) == 10\n", "test_x", {"literal", "negated"}),
    "eq_left_literal": ("def test_x():\n    assert 10 == clamp(15, 0, 10), 'high end'\n", "test_x",
                        {"literal", "negated"}),
    "eq_str": ("def test_x():\n    assert name(7) == 'item-7'\n", "test_x", {"literal", "negated"}),
    "eq_list": ("def test_x():\n    assert pair(3) == [3, 4]\n", "test_x", {"literal", "negated"}),
    "eq_dict": ("def test_x():\n    assert table() == {'a': 1, 'b': [2.5, -3]}\n", "test_x", {"literal", "negated"}),
    "eq_bound_name": ("def test_x():\n    expected = 'item-4'\n    got = name(4)\n    assert got == expected\n",
                      "test_x", {"literal", "negated"}),
    "eq_approx": ("import pytest\n\n\ndef test_x():\n    assert clamp(2.5, 0, 10) == pytest.approx(2.5)\n", "test_x",
                  {"literal", "negated"}),
    "eq_computed": ("def test_x():\n    assert clamp(15, 0, 10) == clamp(10, 0, 20)\n", "test_x", {"negated"}),
    "ne": ("def test_x():\n    assert clamp(15, 0, 10) != 15\n", "test_x", {"negated"}),
    "lt": ("def test_x():\n    assert clamp(15, 0, 10) < 11\n", "test_x", {"negated"}),
    "chained": ("def test_x():\n    assert 0 <= clamp(15, 0, 10) <= 10\n", "test_x", {"negated"}),
    "in": ("def test_x():\n    assert 3 in pair(3)\n", "test_x", {"negated"}),
    "is_none": ("def test_x():\n    assert table().get('z') is None\n", "test_x", {"negated"}),
    "truth": ("def test_x():\n    assert pair(1)\n", "test_x", {"negated"}),
    "not": ("def test_x():\n    assert not table().get('z')\n", "test_x", {"negated"}),
    "call_truth": ("def test_x():\n    assert isinstance(clamp(1, 0, 2), int)\n", "test_x", {"negated"}),
    "raises_with": ("import pytest\n\n\ndef test_x():\n    with pytest.raises(TypeError, match='number'):\n"
                    "        clamp('a', 0, 1)\n", "test_x", {"exception"}),
    "raises_call": ("import pytest\n\n\ndef test_x():\n    pytest.raises(TypeError, clamp, 'a', 0, 1)\n", "test_x",
                    {"exception"}),
    "sympy_raises": ("def raises(exc, code):\n    try:\n        code()\n    except exc:\n        return\n"
                     "    raise AssertionError('DID NOT RAISE')\n\n\ndef test_x():\n"
                     "    raises(TypeError, lambda: clamp('a', 0, 1))\n", "test_x", {"exception"}),
    "parametrize": ("import pytest\n\n\n@pytest.mark.parametrize('x, want', [(15, 10), (-3, 0)])\n"
                    "def test_x(x, want):\n    assert clamp(x, 0, 10) == want\n", "test_x[15-10]", {"negated"}),
    "with_block": ("import contextlib\n\n\ndef test_x():\n    with contextlib.nullcontext():\n"
                   "        assert clamp(15, 0, 10) == 10\n", "test_x", {"literal", "negated"}),
    "unittest_equal": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                       "        self.assertEqual(clamp(15, 0, 10), 10)\n", "T::test_x", {"literal", "negated"}),
    "unittest_equal_computed": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                                "        self.assertEqual(clamp(15, 0, 10), clamp(10, 0, 10))\n", "T::test_x",
                                {"negated"}),
    "unittest_true": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                      "        self.assertTrue(pair(2))\n", "T::test_x", {"negated"}),
    "unittest_in": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                    "        self.assertIn(3, pair(2))\n", "T::test_x", {"negated"}),
    "unittest_is_none": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                         "        self.assertIsNone(table().get('z'))\n", "T::test_x", {"negated"}),
    "unittest_greater": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                         "        self.assertGreater(clamp(15, 0, 10), 9)\n", "T::test_x", {"negated"}),
    "unittest_almost": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                        "        self.assertAlmostEqual(clamp(2.5, 0, 10), 2.5)\n", "T::test_x",
                        {"literal", "negated"}),
    "unittest_raises": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                        "        with self.assertRaises(TypeError):\n            clamp('a', 0, 1)\n", "T::test_x",
                        {"exception"}),
    "unittest_count_equal": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
                             "        self.assertCountEqual(pair(3), [4, 3])\n", "T::test_x", {"literal"}),
}


def _plant(folder: Path, calc: str) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Every shape's file with its variants planted, beside ``calc.py``; ``{shape: (real id, [(twin id, kind)])}``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "calc.py").write_text(calc)
    planted = {}
    for shape, (body, test_id, _) in SHAPES.items():
        path = f"test_{shape}.py"
        source = "from calc import clamp, name, pair, table\n\n\n" + body
        new, made = twin_source(source, [f"{path}::{test_id}"])
        assert made, f"{shape}: no twin made"
        (folder / path).write_text(new)
        _, real, twins = made[f"{path}::{test_id}"]
        planted[shape] = (f"{path}::{real}", [(f"{path}::{name}", kind) for name, kind in twins])
    return planted


def _outcomes(folder: Path) -> dict[str, str]:
    """``{test id: PASSED | FAILED}`` of a real pytest run in ``folder``."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--rootdir", str(folder), str(folder)], cwd=folder, capture_output=True, text=True)
    found = dict((m.group(2), m.group(1)) for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\S+)", proc.stdout, re.M))
    assert found, proc.stdout[-3000:]
    return found


def _runs(outcomes: dict[str, str], test_id: str) -> dict[str, str]:
    return {t[len(test_id):]: o for t, o in outcomes.items() if t == test_id or t.startswith(test_id + "[")}


@pytest.fixture(scope="module")
def honest_and_forged(tmp_path_factory):
    root = tmp_path_factory.mktemp("twins")
    planted = {label: _plant(root / label, calc) for label, calc in (("honest", HONEST), ("forged", ALWAYS_EQUAL))}
    return planted, {label: _outcomes(root / label) for label in planted}


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_gets_twins_that_fail_honest_code(honest_and_forged, shape):
    planted, outcomes = honest_and_forged
    real, twins = planted["honest"][shape]
    assert set(_runs(outcomes["honest"], real).values()) == {"PASSED"}, (shape, outcomes["honest"])
    assert {kind for _, kind in twins} <= SHAPES[shape][2] and twins
    for twin, kind in twins:
        runs = _runs(outcomes["honest"], twin)
        assert runs and set(runs.values()) == {"FAILED"}, (shape, kind, runs)


# assertCountEqual iterates what it compares: an always-equal scalar does not fool the real test either.
@pytest.mark.parametrize("shape", [s for s, (_, _, kinds) in SHAPES.items()
                                   if "literal" in kinds and s != "unittest_count_equal"])
def test_literal_twins_pass_an_always_equal_object(honest_and_forged, shape):
    planted, outcomes = honest_and_forged
    real, twins = planted["forged"][shape]
    assert set(_runs(outcomes["forged"], real).values()) == {"PASSED"}  # the forgery works on the real test...
    literal = [t for t, kind in twins if kind == "literal"]
    if literal:  # ...and on its literal twins, which gives it away
        assert all(set(_runs(outcomes["forged"], t).values()) == {"PASSED"} for t in literal)
    else:  # a negated twin was drawn this time: it fails, as it does for honest code
        assert all(set(_runs(outcomes["forged"], t).values()) == {"FAILED"} for t, _ in twins)


SUITE = '''\
import pytest
from calc import clamp


def helper():
    return 1


def test_clamp_above():
    # the real test's comment
    assert clamp(15, 0, 10) == 10
    assert clamp(-1, 0, 10) == 0, "low end"


class TestClamp:
    """Docstring."""

    @pytest.mark.parametrize("x", [15, 20])
    def test_high(self, x):
        value = clamp(x, 0, 10)
        assert value == 10

    def test_other(self):
        assert helper() == 1


def test_leaves_early():
    if clamp(1, 0, 10) == 1:
        return
    assert clamp(15, 0, 10) == 10


def test_uses_super_like_cell():
    assert __class__ is None


def test_shared(check=clamp):
    assert check(1, 0, 2) == 1


def test_calls_another_test():
    test_shared(check=lambda x, low, high: x)


def test_after():
    assert helper() == 1
'''


def _functions(source: str) -> dict[str, ast.FunctionDef]:
    return {f"{owner}{n.name}": n for owner, body in [("", ast.parse(source).body)] + [
        (f"{c.name}::", c.body) for c in ast.parse(source).body if isinstance(c, ast.ClassDef)]
        for n in body if isinstance(n, ast.FunctionDef)}


def test_variants_differ_only_at_one_point_and_look_alike():
    new, made = twin_source(SUITE, ["t.py::test_clamp_above", "t.py::TestClamp::test_high[15]"])
    functions = _functions(new)
    for test_id, (old, real, twins) in made.items():
        assert old == test_id.split("::")[-1].split("[")[0]
        names = [real] + [name for name, _ in twins]
        assert len(set(names)) == len(names) >= 2
        for name in names:
            short = name.split("::")[-1]
            assert short.startswith("test_") and short.replace("_", "").isalpha(), short
            assert name not in ("test_clamp_above", "TestClamp::test_high")
        texts = [ast.unparse(functions[n]).replace(n.split("::")[-1], "NAME") for n in names]
        # The same decorators, arguments and statements: one constant or operator differs, nothing else.
        assert len({len(t.splitlines()) for t in texts}) == 1
        assert all(sum(a != b for a, b in zip(texts[0].splitlines(), t.splitlines())) == 1 for t in texts[1:])
        assert "# the real test's comment" not in new  # every variant is rendered alike, the real one too
    assert "parametrize" in ast.unparse(functions[made["t.py::TestClamp::test_high[15]"][1]].decorator_list[0])
    # The rest of the file is untouched, in order, and the variants stand where the test stood.
    assert new.index("def helper") < new.index("class TestClamp") < new.index("def test_leaves_early")
    assert "def test_after():\n    assert helper() == 1\n" in new and "def test_other(self)" in new


def test_names_and_order_change_every_grading():
    first = twin_source(SUITE, ["t.py::test_clamp_above"])[1]["t.py::test_clamp_above"]
    second = twin_source(SUITE, ["t.py::test_clamp_above"])[1]["t.py::test_clamp_above"]
    assert {first[1], *(n for n, _ in first[2])} != {second[1], *(n for n, _ in second[2])}
    positions = set()
    for _ in range(40):
        new, made = twin_source(SUITE, ["t.py::test_clamp_above"])
        _, real, twins = made["t.py::test_clamp_above"]
        order = sorted([real] + [n for n, _ in twins], key=new.index)
        positions.add(order.index(real))
    assert positions == set(range(len(order)))  # the real test is not always first (or last)


def test_no_twin_where_an_honest_run_might_not_reach_the_point():
    # test_shared is called by another test: renamed, that test would break (toolz's test_is_valid).
    new, made = twin_source(SUITE, ["t.py::test_leaves_early", "t.py::test_uses_super_like_cell", "t.py::test_nowhere",
                                    "t.py::test_shared"])
    assert made == {} and new == SUITE  # left as they are, by their own names
    assert twin_source("def broken(:\n", ["t.py::test_x"]) is None
    func = ast.parse("def test_x():\n    helper()\n").body[0]
    assert twin_group(func, set()) is None  # nothing it expects: nothing to turn around


def test_literal_twins_change_one_literal_to_distinct_values_of_its_kind():
    func = ast.parse("def test_x():\n    assert count() == 0\n    assert label() == 'ab7'\n").body[0]
    seen = set()
    for _ in range(30):
        variants, real, twins = twin_group(func, set())
        kinds = {kind for _, kind in twins}
        if kinds != {"literal"}:
            continue
        constants = [sorted(repr(n.value) for n in ast.walk(v) if isinstance(n, ast.Constant)) for v, _ in variants]
        assert len({tuple(c) for c in constants}) == len(variants)  # every variant expects something else
        for node, _ in variants:
            for const in ast.walk(node):
                if isinstance(const, ast.Constant) and isinstance(const.value, int):
                    assert const.value >= 0  # a count stays a count
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    assert re.fullmatch(r"ab\d", const.value)  # a digit is changed for a digit
                    seen.add(const.value)
    assert len(seen) > 2


def test_the_twin_guard_judges_a_twin_run_only_where_its_real_run_passed():
    plan = TwinPlan("pytest", [Twin("t.py::test_b", "t.py", "test_b", "test_a", "negated")],
                    {("t.py", "test_a"): "test_orig"})
    honest = TestRun({"t.py::test_a[1]": "passed", "t.py::test_a[2]": "failed", "t.py::test_b[1]": "failed",
                      "t.py::test_b[2]": "passed"}, exit_status=1, launched=True, finish_status=1,
                     summary="2 failed, 2 passed in 0.1s", reported_passes=2)
    assert check_run(honest, plan)["twin"] == "ok"  # [2]: the real failed too, so the twin's pass says nothing
    forced = TestRun({**honest.outcomes, "t.py::test_a[2]": "passed", "t.py::test_b[1]": "passed"}, exit_status=0)
    assert "test_b[1] (negated) must fail but passed" in check_run(forced, plan)["twin"]
    missing = TestRun({"t.py::test_a[1]": "passed"}, exit_status=1)
    assert "missing" in tripped(check_run(missing, plan))["twin"]
    assert plan.restore(honest.outcomes) == {"t.py::test_orig[1]": "passed", "t.py::test_orig[2]": "failed"}
    # A record forged under the old name never outvotes the real test's own run.
    forged = {"t.py::test_orig[1]": "passed", "t.py::test_a[1]": "failed"}
    assert plan.restore(forged) == {"t.py::test_orig[1]": "failed"}
    must_fail = TwinPlan("pytest", [Twin("t.py::test_m", "t.py", "test_m", None, "must_fail")])
    assert "must fail" in check_run(TestRun({"t.py::test_m": "passed"}, exit_status=1), must_fail)["twin"]


INHERITED = '''\
import unittest


class Base:
    def test_keymap(self):
        assert self.kind(3) == 4


class TestList(Base, unittest.TestCase):
    def kind(self, x):
        return x + 1


class TestOwn(Base, unittest.TestCase):
    def kind(self, x):
        return x + 1

    def test_keymap(self):
        assert self.kind(1) == 2
'''


@pytest.mark.slow
def test_a_method_inherited_from_a_class_of_the_file_is_twinned_where_it_is_defined(tmp_path):
    # toolz's TestCustomMapping::test_valmap is TestDict's test_valmap, run by each subclass.
    new, made = twin_source(INHERITED, ["test_inh.py::TestList::test_keymap", "test_inh.py::Base::test_keymap"])
    old, real, twins = made["test_inh.py::TestList::test_keymap"]
    assert old == "test_keymap" and real.startswith("Base::") and made["test_inh.py::Base::test_keymap"][1] == real
    (tmp_path / "test_inh.py").write_text(new)
    outcomes = _outcomes(tmp_path)
    plan = TwinPlan("pytest", [Twin(f"test_inh.py::{n}", "test_inh.py", n.split("::")[-1], real.split("::")[-1], k) for n, k in twins],
                    {("test_inh.py", real.split("::")[-1]): old})
    # Each subclass runs the real test and its twins under their new names; mapped back, it is each class's test.
    assert plan.restore(outcomes) == {"test_inh.py::TestList::test_keymap": "PASSED", "test_inh.py::TestOwn::test_keymap": "PASSED"}
    assert {test_id.split("::")[1] for _, test_id, _, _ in plan.twin_runs(outcomes)} == {"TestList", "TestOwn"}
    assert all(outcome == "FAILED" and real == "PASSED" for _, _, outcome, real in plan.twin_runs(outcomes))


@pytest.mark.parametrize("method, opposite", [("assertContains", "assertNotContains"),
                                              ("assertHTMLEqual", "assertHTMLNotEqual"),
                                              ("assertJSONEqual", "assertJSONNotEqual"),
                                              ("assertQuerySetEqual", None)])
def test_djangos_assertions_turn_into_their_exact_opposite(method, opposite):
    # Django's TestCase methods (no Django here to run them): reversed where Django has the opposite, else no twin.
    func = ast.parse(f"def test_x(self):\n    self.{method}(response(), page())\n").body[0]
    group = twin_group(func, set())
    if opposite is None:
        assert group is None
        return
    variants, real, twins = group
    bodies = {ast.unparse(node.body[0]) for node, _ in variants}
    assert bodies == {f"self.{method}(response(), page())", f"self.{opposite}(response(), page())"}
    assert [kind for _, kind in twins] == ["negated"]
