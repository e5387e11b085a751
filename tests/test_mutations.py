"""repogym.envs.taskgen.mutations: each operator on a small source with known sites, then sampling, combining, dedupe.

Each operator test lists every mutated source it must produce, written as a one-place edit of the
original, so a missing site, an extra site or a wrong replacement all fail. Every source also holds
look-alike code at module level, class level, in decorators, defaults or docstrings that must stay put.
"""

from __future__ import annotations

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.taskgen.mutations import (
    OPERATORS,
    Mutation,
    combine,
    dedupe,
    find_mutations,
    is_equivalent,
    parses_cleanly,
    sample_mutations,
)


def edit(source: str, old: str, new: str) -> str:
    """``source`` with the single occurrence of ``old`` replaced; the test is wrong if ``old`` is not unique."""
    assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times"
    return source.replace(old, new)


def outputs(source: str, operator: str, path: str = "pkg/mod.py") -> set[str]:
    muts = find_mutations(path, source.encode(), (operator,))
    for m in muts:
        assert m.operator == operator
        assert parses_cleanly(m.apply(source.encode()))
        assert m.line == source.encode()[:m.start_byte].count(b"\n") + 1
    texts = [m.apply(source.encode()).decode() for m in muts]
    assert len(texts) == len(set(texts)), "one operator produced the same output twice"
    return set(texts)


def test_flip_comparison():
    src = '''LIMIT = 3 if 1 < 2 else 4

class K:
    flag = 1 == 2

    def m(self, a, b):
        """a < b is documented here"""
        return a < b <= 3 and a is not None

@decorate(1 > 0)
def f(x, y=1 == 1):
    return x in y or x not in [1] or x != 2 or x is y
'''
    assert outputs(src, "flip_comparison") == {
        edit(src, "return a < b", "return a >= b"),
        edit(src, "b <= 3", "b > 3"),
        edit(src, "a is not None", "a is None"),
        edit(src, "x in y", "x not in y"),
        edit(src, "x not in [1]", "x in [1]"),
        edit(src, "x != 2", "x == 2"),
        edit(src, "x is y", "x is not y"),
    }


def test_off_by_one():
    src = '''N = 10
FIRST = [1, 2][0]

def f(items, n):
    if n > 2:
        return items[0]
    for i in range(1, n):
        items[i - 1] = items[-1]
    return items[2:n + 1]
'''
    assert outputs(src, "off_by_one") == {
        edit(src, "n > 2", "n > 3"),
        edit(src, "n > 2", "n > 1"),
        edit(src, "items[0]", "items[1]"),  # never items[-1]: that reads the other end
        edit(src, "range(1, n)", "range(2, n)"),
        edit(src, "range(1, n)", "range(0, n)"),
        edit(src, "items[i - 1]", "items[i]"),
        edit(src, "items[-1]", "items[0]"),
        edit(src, "items[-1]", "items[-2]"),
        edit(src, "items[2:", "items[3:"),
        edit(src, "items[2:", "items[1:"),
        edit(src, "n + 1]", "n]"),
    }


def test_swap_bool_op():
    src = '''FLAG = True and False

def f(a, b, c):
    """a and b"""
    return a and (b or c)
'''
    assert outputs(src, "swap_bool_op") == {
        edit(src, "a and (b", "a or (b"),
        edit(src, "b or c", "b and c"),
    }


def test_negate_condition():
    src = '''if DEBUG:
    pass

def f(a, b):
    if a < b:
        return 1
    elif not a:
        return 2
    while (a and b):
        a = b
    return 3 if a else 4
'''
    assert outputs(src, "negate_condition") == {
        edit(src, "if a < b:", "if not (a < b):"),
        edit(src, "elif not a:", "elif a:"),
        edit(src, "while (a and b):", "while not (a and b):"),
    }


def test_change_constant():
    src = '''RETRIES = 3

class K:
    ENABLED = True

def f(x):
    y = x * 60
    z = x < 5
    return [y, z, True, None, 0x10, "s", 1.5, 2j]
'''
    assert outputs(src, "change_constant") == {
        edit(src, "x * 60", "x * 61"),
        edit(src, "z, True", "z, False"),
        edit(src, "0x10", "0x11"),  # same base, so a mask still reads as one
    }


def test_drop_statement():
    src = '''total = 0

class K:
    a = 1
    b = 2

def f(xs):
    """Sum."""
    total = 0
    for x in xs:
        total += x
    log(total)
    ...
    return total

def g(x):
    x.append(1)
'''
    assert outputs(src, "drop_statement") == {
        edit(src, "    total = 0\n", "    pass\n"),
        edit(src, "log(total)", "pass"),
    }


def test_drop_early_return():
    src = '''def f(x):
    if x is None:
        return 0
    if x < 0:
        raise ValueError(x)
    if x > 10:
        x = 10
    if x == 5:
        return 5
    else:
        x += 1
    if x == 7:
        return 7
'''
    assert outputs(src, "drop_early_return") == {
        edit(src, "if x is None:\n        return 0", "pass"),
        edit(src, "if x < 0:\n        raise ValueError(x)", "pass"),
    }


def test_swap_arguments():
    src = '''g(1, 2)

@deco(1, 2)
def f(a, b):
    g(a, b, 3)
    g(a, a)
    g(a)
    g(a, key=b)
    g(*a, b)
    return max(a + 1, b)
'''
    assert outputs(src, "swap_arguments") == {
        edit(src, "g(a, b, 3)", "g(b, a, 3)"),
        edit(src, "max(a + 1, b)", "max(b, a + 1)"),
    }


def test_return_wrong_variable():
    src = '''def f(self, a, b=2):
    c = a + b
    return c

def g(x):
    return x

def h(x):
    return GLOBAL

class K:
    def m(self, value):
        result = [v for v in value]
        return result

def outer(p):
    def inner(q):
        r = q
        return r
    return inner
'''
    assert outputs(src, "return_wrong_variable") == {
        edit(src, "return c", "return a"),  # the receiver is never the wrong variable
        edit(src, "return GLOBAL", "return x"),
        edit(src, "return result", "return value"),  # `v` is the comprehension's, not m's
        edit(src, "return r\n", "return q\n"),
        edit(src, "return inner", "return p"),
    }
    functions = {m.replacement: m.function for m in find_mutations("pkg/mod.py", src.encode())
                 if m.operator == "return_wrong_variable"}
    assert functions == {"a": "pkg.mod.f", "x": "pkg.mod.h", "value": "pkg.mod.K.m",
                         "q": "pkg.mod.outer.inner", "p": "pkg.mod.outer"}


def test_function_names_source_order_and_determinism():
    src = b"def f(a, b):\n    c = a < b\n    return c\n"
    muts = find_mutations("pkg/__init__.py", src)
    assert {m.function for m in muts} == {"pkg.f"}
    assert [m.start_byte for m in muts] == sorted(m.start_byte for m in muts)
    assert muts == find_mutations("pkg/__init__.py", src)
    # Under a source root the index names the module (src/pkg is imported as pkg): the generator passes its name.
    from repogym.envs.analysis import RepoIndex

    index = RepoIndex.from_files({"src/pkg/__init__.py": src})
    assert {m.function for m in find_mutations("src/pkg/__init__.py", src, module=index.module_of("src/pkg/__init__.py"))} \
        == {"pkg.f"} and "pkg.f" in index.symbols
    assert [(m.operator, m.replacement) for m in muts] == [
        ("drop_statement", "pass"), ("flip_comparison", ">="), ("return_wrong_variable", "a")]


def test_nothing_outside_function_bodies():
    src = b'''"""Module doc with x < 1."""
import os
X = [1, 2][0] if os.sep == "/" and True else f(1, 2)
if X:
    X = 1
    Y = 2

@decorator(1 < 2, True)
def f(a: Annotated[int, 1] = 3 > 2) -> Literal[0]:
    """Docstring: a < 1 and b or c."""

class K(Base, metaclass=M):
    z = 1 < 2
    if z:
        z = 0
        w = f(1, 2)
'''
    assert find_mutations("pkg/mod.py", src) == []


def test_every_mutation_parses_and_broken_files_give_nothing():
    src = b'''def f(xs, n):
    if not xs:
        raise ValueError(n)
    out = [True]
    for i in range(0, n):
        if xs[i] > 0 and not xs[i - 1]:
            out.append(xs[i] + 1)
        elif i == 3:
            return None
        out.append(min(i, n))
    return out
'''
    muts = find_mutations("m.py", src)
    assert {m.operator for m in muts} == set(OPERATORS)
    assert all(parses_cleanly(m.apply(src)) for m in muts)
    assert find_mutations("m.py", b"def f(:\n    return a < b\n") == []
    assert not parses_cleanly(b"x = (1\n")
    with pytest.raises(ConfigError, match="unknown mutation operator 'nope': expected one of flip_comparison, "):
        find_mutations("m.py", src, ("flip_comparison", "nope"))


def _many_functions(count: int) -> bytes:
    return "".join(
        f"def f{i}(a, b):\n"
        f"    c = g(a, b)\n"
        f"    if a < {i}:\n"
        f"        return c\n"
        f"    return a and b[{i}]\n\n"
        for i in range(count)).encode()


def test_sample_mutations_deterministic_and_spread():
    cands = find_mutations("pkg/mod.py", _many_functions(30))
    assert len(cands) > 100
    first = sample_mutations(cands, 10, seed=1)
    assert first == sample_mutations(cands, 10, seed=1)
    assert first != sample_mutations(cands, 10, seed=2)
    assert len(first) == 10
    assert len({m.function for m in first}) == 10  # spread over functions first
    operators = {m.operator for m in cands}
    by_round = sample_mutations(cands, len(operators), seed=3)
    assert {m.operator for m in by_round} == operators  # one of each operator before any repeats
    everything = sample_mutations(cands, 10_000, seed=4)
    for a in everything:  # never overlapping, so the sample can be combined
        assert not any(b is not a and a.start_byte < b.end_byte and b.start_byte < a.end_byte for b in everything)
    assert combine({"pkg/mod.py": _many_functions(30)}, everything)
    assert sample_mutations(cands, 0, seed=1) == []
    with pytest.raises(ValueError, match="non-negative"):
        sample_mutations(cands, -1, seed=1)


def test_combine_two_files_and_overlap():
    sources = {"a.py": b"def f(x):\n    if x < 1:\n        return x and y\n",
               "b.py": b"def g(p, q):\n    return h(p, q)\n",
               "c.py": b"untouched = 1\n"}
    in_a = find_mutations("a.py", sources["a.py"])
    flip = next(m for m in in_a if m.operator == "flip_comparison")
    swap_op = next(m for m in in_a if m.operator == "swap_bool_op")
    swap_args = next(m for m in find_mutations("b.py", sources["b.py"]) if m.operator == "swap_arguments")
    out = combine(sources, [swap_args, swap_op, flip])
    assert out == {"a.py": b"def f(x):\n    if x >= 1:\n        return x or y\n",
                   "b.py": b"def g(p, q):\n    return h(q, p)\n",
                   "c.py": b"untouched = 1\n"}
    assert sources["a.py"].startswith(b"def f(x):\n    if x < 1")  # inputs are not changed in place
    negate = next(m for m in in_a if m.operator == "negate_condition")
    with pytest.raises(ValueError, match="overlapping"):
        combine(sources, [flip, negate])
    with pytest.raises(ValueError, match="among the given files"):
        combine({"b.py": sources["b.py"]}, [flip])


def test_dedupe_same_edit_and_same_resulting_function():
    src = b"def f(x):\n    return x + 1 + 1\n\ndef g(x):\n    return x + 1\n"
    drops = [m for m in find_mutations("m.py", src, ("off_by_one",))]
    # Dropping the outer `+ 1` or the inner one both leave `return x + 1` in f.
    assert [(m.function, m.replacement) for m in drops] == [("m.f", "x + 1"), ("m.f", "x"), ("m.g", "x")]
    assert is_equivalent(drops[0], drops[1])
    assert not is_equivalent(drops[1], drops[2])
    assert dedupe(drops) == [drops[0], drops[2]]
    by_hand = Mutation("flip_comparison", "m.py", "m.f", 5, 6, ">=", 1, "one")
    same_edit = Mutation("negate_condition", "m.py", "m.f", 5, 6, ">=", 1, "other")
    other_file = Mutation("flip_comparison", "n.py", "n.f", 5, 6, ">=", 1, "one")
    assert is_equivalent(by_hand, same_edit) and not is_equivalent(by_hand, other_file)
    assert dedupe([by_hand, same_edit, other_file]) == [by_hand, other_file]


def test_apply_checks_the_span():
    m = Mutation("change_constant", "m.py", "m.f", 4, 40, "2", 1, "too far")
    with pytest.raises(ValueError, match="expected a span"):
        m.apply(b"x = 1\n")
