"""Per-file syntax facts: definitions, bindings, imports and raw (unresolved) uses of names.

Everything here depends on one file's bytes only, so a file's facts can be rebuilt alone when it
changes. Cross-file resolution lives in ``resolve.py``.

Guaranteed: extraction never raises on malformed source; tree-sitter's error recovery decides how
much of a broken file is seen, and the first ERROR/MISSING node is reported as a ``SyntaxIssue``.
Not guaranteed: Python's exact scoping. Names are scoped per def (comprehension and lambda
variables count as locals of the enclosing def), and a name stored anywhere in a def is a local
there, like CPython; ``nonlocal``/``exec``/``globals()`` tricks are not modelled.

Speed: one tree-sitter query pass per file collects every node of interest in C; Python then
touches only those nodes, never the whole tree.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

import tree_sitter_python
from tree_sitter import Language, Node, Parser, Query, QueryCursor, Tree

from repogym.envs.analysis.model import Symbol, SyntaxIssue, Unresolved
from repogym.envs.analysis.roots import module_for

PY_LANGUAGE = Language(tree_sitter_python.language())
_PARSER = Parser(PY_LANGUAGE)

VAR = ("var",)  # a name bound to a value we do not track (assignment, parameter, loop variable)
TYPED = "typed"  # a binding (TYPED, (how, chain)): a name whose class the syntax pins, see _type_of
MODULE_SCOPE = -1

# Names bound by assignments and for loops; shared with the mutation operators (repogym.envs.taskgen.mutations).
STORE_PATTERNS = """
(assignment left: (identifier) @store)
(assignment left: (pattern_list (identifier) @store))
(assignment left: (tuple_pattern (identifier) @store))
(augmented_assignment left: (identifier) @store)
(for_statement left: (identifier) @store)
(for_statement left: (pattern_list (identifier) @store))
"""

_QUERY = Query(PY_LANGUAGE, """
(function_definition) @def
(class_definition) @def
(import_statement) @import
(import_from_statement) @import
(call function: (_) @callee)
(decorator (identifier) @callee)
(decorator (attribute) @callee)
(attribute) @attr
(argument_list (identifier) @name)
(keyword_argument value: (identifier) @name)
(assignment right: (identifier) @name)
(return_statement (identifier) @name)
(list (identifier) @name)
(tuple (identifier) @name)
(set (identifier) @name)
(pair value: (identifier) @name)
(type (identifier) @name)
(except_clause (identifier) @name)
(expression_list (identifier) @name)
(lambda body: (identifier) @name)
(conditional_expression (identifier) @name)
(list_comprehension body: (identifier) @name)
(set_comprehension body: (identifier) @name)
(generator_expression body: (identifier) @name)
(for_in_clause right: (identifier) @name)
(for_statement right: (identifier) @name)
(binary_operator (identifier) @name)
(boolean_operator (identifier) @name)
(comparison_operator (identifier) @name)
(not_operator (identifier) @name)
(unary_operator (identifier) @name)
(parenthesized_expression (identifier) @name)
(yield (identifier) @name)
(await (identifier) @name)
(subscript value: (identifier) @name)
(subscript value: [(identifier) (attribute)] @subscripted)
(return_statement) @return
(yield) @yielded
(comparison_operator) @compare
(binary_operator) @binop
(with_item value: (_) @with_value)
(for_statement right: [(identifier) (attribute)] @iterated)
(for_in_clause right: [(identifier) (attribute)] @iterated)
(if_statement condition: [(identifier) (attribute)] @truth)
(elif_clause condition: [(identifier) (attribute)] @truth)
(while_statement condition: [(identifier) (attribute)] @truth)
(not_operator argument: [(identifier) (attribute)] @truth)
(conditional_expression . (_) . (_) @truth)
""" + STORE_PATTERNS + """
(for_in_clause left: (identifier) @store)
(for_in_clause left: (pattern_list (identifier) @store))
(as_pattern alias: (as_pattern_target (identifier) @store))
(named_expression name: (identifier) @store)
(lambda_parameters (identifier) @store)
(lambda_parameters (default_parameter name: (identifier) @store))
(lambda_parameters (list_splat_pattern (identifier) @store))
(lambda_parameters (dictionary_splat_pattern (identifier) @store))
(global_statement (identifier) @global)
(assignment left: (attribute object: (identifier)) @attr_store)
(parameters (identifier) @param)
(parameters (default_parameter name: (identifier) @param))
(parameters (typed_parameter (identifier) @param))
(parameters (typed_default_parameter name: (identifier) @param))
(parameters (list_splat_pattern (identifier) @param))
(parameters (dictionary_splat_pattern (identifier) @param))
(parameters (typed_parameter (list_splat_pattern (identifier) @param)))
(parameters (typed_parameter (dictionary_splat_pattern (identifier) @param)))
""")

_DOTTED = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*\Z")
_SPACE = re.compile(r"\s+")


def parse_source(source: bytes, old_tree: Tree | None = None) -> Tree:
    """Parse Python bytes, reusing ``old_tree`` (already ``edit()``-ed) when given. Tests patch this."""
    if old_tree is None:
        return _PARSER.parse(source)
    return _PARSER.parse(source, old_tree)


def module_name(path: str, roots: tuple[str, ...] = ("",)) -> str:
    """``pkg/mod.py`` -> ``pkg.mod``; ``pkg/__init__.py`` -> ``pkg``; under a source root (``src``), named from it."""
    return module_for(path, roots)


def is_test_file(path: str) -> bool:
    """True for ``test_*.py``, ``*_test.py`` and any ``.py`` under a ``tests/`` folder."""
    parts = path.split("/")
    base = parts[-1]
    return base.startswith("test_") or base.endswith("_test.py") or "tests" in parts[:-1]


@dataclass(slots=True)
class DefFacts:
    """One ``def``/``class``; ``start``/``end`` bytes include its decorators."""

    qname: str
    name: str
    kind: str
    line: int
    end_line: int
    first_line: int  # first decorator line, or ``line``
    start: int
    end: int
    parent: int  # index into FileFacts.defs, or MODULE_SCOPE
    body_start: int = 0  # decorators, defaults, annotations and bases before it run in the parent scope
    signature: str = ""
    bases: tuple = ()  # dotted chains (tuples of names) of the class's bases; non-dotted bases are skipped
    has_opaque_base: bool = False  # a base we cannot even read as a dotted name (``namedtuple(...)``)
    decorators: tuple = ()  # dotted chains of its decorators (``@deco`` or the factory of ``@deco(...)``)
    self_name: str | None = None  # first parameter of a method that is not a staticmethod
    returns: tuple | None = None  # the dotted class its return annotation names (``-> Cart``, ``-> "Cart | None"``)
    is_fixture: bool = False  # decorated with ``pytest.fixture``
    fixture: tuple | None = None  # a pytest fixture's value: (how, chain) as in _type_of, or None
    test_id: str | None = None


@dataclass(slots=True)
class FileFacts:
    """Everything one file says about itself, before looking at any other file."""

    path: str
    module: str
    package: str
    source: bytes
    tree: Tree
    defs: list[DefFacts] = field(default_factory=list)
    def_starts: list[int] = field(default_factory=list)
    module_bindings: dict = field(default_factory=dict)
    scope_bindings: list[dict] = field(default_factory=list)  # parallel to defs
    globals_: list[set] = field(default_factory=list)  # parallel to defs
    star_imports: list[tuple] = field(default_factory=list)  # (scope, module or None, line, text)
    imports: list[tuple] = field(default_factory=list)  # (scope, line, binding, text)
    imported_modules: set = field(default_factory=set)  # absolute names, inside the repo or not
    refs: list[tuple] = field(default_factory=list)  # (scope, lookup scope, line, kind, chain, text, object type)
    local_unresolved: list[Unresolved] = field(default_factory=list)
    syntax_issue: SyntaxIssue | None = None
    symbols: list[Symbol] = field(default_factory=list)
    interface: tuple = ()
    instance_attrs: dict = field(default_factory=dict)  # class def index -> {attr: (method scope, (how, chain))}
    fixture_params: set = field(default_factory=set)  # (scope, name): parameters of tests and fixtures
    test_file: bool = False  # named as pytest collects tests from it (see ``is_test_file``)

    def scope_at(self, byte: int) -> int:
        """Index of the innermost def whose span (decorators included) contains ``byte``."""
        i = bisect_right(self.def_starts, byte) - 1
        defs = self.defs
        while i >= 0 and defs[i].end < byte:
            i = defs[i].parent
        return i

    def scopes_at(self, byte: int) -> tuple[int, int]:
        """(scope a use at ``byte`` belongs to, scope its names are looked up in)."""
        scope = self.scope_at(byte)
        if scope >= 0 and byte < self.defs[scope].body_start:
            return scope, self.defs[scope].parent
        return scope, scope


def _text(node: Node) -> str:
    return node.text.decode("utf-8", "replace")


def _normalise(text: str) -> str:
    text = _SPACE.sub(" ", text)
    return text.replace("( ", "(").replace(" )", ")").replace(", )", ")").replace(",)", ")")


def _dotted(text: str) -> tuple | None:
    if " " in text or "\n" in text or "\t" in text:
        text = _SPACE.sub("", text)
    return tuple(text.split(".")) if _DOTTED.match(text) else None


def _first_error(root: Node) -> Node | None:
    """The node to blame: the first MISSING node, or where the first ERROR stops being valid code."""
    node = root
    while True:
        if node.is_missing:
            return node
        children = node.children
        if node.is_error:
            # a big ERROR node often swallows complete statements before the real mistake: skip them
            rest = [c for c in children if not (not c.has_error and c.type.endswith(_COMPLETE))]
            if not rest:
                return node
            if not (rest[0].has_error or rest[0].is_missing or rest[0].is_error):
                return rest[0]
            node = rest[0]
            continue
        bad = [c for c in children if c.has_error or c.is_missing or c.is_error]
        if not bad:
            return node
        node = bad[0]


_COMPLETE = ("_statement", "_definition", "comment")


def _syntax_issue(path: str, root: Node) -> SyntaxIssue | None:
    if not root.has_error:
        return None
    node = _first_error(root)
    if node.is_missing:
        message = f"missing {node.type!r}"
    else:
        snippet = _normalise(_text(node))[:40]
        message = f"invalid syntax near {snippet!r}" if snippet else "invalid syntax"
    return SyntaxIssue(path, node.start_point[0] + 1, message)


def _absolute_module(package: str, prefix_dots: int, rest: str) -> str | None:
    """Resolve ``from ..rest import`` against ``package``; None when it climbs above the root."""
    if prefix_dots == 0:
        return rest
    parts = package.split(".") if package else []
    up = prefix_dots - 1
    if up > len(parts):
        return None
    base = parts[: len(parts) - up]
    if rest:
        base = base + rest.split(".")
    return ".".join(base) if base else None


def extract(path: str, source: bytes, tree: Tree, roots: tuple[str, ...] = ("",)) -> FileFacts:
    """Collect one file's facts from its parse tree (its module named from the first source root it lies in)."""
    module = module_name(path, roots)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    facts = FileFacts(path, module, package, source, tree)
    root = tree.root_node
    facts.syntax_issue = _syntax_issue(path, root)
    caps = QueryCursor(_QUERY).captures(root)
    facts.test_file = is_test_file(path)
    _collect_defs(facts, caps.get("def", ()), facts.test_file)
    scope_at = facts.scope_at
    bindings = facts.scope_bindings
    mod_bindings = facts.module_bindings

    def bind(scope: int, name: str, value: tuple) -> None:
        table = mod_bindings if scope < 0 else bindings[scope]
        # a def/import binding beats a plain store of the same name (``f = wraps(f)`` keeps ``f`` a def)
        if value is VAR and name in table:
            return
        table[name] = value

    for node in caps.get("param", ()):
        bind(scope_at(node.start_byte), _text(node), VAR)
    for node in caps.get("store", ()):
        bind(scope_at(node.start_byte), _text(node), VAR)
    _inferred_returns(facts, caps)
    _type_bindings(facts, caps)
    for node in caps.get("global", ()):
        scope = scope_at(node.start_byte)
        if scope >= 0:
            facts.globals_[scope].add(_text(node))
    for node in caps.get("import", ()):
        _collect_import(facts, node, scope_at(node.start_byte), bind)
    _collect_uses(facts, caps)
    facts.symbols = _symbols(facts)
    facts.interface = _interface(facts)
    return facts


def _collect_defs(facts: FileFacts, nodes, test_file: bool) -> None:
    items = []
    for node in nodes:
        outer = node.parent
        decorated = outer is not None and outer.type == "decorated_definition"
        start_node = outer if decorated else node
        items.append((start_node.start_byte, node, start_node, decorated))
    items.sort(key=lambda item: item[0])
    defs = facts.defs
    stack: list[int] = []  # indices of open defs, innermost last
    for start, node, start_node, decorated in items:
        end = node.end_byte
        while stack and defs[stack[-1]].end < start:
            stack.pop()
        parent = stack[-1] if stack else MODULE_SCOPE
        name_node = node.child_by_field_name("name")
        name = _text(name_node) if name_node is not None else "<anonymous>"
        prefix = defs[parent].qname if parent >= 0 else facts.module
        qname = f"{prefix}.{name}" if prefix else name
        line = node.start_point[0] + 1
        end_row, end_col = node.end_point
        end_line = end_row + 1 if end_col or end_row == node.start_point[0] else end_row
        body = node.child_by_field_name("body")
        info = DefFacts(qname, name, "class", line, end_line, start_node.start_point[0] + 1,
                        start, end, parent, body.start_byte if body is not None else end)
        if node.type == "class_definition":
            supers = node.child_by_field_name("superclasses")
            if supers is not None:
                bases = []
                for arg in supers.named_children:
                    if arg.type == "keyword_argument" or arg.type == "comment":
                        continue
                    chain = _dotted(_text(arg)) if arg.type in ("identifier", "attribute") else None
                    if chain is None:
                        info.has_opaque_base = True
                    else:
                        bases.append(chain)
                info.bases = tuple(bases)
        else:
            in_class = parent >= 0 and defs[parent].kind == "class"
            info.kind = "method" if in_class else "function"
            params = node.child_by_field_name("parameters")
            signature = _normalise(_text(params)) if params is not None else "()"
            returns = node.child_by_field_name("return_type")
            if returns is not None:
                signature += " -> " + _normalise(_text(returns))
                info.returns = annotation_chain(_text(returns))
            if decorated:
                info.decorators = _decorator_chains(start_node)
            if decorated and any(c.type == "decorator" and _FIXTURE.match(_text(c)) for c in start_node.children):
                info.is_fixture = True
                info.fixture = ("ann", info.returns) if info.returns else _fixture_value(node)
            info.signature = signature
            if in_class and params is not None:
                first = [c for c in params.named_children if c.type != "comment"][:1]
                static = decorated and any(
                    c.type == "decorator" and _text(c).strip() == "@staticmethod" for c in start_node.children)
                if first and first[0].type == "identifier" and not static:
                    info.self_name = _text(first[0])
            if test_file and name.startswith("test"):
                info.test_id = _test_id(facts.path, defs, parent, name)
        defs.append(info)
        stack.append(len(defs) - 1)
    facts.def_starts = [d.start for d in defs]
    facts.scope_bindings = [{} for _ in defs]
    facts.globals_ = [set() for _ in defs]
    for d in defs:  # a def binds its name in the scope around it
        table = facts.module_bindings if d.parent < 0 else facts.scope_bindings[d.parent]
        table.setdefault(d.name, ("def", d.qname))


def _test_id(path: str, defs: list[DefFacts], parent: int, name: str) -> str | None:
    """Pytest node id for a test function or a test method of (nested) ``Test*`` classes, or of a class whose bases
    name ``TestCase`` (pytest collects unittest cases whatever their name)."""
    names = [name]
    while parent >= 0:
        owner = defs[parent]
        unittest_case = any(base[-1] in ("TestCase", "IsolatedAsyncioTestCase") for base in owner.bases)
        if owner.kind != "class" or not (owner.name.startswith("Test") or unittest_case):
            return None
        names.append(owner.name)
        parent = owner.parent
    return path + "::" + "::".join(reversed(names))


def _collect_import(facts: FileFacts, node: Node, scope: int, bind) -> None:
    line = node.start_point[0] + 1
    text = _normalise(_text(node))
    if node.type == "import_statement":
        for item in node.named_children:
            if item.type == "aliased_import":
                target = _text(item.child_by_field_name("name"))
                bind(scope, _text(item.child_by_field_name("alias")), ("module", target))
            elif item.type == "dotted_name":
                target = _text(item)
                bind(scope, target.partition(".")[0], ("module", target.partition(".")[0]))
            else:
                continue
            facts.imported_modules.add(target)
            facts.imports.append((scope, line, ("module", target), text))
        return
    module_node = node.child_by_field_name("module_name")
    if module_node is None:
        return
    if module_node.type == "relative_import":
        dots, rest = 0, ""
        for part in module_node.children:
            if part.type == "import_prefix":
                dots = part.end_byte - part.start_byte
            elif part.type == "dotted_name":
                rest = _text(part)
        absolute = _absolute_module(facts.package, dots, rest)
    else:
        absolute = _text(module_node)
    if absolute is not None:
        facts.imported_modules.add(absolute)
    for item in node.children:
        if item.type == "wildcard_import":
            facts.star_imports.append((scope, absolute, line, text))
            facts.local_unresolved.append(Unresolved(facts.path, line, text, "star import"))
            continue
        if item == module_node:
            continue
        if item.type == "aliased_import":
            name = _text(item.child_by_field_name("name"))
            alias = _text(item.child_by_field_name("alias"))
        elif item.type == "dotted_name":
            name = alias = _text(item)
        else:
            continue
        if absolute is None:
            bind(scope, alias, VAR)
            facts.local_unresolved.append(Unresolved(facts.path, line, text, "unknown name"))
            continue
        binding = ("from", absolute, name)
        bind(scope, alias, binding)
        facts.imported_modules.add(f"{absolute}.{name}")
        facts.imports.append((scope, line, binding, text))


def _collect_uses(facts: FileFacts, caps: dict) -> None:
    """Raw uses: calls, maximal dotted attribute chains, bare names in value positions."""
    scopes_at = facts.scopes_at
    refs = facts.refs
    callee_spans = set()
    for node in caps.get("callee", ()):
        start, end = node.start_byte, node.end_byte
        callee_spans.add((start, end))
        kind = node.type
        line = node.start_point[0] + 1
        if kind == "identifier":
            name = _text(node)
            if name in ("getattr", "setattr", "delattr", "hasattr") and node.parent.type == "call":
                _dynamic_attribute(facts, node.parent, name, line)
            refs.append((*scopes_at(start), line, "call", (name,), name, None))
            dunder = BUILTIN_DUNDERS.get(name)
            if dunder is not None and node.parent.type == "call":
                args = node.parent.child_by_field_name("arguments")
                first = args.named_children[0] if args is not None and args.named_children else None
                receiver = _receiver(first)
                if receiver is not None:  # the builtin itself (not a shadowing def) is checked by the resolver
                    refs.append((*scopes_at(start), line, "implicit", (*receiver, dunder), f"{name}()", None))
                    if dunder == "__iter__" and name != "iter":  # it iterates: the iterator's ``__next__`` runs
                        refs.append((*scopes_at(start), line, "implicit", (*receiver, "__next__"), f"{name}()", None))
        elif kind == "attribute":
            text = _text(node)
            chain = _dotted(text)
            if chain is not None:
                refs.append((*scopes_at(start), line, "call", chain, ".".join(chain), None))
                continue
            obj = node.child_by_field_name("object")
            attr = node.child_by_field_name("attribute")
            if obj is None or attr is None:
                continue
            chain, obj_type = ("<expr>", _text(attr)), obj.type
            if obj_type == "call":
                fn_chain = _callee_chain(obj)
                if fn_chain == ("super",):
                    chain = ("<super>", chain[1])
                elif fn_chain is not None:  # ``Cls(...).m()``: an instance of Cls when Cls is a class
                    chain = ("<call>", fn_chain, chain[1])
            refs.append((*scopes_at(start), line, "call", chain, _normalise(text)[:80], obj_type))
    seen_starts = set()
    attrs = sorted(((n.start_byte, -n.end_byte, n) for n in caps.get("attr", ())), key=lambda t: (t[0], t[1]))
    source = facts.source
    for start, neg_end, node in attrs:
        if start in seen_starts:
            continue
        end = -neg_end
        chain = _dotted(source[start:end].decode("utf-8", "replace"))
        if chain is None:
            obj, attr = node.child_by_field_name("object"), node.child_by_field_name("attribute")
            if (start, end) in callee_spans or obj is None or attr is None or obj.type != "call":
                continue
            fn_chain = _callee_chain(obj)
            if fn_chain is not None and fn_chain != ("super",):  # ``Cls(...).prop``: a property of an instance
                refs.append((*scopes_at(start), node.start_point[0] + 1, "attribute", ("<call>", fn_chain, _text(attr)),
                             _normalise(_text(node))[:80], "call"))
            continue
        seen_starts.add(start)  # shorter chains at the same start are prefixes of this one
        if (start, end) in callee_spans:
            continue
        refs.append((*scopes_at(start), node.start_point[0] + 1, "attribute", chain, ".".join(chain), None))
    for node in caps.get("name", ()):
        name = _text(node)
        refs.append((*scopes_at(node.start_byte), node.start_point[0] + 1, "name", (name,), name, None))
    _collect_implicit(facts, caps)


# -- implicit calls: syntax that runs a dunder method of its operand --------------------------------------------
# Builtins that call one dunder of their first argument (``len(obj)`` runs ``obj.__len__``).
BUILTIN_DUNDERS = {"len": "__len__", "iter": "__iter__", "next": "__next__", "reversed": "__reversed__",
                   "str": "__str__", "repr": "__repr__", "hash": "__hash__", "bool": "__bool__", "abs": "__abs__",
                   "bytes": "__bytes__", "int": "__int__", "float": "__float__", "round": "__round__",
                   "format": "__format__", "list": "__iter__", "tuple": "__iter__", "set": "__iter__",
                   "frozenset": "__iter__", "sorted": "__iter__", "enumerate": "__iter__", "dir": "__dir__",
                   "complex": "__complex__", "divmod": "__divmod__", "sum": "__iter__", "any": "__iter__",
                   "all": "__iter__", "min": "__iter__", "max": "__iter__", "dict": "__iter__"}
# Operator -> (the left operand's method, the right operand's method); ``in`` asks the right one.
_OPERATOR_DUNDERS = {
    "+": ("__add__", "__radd__"), "-": ("__sub__", "__rsub__"), "*": ("__mul__", "__rmul__"),
    "/": ("__truediv__", "__rtruediv__"), "//": ("__floordiv__", "__rfloordiv__"), "%": ("__mod__", "__rmod__"),
    "**": ("__pow__", "__rpow__"), "@": ("__matmul__", "__rmatmul__"), "&": ("__and__", "__rand__"),
    "|": ("__or__", "__ror__"), "^": ("__xor__", "__rxor__"), "<<": ("__lshift__", "__rlshift__"),
    ">>": ("__rshift__", "__rrshift__"), "==": ("__eq__", "__eq__"), "!=": ("__ne__", "__ne__"),
    "<": ("__lt__", "__gt__"), ">": ("__gt__", "__lt__"), "<=": ("__le__", "__ge__"), ">=": ("__ge__", "__le__"),
    "in": (None, "__contains__"), "not in": (None, "__contains__")}


def _receiver(node: Node | None) -> tuple | None:
    """The chain of an operand whose dunder an operator runs: a dotted name, or ``("<call>", callee)`` for
    ``Cls(...)``; None for anything else (a literal, a subscript, an expression)."""
    if node is None:
        return None
    if node.type in ("identifier", "attribute"):
        return _dotted(_text(node))
    if node.type == "call":
        chain = _callee_chain(node)
        return ("<call>", chain) if chain and chain != ("super",) else None
    return None


def _collect_implicit(facts: FileFacts, caps: dict) -> None:
    """Uses that call a method without naming it, as ``implicit`` refs of chain (*receiver, dunder): subscripts
    (get/set/del item), comparisons and binary operators (both operands), ``with`` (enter/exit), ``for`` loops
    (iter), and the builtins of :data:`BUILTIN_DUNDERS`. The resolver keeps those whose receiver is an instance of
    a repository class defining the method."""
    refs, scopes_at = facts.refs, facts.scopes_at

    def add(node: Node, receiver: tuple | None, dunder: str | None) -> None:
        if receiver is not None and dunder is not None:
            where = (*scopes_at(node.start_byte), node.start_point[0] + 1, "implicit")
            refs.append((*where, (*receiver, dunder), dunder, None))
            if dunder == "__iter__":  # iterating runs the iterator's ``__next__``: often the object's own
                refs.append((*where, (*receiver, "__next__"), dunder, None))
            elif dunder == "__bool__":  # truth falls back on ``__len__``
                refs.append((*where, (*receiver, "__len__"), dunder, None))

    for value in caps.get("subscripted", ()):
        subscript = value.parent
        outer = subscript.parent if subscript is not None else None
        receiver = _receiver(value)
        if outer is None or receiver is None:
            continue
        if outer.type == "assignment" and outer.child_by_field_name("left") == subscript:
            add(value, receiver, "__setitem__")
        elif outer.type == "augmented_assignment" and outer.child_by_field_name("left") == subscript:
            add(value, receiver, "__getitem__")
            add(value, receiver, "__setitem__")
        elif outer.type == "delete_statement" or (outer.type == "expression_list" and outer.parent is not None
                                                  and outer.parent.type == "delete_statement"):
            add(value, receiver, "__delitem__")
        elif outer.type != "type" and outer.type != "generic_type":
            add(value, receiver, "__getitem__")
    for node in caps.get("compare", ()):
        operands = [c for c in node.children if c.is_named]
        operators = [c for c in node.children if not c.is_named]
        if len(operands) != len(operators) + 1:
            continue
        for i, op in enumerate(operators):
            left, right = _OPERATOR_DUNDERS.get(_SPACE.sub(" ", _text(op)), (None, None))
            add(node, _receiver(operands[i]), left)
            add(node, _receiver(operands[i + 1]), right)
    for node in caps.get("binop", ()):
        op = node.child_by_field_name("operator")
        left, right = _OPERATOR_DUNDERS.get(_text(op) if op is not None else "", (None, None))
        add(node, _receiver(node.child_by_field_name("left")), left)
        add(node, _receiver(node.child_by_field_name("right")), right)
    for value in caps.get("with_value", ()):
        if value.type == "as_pattern":
            value = value.named_children[0] if value.named_children else None
        receiver = _receiver(value)
        if receiver is not None:
            add(value, receiver, "__enter__")
            add(value, receiver, "__exit__")
    for node in caps.get("iterated", ()):
        add(node, _receiver(node), "__iter__")
    for node in caps.get("truth", ()):
        if node.type in ("identifier", "attribute"):
            add(node, _receiver(node), "__bool__")


def _decorator_chains(definition: Node) -> tuple:
    """The dotted chains of a decorated definition's decorators (``@deco`` -> deco; ``@deco(x)`` -> deco)."""
    chains = []
    for child in definition.children:
        if child.type != "decorator":
            continue
        expr = child.named_children[0] if child.named_children else None
        if expr is not None and expr.type == "call":
            chain = _callee_chain(expr)
        elif expr is not None and expr.type in ("identifier", "attribute"):
            chain = _dotted(_text(expr))
        else:
            chain = None
        if chain is not None:
            chains.append(chain)
    return tuple(chains)


def _dynamic_attribute(facts: FileFacts, call: Node, fn: str, line: int) -> None:
    """``getattr(obj, "lit")`` reads like ``obj.lit``; with a computed name it is unresolvable."""
    args = call.child_by_field_name("arguments")
    if args is None:
        return
    positional = [a for a in args.named_children if a.type not in ("keyword_argument", "comment")]
    if len(positional) < 2:
        return
    obj, attr = positional[0], positional[1]
    if attr.type == "string" and attr.named_child_count <= 2 and all(
            c.type in ("string_start", "string_content", "string_end") for c in attr.children):
        literal = _text(attr)[1:-1]
        chain = _dotted(_text(obj)) if obj.type in ("identifier", "attribute") else None
        if chain is not None and _DOTTED.match(literal) and "." not in literal:
            facts.refs.append((*facts.scopes_at(call.start_byte), line, "attribute", chain + (literal,),
                               f"{'.'.join(chain)}.{literal}", None))
        return
    reason = "getattr" if fn == "getattr" else "dynamic attribute"
    facts.local_unresolved.append(Unresolved(facts.path, line, _normalise(_text(call))[:80], reason))


def _symbols(facts: FileFacts) -> list[Symbol]:
    last_line = facts.source.count(b"\n") + (0 if facts.source.endswith(b"\n") else 1)
    out = [Symbol(facts.module, "module", facts.path, 1, max(last_line, 1))]
    out.extend(Symbol(d.qname, d.kind, facts.path, d.line, d.end_line, d.signature, d.test_id)
               for d in facts.defs)
    return out


def _interface(facts: FileFacts) -> tuple:
    """What other files can see of this one; when it is unchanged, their resolution is unchanged."""
    defs = tuple((d.qname, d.kind, d.bases, d.has_opaque_base, d.self_name is not None, d.returns, d.is_fixture,
                  d.fixture)
                 for d in facts.defs)
    class_tables = tuple(tuple(sorted(facts.scope_bindings[i].items()))
                         for i, d in enumerate(facts.defs) if d.kind == "class")
    attrs = tuple(sorted((i, tuple(sorted(a.items()))) for i, a in facts.instance_attrs.items()))
    return (facts.module, defs, tuple(sorted(facts.module_bindings.items())), class_tables,
            tuple((s[0], s[1]) for s in facts.star_imports), attrs)


# -- receiver types: local, syntactic, never guessed ------------------------------------------------------------
_FIXTURE = re.compile(r"@\s*(?:pytest\s*\.\s*)?fixture\b")


# Wrappers that say how a name is held, not what it holds: ``Final[Cart]`` is a Cart.
_WRAPPERS = frozenset({"Final", "ClassVar", "Annotated", "Required", "NotRequired", "ReadOnly"})
# Scalars have no repository methods, so ``Version | str`` pins Version for every method call that can reach code.
_SCALARS = frozenset({"None", "str", "bytes", "int", "float", "bool", "complex", "bytearray"})
# Containers whose first parameter is the element type (``for c in carts`` where ``carts: list[Cart]``).
_CONTAINERS = frozenset({"list", "List", "set", "Set", "frozenset", "FrozenSet", "AbstractSet", "MutableSet",
                         "Sequence", "MutableSequence", "Iterable", "Iterator", "Collection", "Container",
                         "Generator", "AsyncIterable", "AsyncIterator", "AsyncGenerator", "deque", "Deque",
                         "Reversible", "KeysView", "ValuesView", "tuple", "Tuple"})
ELEMENTS = "<of>"  # a chain (ELEMENTS, *class chain): a container of instances of that class


def annotation_chain(text: str, _nested: int = 0) -> tuple | None:
    """The class an annotation names: ``Cart``, ``m.Cart``, ``"Cart"``, ``Optional[Cart]``, ``Cart | None``,
    ``Union[Cart, str]`` (scalars dropped), ``Final[Cart]``, ``Result[T]`` (a generic class itself); for a container
    of one class (``list[Cart]``, ``Iterator[Cart]``, ``tuple[Cart, ...]``) ``(ELEMENTS, *chain)``; None for anything
    else (a union of classes, a tuple of several types)."""
    text = _SPACE.sub("", text)
    for _ in range(8):
        text = text.strip("'\"")
        head, inner = _subscript(text)
        last = head.rpartition(".")[2] if head else None
        if last == "Optional" or last in _WRAPPERS:
            text = _top_level(inner, ",")[0]
            continue
        parts = _top_level(inner, ",") if last == "Union" else _top_level(text, "|")
        parts = [p.strip("'\"") for p in parts if p.strip("'\"") not in _SCALARS]
        if len(parts) != 1:
            return None
        if parts[0] != text:
            text = parts[0]
            continue
        if last in _CONTAINERS:
            args = _top_level(inner, ",")
            if _nested:  # a container of containers pins nothing a loop variable can use
                return None
            if last in ("tuple", "Tuple") and not (len(args) == 2 and args[1] == "..."):
                return None
            element = annotation_chain(args[0], _nested + 1) if args and args[0] else None
            return (ELEMENTS, *element) if element and element[0] != ELEMENTS else None
        break
    head, _ = _subscript(text)  # ``Result[T]``: the class itself
    return _dotted(head or text)


def type_alias(value: Node | None) -> tuple | None:
    """The class chain a module or class attribute aliases when its value is a typing union
    (``UnparsedVersion = Union[Version, str]``, ``Key = Cart | None``), else None."""
    if value is None or value.type not in ("subscript", "binary_operator"):
        return None
    text = _SPACE.sub("", _text(value))
    head, _ = _subscript(text)
    is_union = (head or "").rpartition(".")[2] in ("Union", "Optional") if value.type == "subscript" else (
        "|" in text and any(p in _SCALARS for p in _top_level(text, "|")))
    chain = annotation_chain(text) if is_union else None
    return chain if chain and chain[0] != ELEMENTS else None


def _subscript(text: str) -> tuple[str | None, str]:
    """(``X``, ``inside``) when ``text`` is one whole ``X[inside]``, else (None, "")."""
    opening = text.find("[")
    if opening <= 0 or not text.endswith("]"):
        return None, ""
    depth = 0
    for i, char in enumerate(text[opening:], opening):
        depth += char == "["
        depth -= char == "]"
        if depth == 0:
            return (text[:opening], text[opening + 1:-1]) if i == len(text) - 1 else (None, "")
    return None, ""


def _top_level(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        depth += char == "["
        depth -= char == "]"
        if char == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    return parts + ["".join(current)]


def _callee_chain(call: Node) -> tuple | None:
    """The dotted name a call node calls (``Cart``, ``m.make``), or None (``f()()``, ``xs[0]()``)."""
    fn = call.child_by_field_name("function")
    return _dotted(_text(fn)) if fn is not None and fn.type in ("identifier", "attribute") else None


def _constructed(value: Node | None) -> tuple | None:
    """("new", callee chain) when ``value`` is a call of a dotted name (a class, or a function whose return
    annotation names one: the resolver decides), else None."""
    chain = _callee_chain(value) if value is not None and value.type == "call" else None
    return ("new", chain) if chain else None


def _value_type(value: Node | None) -> tuple | None:
    """What an assigned or iterated value says of its class: a call (``("new", chain)``) or another name or
    attribute (``("ref", chain)``: whatever that one is pinned to)."""
    if value is None:
        return None
    if value.type in ("identifier", "attribute"):
        chain = _dotted(_text(value))
        return ("ref", chain) if chain else None
    return _constructed(value)


def _type_of(node: Node) -> tuple | None:
    """What one binding of a name says of its class: a parameter or variable annotation (``("ann", chain)``), an
    assignment from a call or ``with CALL as name`` (``("new", chain)``), from another name (``("ref", chain)``),
    a loop over something typed (``("elem", value type)``), a typing alias (``("alias", chain)``); None when it
    says nothing."""
    parent = node.parent
    if parent is None:
        return None
    if parent.type in ("typed_parameter", "typed_default_parameter"):
        annotation = parent.child_by_field_name("type")
        chain = annotation_chain(_text(annotation)) if annotation is not None else None
        return ("ann", chain) if chain else None
    if parent.type == "assignment" and parent.child_by_field_name("left") == node:
        annotation = _pinning_annotation(parent.child_by_field_name("type"))
        if annotation is not None:
            chain = annotation_chain(_text(annotation))
            return ("ann", chain) if chain else None
        right = parent.child_by_field_name("right")
        alias = type_alias(right)
        return ("alias", alias) if alias else _value_type(right)
    if parent.type in ("for_statement", "for_in_clause") and parent.child_by_field_name("left") == node:
        iterated = _value_type(parent.child_by_field_name("right"))
        return ("elem", iterated) if iterated else None
    if parent.type == "as_pattern_target" and parent.parent is not None and parent.parent.type == "as_pattern":
        return _constructed(parent.parent.named_children[0] if parent.parent.named_children else None)
    return None


def _inferred_returns(facts: FileFacts, caps: dict) -> None:
    """A function without a return annotation whose every ``return`` builds an instance of one dotted callee
    (``return Store()``) returns that: its ``returns`` is the callee's chain (the resolver keeps it when it is a
    class). Generators are left alone."""
    found: dict[int, set] = {}
    for node in caps.get("yielded", ()):
        found[facts.scope_at(node.start_byte)] = {None}
    for node in caps.get("return", ()):
        scope = facts.scope_at(node.start_byte)
        if scope < 0:
            continue
        values = node.named_children
        made = _constructed(values[0]) if len(values) == 1 else None
        found.setdefault(scope, set()).add(made[1] if made else None)
    for scope, chains in found.items():
        d = facts.defs[scope] if scope >= 0 else None
        if d is not None and d.kind != "class" and d.returns is None and len(chains) == 1 and None not in chains:
            d.returns = next(iter(chains))


def _pinning_annotation(annotation: Node | None) -> Node | None:
    """The annotation, unless it is a bare wrapper (``x: Final = Cart()``) that leaves the type to the value."""
    if annotation is not None and _SPACE.sub("", _text(annotation)).rpartition(".")[2] in _WRAPPERS:
        return None
    return annotation


def _fixture_value(function: Node) -> tuple | None:
    """A fixture's value when every ``return``/``yield`` of its body (outside nested defs) builds the same class."""
    found: set = set()
    stack = [function.child_by_field_name("body")]
    while stack:
        node = stack.pop()
        if node is None or node.type in ("function_definition", "class_definition", "lambda"):
            continue
        if node.type in ("return_statement", "yield"):
            values = [c for c in node.named_children]
            found.add(_constructed(values[0]) if values else None)
            continue
        stack.extend(node.named_children)
    return found.pop() if len(found) == 1 else None


def _type_bindings(facts: FileFacts, caps: dict) -> None:
    """Give a name a TYPED binding where every binding of it in its scope pins the same class; record the typed
    ``self.attr = ...`` of methods, and the parameters of tests and fixtures (each may name a pytest fixture)."""
    seen: dict[tuple[int, str], set] = {}
    for kind in ("param", "store"):
        for node in caps.get(kind, ()):
            seen.setdefault((facts.scope_at(node.start_byte), _text(node)), set()).add(_type_of(node))
    for (scope, name), types in seen.items():
        table = facts.module_bindings if scope < 0 else facts.scope_bindings[scope]
        declared = {t for t in types if t and t[0] == "ann"}  # a declared type holds for every binding
        if declared:
            types = declared
        if None in types or table.get(name) is not VAR:
            continue
        # several bindings (``parsed = Version(v)`` / ``parsed = v``) pin a class when they all resolve to it
        table[name] = (TYPED, next(iter(types)) if len(types) == 1 else ("all", tuple(sorted(types, key=repr))))
    for node in caps.get("param", ()):
        scope = facts.scope_at(node.start_byte)
        d = facts.defs[scope] if scope >= 0 else None
        if (d is not None and (d.test_id is not None or d.is_fixture or d.name.startswith("test"))
                and node.parent is not None and node.parent.type in ("parameters", "typed_parameter")):
            facts.fixture_params.add((scope, _text(node)))
    attrs: dict[int, dict[str, set]] = {}
    for node in caps.get("attr_store", ()):
        scope = facts.scope_at(node.start_byte)
        d = facts.defs[scope] if scope >= 0 else None
        obj, attr = node.child_by_field_name("object"), node.child_by_field_name("attribute")
        if d is None or d.self_name is None or obj is None or attr is None or _text(obj) != d.self_name:
            continue
        assignment = node.parent
        annotation = _pinning_annotation(assignment.child_by_field_name("type"))
        right = assignment.child_by_field_name("right")
        if annotation is not None:
            chain = annotation_chain(_text(annotation))
            typed = ("ann", chain) if chain else None
        elif right is not None and right.type == "identifier":  # ``self.root = root``, ``root: TagTracer``
            local = facts.scope_bindings[scope].get(_text(right))
            typed = local[1] if local is not None and local[0] == TYPED else None
        else:
            typed = _constructed(right)
        attrs.setdefault(d.parent, {}).setdefault(_text(attr), set()).add((scope, typed) if typed else None)
    for cls, table in attrs.items():  # typed only where every assignment pins the same class
        facts.instance_attrs[cls] = {name: next(iter(found)) for name, found in table.items()
                                     if None not in found and len({typed for _, typed in found}) == 1}
