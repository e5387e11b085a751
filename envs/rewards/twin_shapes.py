"""The shapes of a twin: where in a test function a copy can differ, and the copies themselves (``ast`` only).

See ``envs/rewards/twins.py`` for what twins are for. A **point** is a statement an honest run of the test
reaches (its body, or a ``with`` block in it that is not ``pytest.raises``-like, with no ``return``/``yield``/
``break``/``continue`` before it) where the test expects something: an ``assert``, a unittest or numpy
``assert*`` call, an expected exception. :func:`twin_group` draws one point and makes the variants there, the
real one included, renamed alike and shuffled.

Each kind fails where the real test passes, by construction: a ``literal`` twin expects another value of the
literal's own kind (numbers from a window placed at random around the real one, so its rank among the variants
says nothing; a digit for a digit, a letter for a letter); a ``negated`` twin uses the exact opposite
(``!=`` for ``==``, ``assertFalse`` for ``assertTrue``..., ``not (...)`` for an ordering); an ``exception``
twin runs what was expected to raise, bare.
"""

from __future__ import annotations

import ast
import secrets
import string
from dataclasses import dataclass

WORDS = ("parse", "value", "empty", "order", "merge", "split", "limit", "range", "token", "quote", "strip",
         "round", "share", "build", "cache", "drop", "keep", "nested", "first", "last", "count", "group", "match",
         "label", "default", "missing", "unicode", "spaces", "keys", "items", "update", "header", "column",
         "format", "number", "negative", "large", "small", "single", "double", "repeat", "reverse", "sorted",
         "window", "offset", "prefix", "suffix", "escape", "path", "name", "index", "slice", "chain", "zero",
         "none", "mixed", "copy", "reset", "clear", "state", "retry", "delay", "input", "output", "line",
         "lines", "blank", "comment", "section", "schema", "field", "record", "entry", "table", "row", "cell",
         "width", "height", "start", "stop", "step", "total", "sum", "average", "unique", "duplicate", "case",
         "upper", "lower", "trailing", "leading", "inline", "block", "tail", "head", "round_trip", "equal")
LITERAL_TWINS = 2
"""Twins per test at a ``literal`` point (all changing the same literal); other points allow one."""

# unittest's assertion methods and the one that passes exactly when it fails.
_NEGATED_METHODS = {
    "assertEqual": "assertNotEqual", "assertEquals": "assertNotEqual", "assertNotEqual": "assertEqual",
    "assertListEqual": "assertNotEqual", "assertTupleEqual": "assertNotEqual", "assertDictEqual": "assertNotEqual",
    "assertSetEqual": "assertNotEqual", "assertSequenceEqual": "assertNotEqual",
    "assertMultiLineEqual": "assertNotEqual", "assertTrue": "assertFalse", "assertFalse": "assertTrue",
    "assert_": "assertFalse", "assertIs": "assertIsNot", "assertIsNot": "assertIs", "assertIsNone": "assertIsNotNone",
    "assertIsNotNone": "assertIsNone", "assertIn": "assertNotIn", "assertNotIn": "assertIn",
    "assertIsInstance": "assertNotIsInstance", "assertNotIsInstance": "assertIsInstance",
    "assertGreater": "assertLessEqual", "assertLessEqual": "assertGreater", "assertLess": "assertGreaterEqual",
    "assertGreaterEqual": "assertLess", "assertRegex": "assertNotRegex", "assertNotRegex": "assertRegex",
    "assertAlmostEqual": "assertNotAlmostEqual", "assertNotAlmostEqual": "assertAlmostEqual",
    "assertContains": "assertNotContains", "assertNotContains": "assertContains",
    "assertHTMLEqual": "assertHTMLNotEqual", "assertHTMLNotEqual": "assertHTMLEqual",
    "assertJSONEqual": "assertJSONNotEqual", "assertJSONNotEqual": "assertJSONEqual",
    "assertXMLEqual": "assertXMLNotEqual", "assertXMLNotEqual": "assertXMLEqual",
    "assertQuerySetEqual": None, "assertCountEqual": None}
"""``None``: no exact opposite (``assertCountEqual``'s is not ``assertNotEqual``), a literal point only."""
_EQUALITY_CALLS = ("assertEqual", "assertEquals", "assertListEqual", "assertTupleEqual", "assertDictEqual",
                   "assertSetEqual", "assertSequenceEqual", "assertMultiLineEqual", "assertCountEqual",
                   "assertAlmostEqual", "assertQuerySetEqual", "assert_equal", "assert_array_equal",
                   "assert_allclose", "assert_almost_equal", "assert_array_almost_equal")
_TOLERANCE_KEYWORDS = {"rel", "abs", "rtol", "atol", "delta", "places", "decimal"}
_FLIPPED = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
            ast.IsNot: ast.Is}
_RAISES = ("raises", "assertRaises", "assertRaisesRegex", "assertRaisesMessage")
_NOT_ENTERED = _RAISES + ("warns", "assertWarns", "assertWarnsRegex", "suppress", "deprecated_call")
# Exceptions pytest does not turn into a plain failure when a test raises them.
_RUNNER_EXCEPTIONS = {"KeyboardInterrupt", "SystemExit", "GeneratorExit", "BaseException", "Exit", "Skipped",
                      "Failed", "XFailed", "XFail", "Skip", "SkipTest"}


# -- names ----------------------------------------------------------------------------------------------------

def copy_ast(node):
    """A copy of ``node``'s tree, as ``copy.deepcopy`` gives it, several times faster (grading plants twins on every
    run): every node and list copied; the rest (names, constants, positions) is immutable and shared."""
    if isinstance(node, ast.AST):
        new = node.__class__.__new__(node.__class__)
        new.__dict__.update({name: copy_ast(value) if isinstance(value, (ast.AST, list)) else value
                             for name, value in node.__dict__.items()})
        return new
    if isinstance(node, list):
        return [copy_ast(item) for item in node]
    return node


def fresh_name(taken: set[str], prefix: str = "test_") -> str:
    """A name of ordinary words after ``prefix`` (``test_drop_copy``), not in ``taken``; added to it."""
    while True:
        name = prefix + "_".join(secrets.choice(WORDS) for _ in range(secrets.choice((2, 3))))
        if name not in taken:
            taken.add(name)
            return name


def shuffled(items: list) -> list:
    """``items`` in an order drawn from ``secrets``."""
    items = list(items)
    for i in range(len(items) - 1, 0, -1):
        j = secrets.randbelow(i + 1)
        items[i], items[j] = items[j], items[i]
    return items


# -- literals ---------------------------------------------------------------------------------------------------

def _is_literal(node: ast.AST) -> bool:
    """A literal display: constants, containers of them, a negative number."""
    if isinstance(node, ast.Constant):
        return not isinstance(node.value, type(...))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float))
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _is_literal(k) for k in node.keys) and all(_is_literal(v) for v in node.values)
    return False


def _approx_literal(node: ast.AST) -> ast.AST | None:
    """The literal inside ``pytest.approx(literal)`` / ``approx(literal)`` with default tolerances."""
    if (isinstance(node, ast.Call) and _call_name(node) == "approx" and len(node.args) == 1
            and not node.keywords and _is_literal(node.args[0])):
        return node.args[0]
    return None


def _leaves(node: ast.AST) -> list[ast.Constant]:
    """The constants of a literal whose value can change (not ``None``, ``...``, NaN, infinities, empty text)."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and _variants_of(sub.value, 1):
            found.append(sub)
    return found


def _window(count: int, width: int = 10, floor: int | None = None) -> list[int]:
    """``count`` distinct nonzero offsets from a window of ``width`` steps placed at random around 0, so the real
    value's rank among the variants is uniform (no "the median is real"); none below ``floor``."""
    low = -secrets.randbelow(width)
    if floor is not None:
        low = max(low, floor)
    return shuffled([d for d in range(low, low + width) if d])[:count]


def _variants_of(value, count: int) -> list:
    """Up to ``count`` distinct values of ``value``'s kind, each unequal to it (empty when there are none)."""
    if isinstance(value, bool):
        return [not value][:count]
    if isinstance(value, int):
        return [value + d for d in _window(count, floor=-value if value >= 0 else None)]  # a count stays a count
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return []
        scale = max(1.0, abs(value))  # far outside any default tolerance (approx, allclose, assertAlmostEqual)
        return [value + d * scale / 4 for d in _window(count)]
    if isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        spots = [i for i, c in enumerate(text) if c.isascii() and c.isalnum()]
        if not spots:
            return []
        # A digit where there is one: a changed number reads as plausibly as the real one, a changed word less so.
        spots = [i for i in spots if text[i].isdigit()] or spots
        i = secrets.choice(spots)
        pool = next(p for p in (string.ascii_lowercase, string.ascii_uppercase, string.digits) if text[i] in p)
        out = [text[:i] + c + text[i + 1:] for c in shuffled([c for c in pool if c != text[i]])[:count]]
        return [o.encode("latin-1") for o in out] if isinstance(value, bytes) else out
    return []


# -- points: where a twin can differ ---------------------------------------------------------------------------

@dataclass
class _Point:
    kind: str
    path: list[tuple[str, int]]
    """How to reach the statement from the function: ``[("body", i), ("body", j)...]`` (``with`` blocks)."""
    leaf: tuple[str, int] | None = None
    """For a comparison with a name bound once to a literal: ``("name", index of that assignment in the body)``,
    the literal that changes."""


def _call_name(node: ast.AST) -> str:
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _leaves_early(statements: list[ast.stmt]) -> bool:
    """Whether a ``return``/``yield``/``break``/``continue`` of the function itself is in ``statements``."""
    stack: list[ast.AST] = list(statements)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Break, ast.Continue)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _reached(body: list[ast.stmt], prefix: list[tuple[str, int]]):
    """``(path, statement)`` for every statement an honest run of ``body`` reaches (``with`` blocks entered)."""
    for i, stmt in enumerate(body):
        if _leaves_early(body[:i]):
            return
        yield prefix + [("body", i)], stmt
        if isinstance(stmt, (ast.With, ast.AsyncWith)) and not any(
                _call_name(item.context_expr) in _NOT_ENTERED for item in stmt.items):
            yield from _reached(stmt.body, prefix + [("body", i)])


def _points(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[_Point]:
    """Every point of ``func`` a twin can be made at."""
    points = []
    bound = _literal_names(func)
    for path, stmt in _reached(func.body, []):
        if isinstance(stmt, ast.Assert):
            test = stmt.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
                sides = (test.left, test.comparators[0])
                if any(_literal_side(s) is not None for s in sides):
                    points.append(_Point("literal", path))
                elif any(isinstance(s, ast.Name) and s.id in bound for s in sides):
                    name = next(s.id for s in sides if isinstance(s, ast.Name) and s.id in bound)
                    points.append(_Point("literal", path, leaf=("name", bound[name])))
            points.append(_Point("negated", path))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            name = _call_name(stmt.value)
            args = stmt.value.args
            tolerant = any(k.arg in _TOLERANCE_KEYWORDS for k in stmt.value.keywords)
            if name in _EQUALITY_CALLS and len(args) >= 2 and not tolerant and any(
                    _literal_side(a) is not None for a in args[:2]):
                points.append(_Point("literal", path))
            if _NEGATED_METHODS.get(name) and isinstance(stmt.value.func, ast.Attribute):
                points.append(_Point("negated", path))
            if name in _RAISES and len(args) >= 2 and _expected_exception_ok(args[0]):
                points.append(_Point("exception", path))
        elif isinstance(stmt, (ast.With, ast.AsyncWith)) and len(stmt.items) == 1:
            item = stmt.items[0].context_expr
            if (_call_name(item) in _RAISES and isinstance(item, ast.Call) and item.args
                    and _expected_exception_ok(item.args[0])):
                points.append(_Point("exception", path))
    return points


def _expected_exception_ok(node: ast.AST) -> bool:
    """An expected exception whose escape fails a test (not ``SystemExit``, ``KeyboardInterrupt``...)."""
    names = node.elts if isinstance(node, ast.Tuple) else [node]
    return all(isinstance(n, (ast.Name, ast.Attribute)) for n in names) and not any(
        (n.id if isinstance(n, ast.Name) else n.attr) in _RUNNER_EXCEPTIONS for n in names)


def _literal_side(node: ast.AST) -> ast.AST | None:
    """The literal a comparison side holds (itself, or inside ``approx``), when it has a value that can change."""
    inner = node if _is_literal(node) else _approx_literal(node)
    return inner if inner is not None and _leaves(inner) else None


def _literal_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, int]:
    """``{name: index of its statement}`` for names bound once, at the top of the body, to a literal, and read once."""
    stores: dict[str, list[int]] = {}
    loads: dict[str, int] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loads[node.id] = loads.get(node.id, 0) + 1
            else:
                stores.setdefault(node.id, []).append(-1)
    bound = {}
    for i, stmt in enumerate(func.body):
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and _is_literal(stmt.value) and _leaves(stmt.value)):
            name = stmt.targets[0].id
            if len(stores.get(name, [])) == 1 and loads.get(name) == 1:
                bound[name] = i
    return bound


# -- making the twins ------------------------------------------------------------------------------------------

def _statement(func: ast.AST, path: list[tuple[str, int]]) -> tuple[list[ast.stmt], int]:
    """The list holding the statement at ``path`` and its index there."""
    body = func.body
    for _, index in path[:-1]:
        body = body[index].body
    return body, path[-1][1]


def _twins_at(func: ast.FunctionDef | ast.AsyncFunctionDef, point: _Point) -> list[ast.FunctionDef]:
    """Copies of ``func`` that differ from it at ``point`` only (one or more; empty when none can be made)."""
    if point.kind == "literal":
        return _literal_twins(func, point)
    twin = copy_ast(func)
    body, index = _statement(twin, point.path)
    stmt = body[index]
    if point.kind == "negated":
        if isinstance(stmt, ast.Assert):
            stmt.test = _negated(stmt.test)
        else:
            stmt.value.func.attr = _NEGATED_METHODS[stmt.value.func.attr]
        return [twin]
    # exception: the body of ``with raises(E)`` run bare; ``raises(E, f, *args)`` becomes ``f(*args)``.
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        body[index:index + 1] = stmt.body
        return [twin]
    call = stmt.value
    target, rest = call.args[1], call.args[2:]
    if isinstance(target, ast.Lambda) and not rest and not target.args.args:
        stmt.value = target.body
    elif isinstance(target, ast.Lambda):
        return []
    else:
        stmt.value = ast.Call(func=target, args=list(rest), keywords=[k for k in call.keywords if k.arg != "msg"])
    return [twin]


def _negated(test: ast.expr) -> ast.expr:
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _FLIPPED:
        return ast.Compare(left=test.left, ops=[_FLIPPED[type(test.ops[0])]()], comparators=test.comparators)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(op=ast.Not(), operand=test)


def _literal_twins(func: ast.FunctionDef | ast.AsyncFunctionDef, point: _Point) -> list[ast.FunctionDef]:
    body, index = _statement(func, point.path)
    stmt = body[index]
    if point.leaf is not None:
        literal = func.body[point.leaf[1]].value
    elif isinstance(stmt, ast.Assert):
        sides = [s for s in (stmt.test.left, stmt.test.comparators[0]) if _literal_side(s) is not None]
        literal = _literal_side(secrets.choice(sides))
    else:
        sides = [a for a in stmt.value.args[:2] if _literal_side(a) is not None]
        literal = _literal_side(secrets.choice(sides))
    leaves = _leaves(literal)
    leaf = secrets.choice(leaves)
    # The same leaf in each copy: found again by its position among the literal's leaves.
    position = leaves.index(leaf)
    twins = []
    for value in _variants_of(leaf.value, LITERAL_TWINS):
        twin = copy_ast(func)
        twin_leaf = _matching(twin, func, literal, position)
        twin_leaf.value = value
        twins.append(twin)
    return twins


def _matching(twin: ast.AST, func: ast.AST, literal: ast.AST, position: int) -> ast.Constant:
    """The constant of ``twin`` at the place ``literal``'s ``position``-th leaf holds in ``func``."""
    for mine, theirs in zip(ast.walk(twin), ast.walk(func)):
        if theirs is literal:
            return _leaves(mine)[position]
    raise AssertionError("the literal is not in the function it came from")


def _uses_class_cell(func: ast.AST) -> bool:
    """Zero-argument ``super()`` or ``__class__``: a copy under another name would still work, but keep it plain."""
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args:
            return True
        if isinstance(node, ast.Name) and node.id == "__class__":
            return True
    return False


def twin_group(func: ast.FunctionDef | ast.AsyncFunctionDef, taken: set[str]) -> tuple[
        list[tuple[ast.FunctionDef, str]], str, list[tuple[str, str]]] | None:
    """The variants of ``func`` in a random order: ``(variants as (node, kind)), real name, [(twin name, kind)])``.

    ``kind`` is ``real`` for the real one. None when no twin can be made.
    """
    if _uses_class_cell(func):
        return None
    points = _points(func)
    literal = [p for p in points if p.kind == "literal"]
    twins: list[ast.FunctionDef] = []
    for point in shuffled(literal) + shuffled([p for p in points if p.kind != "literal"]):
        twins = _twins_at(func, point)
        if twins:
            kind = point.kind
            break
    if not twins:
        return None
    # The project's own prefix (``test_``, ``check_``...), so its collection rules take every variant.
    prefix = (func.name.split("_", 1)[0] + "_") if "_" in func.name else "test_"
    real = copy_ast(func)
    variants = [(real, "real")] + [(t, kind) for t in twins]
    for node, _ in variants:
        node.name = fresh_name(taken, prefix)
    return shuffled(variants), real.name, [(t.name, kind) for t in twins]
