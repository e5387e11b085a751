"""Mutation operators for bug synthesis: find, sample, combine and dedupe single-span source edits.

A ``Mutation`` replaces one byte span of one file with new text. ``find_mutations`` lists every
candidate the operators in ``OPERATORS`` see in a file, in source order.

Guaranteed: candidates lie inside function bodies only (never module or class level, decorators,
annotations or docstrings); each one, applied alone, leaves the file free of tree-sitter
ERROR/MISSING nodes; the same bytes always give the same list; a file that does not parse cleanly
to begin with gives no candidates.
Not guaranteed: that a mutation changes behaviour (``x[0:n]`` -> ``x[1:n]`` on an empty list does
not), that CPython compiles what tree-sitter accepts, or that several mutations applied together
still parse (``combine`` only rules out overlapping spans).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Callable, Iterator

from tree_sitter import Node, Query, QueryCursor

from repogym.envs.analysis.extract import PY_LANGUAGE, STORE_PATTERNS, module_name, parse_source
from repogym.envs.core.registry import Registry


@dataclass(frozen=True)
class Mutation:
    """One candidate bug: replace ``source[start_byte:end_byte]`` of ``file`` with ``replacement``."""

    operator: str
    file: str  # repo-relative posix path
    function: str  # qualified name of the enclosing def, e.g. ``pkg.mod.Class.method``
    start_byte: int
    end_byte: int
    replacement: str
    line: int  # 1-based line of ``start_byte``
    description: str  # for logs only, never shown to agents: it gives the bug away
    # Digest of the enclosing function's text after this mutation, whitespace-normalised, so that
    # ``dedupe`` can see two different edits that leave the same function. Empty when built by hand.
    function_digest: str = field(default="", compare=False, repr=False)

    def apply(self, source: bytes) -> bytes:
        """``source`` with this mutation's span replaced."""
        if not 0 <= self.start_byte <= self.end_byte <= len(source):
            raise ValueError(f"expected a span inside {len(source)} bytes of {self.file}, "
                             f"got {self.start_byte}..{self.end_byte}")
        return source[:self.start_byte] + self.replacement.encode() + source[self.end_byte:]


# One query pass collects every node any operator looks at; Python then visits only those.
_QUERY = Query(PY_LANGUAGE, """
(comparison_operator) @comparison
(boolean_operator) @boolean
(if_statement condition: (_) @condition)
(elif_clause condition: (_) @condition)
(while_statement condition: (_) @condition)
(integer) @integer
(true) @truth
(false) @truth
(binary_operator) @binary
(expression_statement) @statement
(if_statement) @if
(call arguments: (argument_list) @arguments)
(return_statement) @return
""" + STORE_PATTERNS + """
(for_statement left: (tuple_pattern (identifier) @store))
(as_pattern alias: (as_pattern_target (identifier) @store))
(named_expression name: (identifier) @store)
""")

_FLIPPED = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "==",
            "in": "not in", "not in": "in", "is": "is not", "is not": "is"}
_SCOPES = {"function_definition", "class_definition", "lambda", "list_comprehension",
           "set_comprehension", "dictionary_comprehension", "generator_expression"}
_NOT_POSITIONAL = {"keyword_argument", "list_splat", "dictionary_splat", "parenthesized_list_splat"}
# Returning the receiver instead of a result would be the first choice in nearly every method and
# makes a dull, samey bug, so the conventional receiver names are never the "other" variable.
_RECEIVERS = {"self", "cls"}
_SPACE = re.compile(r"\s+")


def parses_cleanly(source: bytes) -> bool:
    """True when tree-sitter finds no ERROR or MISSING node in ``source``."""
    return not parse_source(source).root_node.has_error


def _statements(block: Node) -> list[Node]:
    return [c for c in block.named_children if c.type != "comment"]


def _is_inert(statement: Node) -> bool:
    """A bare string (docstring or not) or ``...``: dropping it changes nothing."""
    kids = statement.named_children
    return len(kids) == 1 and kids[0].type in ("string", "concatenated_string", "ellipsis")


class _File:
    """One parsed file plus the per-def facts (owner, qualified name, locals) the operators share."""

    def __init__(self, path: str, source: bytes, module: str | None = None):
        self.path = path
        self.source = source
        self.module = module_name(path) if module is None else module
        self._owner: dict[int, Node | None] = {}
        self._locals: dict[int, list[str]] = {}

    def text(self, node: Node) -> str:
        return self.source[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def owner(self, node: Node) -> Node | None:
        """The def whose body holds ``node``, or None for module/class level, decorators, annotations
        and docstrings. Defaults of a nested def are evaluated by the outer def, so they belong to it."""
        key = node.id
        if key not in self._owner:
            self._owner[key] = self._find_owner(node)
        return self._owner[key]

    def _find_owner(self, node: Node) -> Node | None:
        child, parent = node, node.parent
        while parent is not None:
            if parent.type in ("decorator", "type"):
                return None
            if parent.type in ("function_definition", "class_definition"):
                body = parent.child_by_field_name("body")
                if body is not None and child.start_byte >= body.start_byte:
                    if parent.type == "class_definition":
                        return None
                    first = _statements(body)[:1]
                    if first and first[0].type == "expression_statement" and _is_inert(first[0]) \
                            and first[0].start_byte <= node.start_byte < first[0].end_byte:
                        return None  # inside the docstring
                    return parent
            child, parent = parent, parent.parent
        return None

    def qualified_name(self, definition: Node) -> str:
        names = []
        node: Node | None = definition
        while node is not None:
            if node.type in ("function_definition", "class_definition"):
                name = node.child_by_field_name("name")
                names.append(self.text(name) if name is not None else "?")
            node = node.parent
        return ".".join([self.module, *reversed(names)] if self.module else reversed(names))

    def nearest_scope(self, node: Node) -> Node | None:
        parent = node.parent
        while parent is not None and parent.type not in _SCOPES:
            parent = parent.parent
        return parent

    def add_store(self, definition: Node, name: str) -> None:
        names = self.locals_of(definition)
        if name not in names:
            names.append(name)

    def locals_of(self, definition: Node) -> list[str]:
        """Parameters, then names stored in the body, in order of first appearance (receivers left out)."""
        if definition.id not in self._locals:
            names = []
            params = definition.child_by_field_name("parameters")
            for param in params.named_children if params is not None else ():
                name = self._param_name(param)
                if name and name not in _RECEIVERS and name not in names:
                    names.append(name)
            self._locals[definition.id] = names
        return self._locals[definition.id]

    def _param_name(self, param: Node) -> str | None:
        if param.type == "identifier":
            return self.text(param)
        if param.type in ("default_parameter", "typed_default_parameter"):
            name = param.child_by_field_name("name")
            return self.text(name) if name is not None and name.type == "identifier" else None
        if param.type in ("typed_parameter", "list_splat_pattern", "dictionary_splat_pattern"):
            inner = param.named_children[0] if param.named_children else None
            return self._param_name(inner) if inner is not None else None
        return None


# --- operators: each takes one captured node and yields (start, end, replacement, description) ---

def _flip_comparison(f: _File, node: Node):
    for op in node.children_by_field_name("operators"):
        text = " ".join(f.text(op).split())  # `not  in` spelled with odd spacing is still `not in`
        if text in _FLIPPED:
            yield op.start_byte, op.end_byte, _FLIPPED[text], f"flip `{text}` to `{_FLIPPED[text]}`"


def _integer_value(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:  # imaginary literals (`1j`) and old-style octals (`017`)
        return None


def _render(value: int, like: str) -> str:
    """``value`` in the base ``like`` was written in, so a mask stays recognisably a mask."""
    prefix = like[:2].lower()
    base = {"0x": "x", "0o": "o", "0b": "b"}.get(prefix)
    if base is None:
        return str(value)
    sign = "-" if value < 0 else ""
    return f"{sign}{like[:2]}{format(abs(value), base)}"


def _literal(f: _File, node: Node) -> tuple[Node, int] | None:
    """The literal an integer stands for (``-1`` counts as one literal) and its value."""
    value = _integer_value(f.text(node))
    if value is None:
        return None
    parent = node.parent
    if parent is not None and parent.type == "unary_operator" and parent.child_by_field_name("operator").type == "-":
        return parent, -value
    return node, value


def _bound_role(literal: Node) -> str | None:
    """Where an integer literal is a bound ("comparison", "index", "range") or a step ("step")."""
    parent = literal.parent
    if parent is None:
        return None
    if parent.type == "comparison_operator":
        return "comparison"
    if parent.type == "slice" or (parent.type == "subscript" and parent.child_by_field_name("value") != literal):
        return "index"
    if parent.type == "argument_list":
        call = parent.parent
        callee = call.child_by_field_name("function") if call is not None else None
        if callee is not None and callee.type == "identifier" and callee.text == b"range":
            return "range"
    if parent.type == "binary_operator" and parent.child_by_field_name("right") == literal \
            and parent.child_by_field_name("operator").type in ("+", "-") and literal.text == b"1":
        return "step"
    return None


def _off_by_one(f: _File, node: Node):
    if node.type == "binary_operator":
        right = node.child_by_field_name("right")
        if right is not None and right.type == "integer" and _bound_role(right) == "step":
            left = node.child_by_field_name("left")
            op = node.child_by_field_name("operator").type
            yield node.start_byte, node.end_byte, f.text(left), f"drop `{op} 1`"
        return
    found = _literal(f, node)
    if found is None:
        return
    literal, value = found
    role = _bound_role(literal)
    if role not in ("comparison", "index", "range"):
        return
    old = f.text(literal)
    for new in (value + 1, value - 1):
        if new < 0 and value == 0 and role != "comparison":
            continue  # `x[0]` -> `x[-1]` reads the other end, a different kind of bug than off-by-one
        rendered = _render(new, old.lstrip("-"))
        yield literal.start_byte, literal.end_byte, rendered, f"{role} bound `{old}` to `{rendered}`"


def _swap_bool_op(f: _File, node: Node):
    op = node.child_by_field_name("operator")
    other = {"and": "or", "or": "and"}.get(op.type)
    if other:
        yield op.start_byte, op.end_byte, other, f"swap `{op.type}` to `{other}`"


def _negate_condition(f: _File, node: Node):
    if node.type == "not_operator":
        inner = node.child_by_field_name("argument")
        yield node.start_byte, node.end_byte, f.text(inner), "drop the `not` of a condition"
    elif node.type == "parenthesized_expression":
        yield node.start_byte, node.end_byte, "not " + f.text(node), "negate a condition"
    else:
        yield node.start_byte, node.end_byte, f"not ({f.text(node)})", "negate a condition"


def _change_constant(f: _File, node: Node):
    if node.type in ("true", "false"):
        other = "False" if node.type == "true" else "True"
        yield node.start_byte, node.end_byte, other, f"`{f.text(node)}` to `{other}`"
        return
    found = _literal(f, node)
    if found is None or _bound_role(found[0]) is not None:
        return  # bounds and steps belong to off_by_one
    old = f.text(node)
    new = _render(int(old, 0) + 1, old)  # the digits only: `-5` becomes `-6`
    yield node.start_byte, node.end_byte, new, f"constant `{old}` to `{new}`"


def _drop_statement(f: _File, node: Node):
    block = node.parent
    if block is None or block.type != "block" or _is_inert(node) or len(_statements(block)) < 2:
        return
    summary = " ".join(f.text(node).split())[:40]
    yield node.start_byte, node.end_byte, "pass", f"drop `{summary}`"


def _drop_early_return(f: _File, node: Node):
    block = node.parent
    body = node.child_by_field_name("consequence")
    if block is None or block.type != "block" or body is None or node.children_by_field_name("alternative"):
        return
    inside = _statements(body)
    if len(inside) != 1 or inside[0].type not in ("return_statement", "raise_statement"):
        return
    siblings = _statements(block)
    if siblings[-1] == node:
        return
    kind = inside[0].type.split("_")[0]
    yield node.start_byte, node.end_byte, "pass", f"drop the early {kind} at `{' '.join(f.text(node).split())[:40]}`"


def _swap_arguments(f: _File, node: Node):
    args = [c for c in node.named_children if c.type != "comment"]
    if len(args) < 2 or args[0].type in _NOT_POSITIONAL or args[1].type in _NOT_POSITIONAL:
        return
    first, second = f.text(args[0]), f.text(args[1])
    if first == second:
        return
    between = f.source[args[0].end_byte:args[1].start_byte].decode("utf-8", "replace")
    yield (args[0].start_byte, args[1].end_byte, second + between + first,
           f"swap arguments `{first[:20]}` and `{second[:20]}`")


def _return_wrong_variable(f: _File, node: Node):
    values = node.named_children
    if len(values) != 1 or values[0].type != "identifier":
        return
    definition = f.owner(node)
    returned = f.text(values[0])
    other = next((n for n in f.locals_of(definition) if n != returned), None)
    if other is not None:
        yield values[0].start_byte, values[0].end_byte, other, f"return `{other}` instead of `{returned}`"


Operator = tuple[tuple[str, ...], Callable[[_File, Node], Iterator[tuple[int, int, str, str]]]]

OPERATORS: Registry[Operator] = Registry("mutation operator", {
    "flip_comparison": (("comparison",), _flip_comparison),
    "off_by_one": (("integer", "binary"), _off_by_one),
    "swap_bool_op": (("boolean",), _swap_bool_op),
    "negate_condition": (("condition",), _negate_condition),
    "change_constant": (("integer", "truth"), _change_constant),
    "drop_statement": (("statement",), _drop_statement),
    "drop_early_return": (("if",), _drop_early_return),
    "swap_arguments": (("arguments",), _swap_arguments),
    "return_wrong_variable": (("return",), _return_wrong_variable),
})
"""Operator name -> (the query captures it reads, its generator of ``(start, end, replacement, description)``).
Registration order ranks operators whose candidates share a span in :func:`find_mutations`."""


def _normalised(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def find_mutations(path: str, source: bytes, operators=OPERATORS, module: str | None = None) -> list[Mutation]:
    """Every candidate mutation of ``operators`` inside the function bodies of ``path``, in source order; functions
    are named in ``module`` (default: from the path; give the index's name for a file under a source root)."""
    chosen = {op: OPERATORS.resolve(op) for op in operators}  # a miss is a ConfigError naming every operator
    tree = parse_source(source)
    if tree.root_node.has_error:
        return []  # every mutation would fail the parse filter, and the file is no good base for a task
    f = _File(path, source, module)
    captures = QueryCursor(_QUERY).captures(tree.root_node)
    if "return_wrong_variable" in operators:
        for store in sorted(captures.get("store", ()), key=lambda n: n.start_byte):
            scope = f.nearest_scope(store)
            if scope is not None and scope.type == "function_definition" and f.owner(store) == scope:
                f.add_store(scope, f.text(store))
    found: list[tuple[tuple, Mutation]] = []
    seen: set[tuple] = set()
    for rank, operator in enumerate(OPERATORS):
        if operator not in chosen:
            continue
        names, generate = chosen[operator]
        for name in names:
            for node in captures.get(name, ()):
                definition = f.owner(node)
                if definition is None:
                    continue
                for order, (start, end, replacement, description) in enumerate(generate(f, node)):
                    key = (start, end, replacement, operator)
                    if key in seen:
                        continue
                    seen.add(key)
                    mutated = source[:start] + replacement.encode() + source[end:]
                    if not parses_cleanly(mutated):
                        continue
                    shift = len(mutated) - len(source)
                    after = mutated[definition.start_byte:definition.end_byte + shift]
                    digest = hashlib.sha1(_normalised(after.decode("utf-8", "replace")).encode()).hexdigest()
                    line = source.count(b"\n", 0, start) + 1
                    mutation = Mutation(operator, path, f.qualified_name(definition), start, end, replacement,
                                        line, description, digest)
                    found.append(((start, -end, rank, order), mutation))  # an outer span before the spans inside it
    found.sort(key=lambda item: item[0])
    return [m for _, m in found]


def sample_mutations(cands: list[Mutation], k: int, seed: int) -> list[Mutation]:
    """Up to ``k`` candidates, chosen with ``random.Random(seed)``, taking operators in turn and,
    within an operator, functions in turn, preferring functions not yet used. No two picked
    mutations overlap, so the result can go straight to ``combine``. Same input order, same seed,
    same answer."""
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"expected a non-negative int k, got {k!r}")
    rng = random.Random(seed)
    by_operator: dict[str, dict[tuple, list[Mutation]]] = {}
    for m in cands:
        by_operator.setdefault(m.operator, {}).setdefault((m.file, m.function), []).append(m)
    queues: dict[str, list[Mutation]] = {}
    for operator, groups in by_operator.items():
        lists = list(groups.values())
        for group in lists:
            rng.shuffle(group)
        rng.shuffle(lists)
        # Round-robin over functions so one long function does not fill an operator's share.
        queues[operator] = [g[i] for i in range(max(map(len, lists))) for g in lists if i < len(g)]
    order = list(queues)
    rng.shuffle(order)
    picked: list[Mutation] = []
    used: set[tuple] = set()

    def clashes(m: Mutation) -> bool:
        return any(p.file == m.file and m.start_byte < p.end_byte and p.start_byte < m.end_byte for p in picked)

    while len(picked) < k and any(queues.values()):
        for operator in order:
            queue = queues[operator]
            queue[:] = [m for m in queue if not clashes(m)]
            if not queue or len(picked) >= k:
                continue
            index = next((i for i, m in enumerate(queue) if (m.file, m.function) not in used), 0)
            chosen = queue.pop(index)
            picked.append(chosen)
            used.add((chosen.file, chosen.function))
    return picked


def combine(source_by_file: dict[str, bytes], mutations: list[Mutation]) -> dict[str, bytes]:
    """A copy of ``source_by_file`` with every mutation applied; ValueError if two spans in one file overlap
    or a mutation names a file not given."""
    out = dict(source_by_file)
    by_file: dict[str, list[Mutation]] = {}
    for m in mutations:
        if m.file not in source_by_file:
            raise ValueError(f"expected {m.file!r} among the given files, got {sorted(source_by_file)}")
        by_file.setdefault(m.file, []).append(m)
    for path, muts in by_file.items():
        muts.sort(key=lambda m: (m.start_byte, m.end_byte))
        for before, after in pairwise(muts):
            if after.start_byte < before.end_byte or after.start_byte == before.start_byte:
                raise ValueError(f"overlapping mutations in {path}: {before.description!r} at "
                                 f"{before.start_byte}..{before.end_byte} and {after.description!r} at "
                                 f"{after.start_byte}..{after.end_byte}")
        source = source_by_file[path]
        for m in reversed(muts):  # from the end, so earlier offsets stay valid
            source = m.apply(source)
        out[path] = source
    return out


def is_equivalent(a: Mutation, b: Mutation) -> bool:
    """Same file and either the same edit, or the same enclosing function text afterwards."""
    if a.file != b.file:
        return False
    if (a.start_byte, a.end_byte, a.replacement) == (b.start_byte, b.end_byte, b.replacement):
        return True
    return bool(a.function_digest) and a.function == b.function and a.function_digest == b.function_digest


def dedupe(muts) -> list[Mutation]:
    """``muts`` without later duplicates (see ``is_equivalent``), order kept."""
    edits: set[tuple] = set()
    results: set[tuple] = set()
    out = []
    for m in muts:
        edit = (m.file, m.start_byte, m.end_byte, m.replacement)
        result = (m.file, m.function, m.function_digest)
        if edit in edits or (m.function_digest and result in results):
            continue
        edits.add(edit)
        if m.function_digest:
            results.add(result)
        out.append(m)
    return out
