"""Cross-file name resolution: turn one file's raw uses into References and Unresolved entries.

Resolution is static and conservative. A use resolves when the syntax pins it to one repository
symbol: a local or module-level def, an import (absolute, relative, aliased, re-exported through a
package ``__init__``), ``self``/``cls``/``super()`` method lookup through bases that are themselves in
the repository, ``ClassName.method``. Calling a class also references its ``__init__`` (own or
inherited). A use that names nothing in the repository (builtins, other libraries) is dropped on
purpose; one that might be repository code but cannot be pinned is reported as ``Unresolved``:
``dynamic dispatch`` (a call ``obj.m()`` on an object of unknown type where some repository class
defines ``m``), ``unknown name`` (a call of an unbound name, or of a name a repository module lacks).
Receiver types are inferred locally and only where the syntax pins them (``extract._type_bindings``): a name
whose every binding in its scope is a call of one class (``c = Cart()``, ``with Cart() as c``), or of a function
whose return annotation names a class, or an annotation naming one (``cart: Cart``, ``Optional[Cart]``,
``"Cart | None"``); ``self.attr = Cart()`` (or annotated) in a method types ``self.attr`` for the whole class; a
test's (or fixture's) parameter refers to the pytest fixture of that name (same file, then ``conftest.py`` upwards)
and takes its type when its return annotation names a class or its every return/yield builds one. Anything else stays an object of unknown
type (``dynamic dispatch`` when called). Not modelled: flow-sensitive types, ``__getattr__``, monkeypatching.
"""

from __future__ import annotations

import builtins

from repogym.envs.analysis.extract import ELEMENTS, MODULE_SCOPE, TYPED, VAR, FileFacts
from repogym.envs.analysis.model import Reference, Unresolved

EXTERNAL = ("external",)  # resolves outside the repository (builtin, other library): not reported
UNBOUND = ("unbound",)  # a bare name bound nowhere we can see
OBJECT = ("object",)  # a value of unknown type: a local, a parameter, an instance attribute

_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__loader__",
                                        "__package__", "__path__", "__builtins__", "__debug__"}
_MODULE_DUNDERS = frozenset({"__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__",
                             "__path__", "__dict__", "__all__", "__version__"})
# Objects whose attributes are never repository methods (``"".join``, ``[].append``).
_LITERALS = frozenset({"string", "concatenated_string", "integer", "float", "list", "dictionary", "set",
                       "tuple", "list_comprehension", "dictionary_comprehension", "set_comprehension",
                       "true", "false", "none"})
_MAX_HOPS = 12  # re-export chains and class hierarchies longer than this are cut (and cycles stop)


_TESTCASES = ("TestCase", "IsolatedAsyncioTestCase")
_CLASS_CALL = ("__init__", "__new__", "__post_init__")  # what ``Cls(...)`` runs, where the repository defines it


def _by_line(item) -> int:
    return item.line


def _c3(first: list[str], sequences: list[list[str]]) -> list[str] | None:
    """C3 linearisation of ``first`` + merge(``sequences``); None when there is none."""
    out = list(first)
    sequences = [list(seq) for seq in sequences if seq]
    while sequences:
        for seq in sequences:
            head = seq[0]
            if not any(head in other[1:] for other in sequences):
                break
        else:
            return None
        out.append(head)
        sequences = [[c for c in seq if c != head] for seq in sequences]
        sequences = [seq for seq in sequences if seq]
    return out


class Resolver:
    """Resolves against the tables of a RepoIndex; holds only caches valid for one link pass."""

    def __init__(self, index):
        self.defs = index._defs
        self.modules = index._modules
        self.packages = index._packages
        self.method_names = index._method_names
        self.files = index._files
        self._bases: dict[str, tuple[list[str], bool]] = {}
        self._mros: dict[str, tuple[list[str], bool]] = {}
        self._typing: set = set()  # typed bindings being resolved (a cycle such as ``c = c()`` stops here)

    # -- names -------------------------------------------------------------------------------
    def name(self, facts: FileFacts, scope: int, name: str) -> tuple:
        """Resolve a bare name as seen from ``scope`` of ``facts``."""
        defs = facts.defs
        start = scope
        while scope >= 0:
            d = defs[scope]
            # class bodies are not visible from the methods inside them
            if d.kind != "class" or scope == start:
                if name in facts.globals_[scope]:
                    break
                binding = facts.scope_bindings[scope].get(name)
                if binding is not None:
                    if binding is VAR and d.self_name == name:
                        return ("instance", defs[d.parent].qname)
                    if binding is VAR and (scope, name) in facts.fixture_params:
                        return self.fixture(facts, name)
                    return self.binding(facts, binding, 0, scope)
            scope = d.parent
        binding = facts.module_bindings.get(name)
        if binding is not None:
            return self.binding(facts, binding, 0, MODULE_SCOPE)
        for _scope, star_module, _line, _text in facts.star_imports:
            if star_module is None:
                continue
            result = self.member(star_module, name, 1)
            if result[0] != "missing" and result is not EXTERNAL:
                return result
        if name in _BUILTINS or facts.star_imports:
            return EXTERNAL
        return UNBOUND

    def binding(self, facts: FileFacts, binding: tuple, hops: int, scope: int = MODULE_SCOPE) -> tuple:
        kind = binding[0]
        if kind == TYPED:
            return self.typed(facts, binding[1], scope)
        if kind == "def":
            return ("sym", binding[1])
        if kind == "module":
            return self.module(binding[1])
        if kind == "from":
            return self.member(binding[1], binding[2], hops + 1)
        return OBJECT

    def typed(self, facts: FileFacts, typed: tuple, scope: int) -> tuple:
        """What a typed binding (``typed``: (how, what) seen from ``scope``, see ``extract._type_of``) pins: an
        instance or a container of a repository class, the symbol another name or a typing alias stands for;
        else OBJECT."""
        how, what = typed
        key = (facts.path, scope, typed)
        if key in self._typing or len(self._typing) > _MAX_HOPS:
            return OBJECT
        self._typing.add(key)
        try:
            if how == "all":  # every binding must agree
                found = {self.typed(facts, one, scope) for one in what}
                return found.pop() if len(found) == 1 else OBJECT
            if how == "elem":  # ``for c in carts``: an element of a container of Cart
                iterated = self.typed(facts, what, scope)
                return ("instance", iterated[1]) if iterated[0] == "container" else OBJECT
            if how in ("ref", "alias"):  # another name: whatever it stands for
                result = self.chain(facts, scope, what)
                return result if result[0] in ("sym", "instance", "container") else OBJECT
            if how == "ann":
                return self.annotated(facts, scope, what)
            made = self.chain(facts, scope, what)  # "new": ``Cart(...)``, or a factory ``make() -> Cart``
            if made[0] != "sym":
                return OBJECT
            if self._is_class(made[1]):
                return ("instance", made[1])
            entry = self.defs.get(made[1])
            if entry is not None:
                d = entry[0].defs[entry[1]]
                if d.returns:
                    return self.annotated(entry[0], d.parent, d.returns)
            return OBJECT
        finally:
            self._typing.discard(key)

    def annotated(self, facts: FileFacts, scope: int, chain: tuple) -> tuple:
        """The instance (or, for an ``ELEMENTS`` chain, the container of instances) an annotation names."""
        container = chain[0] == ELEMENTS
        made = self.chain(facts, scope, chain[1:] if container else chain)
        if made[0] == "sym" and self._is_class(made[1]):
            return ("container" if container else "instance", made[1])
        return OBJECT

    def fixture(self, facts: FileFacts, name: str) -> tuple:
        """A test parameter: the instance its pytest fixture builds, else OBJECT."""
        found = self.fixture_def(facts, name)
        if found is None or found[1].fixture is None:
            return OBJECT
        return self.typed(found[0], found[1].fixture, found[1].parent)

    def fixture_def(self, facts: FileFacts, name: str):
        """(file facts, def) of the pytest fixture a test parameter ``name`` gets: this file first, then each
        ``conftest.py`` from the test's folder up; None when there is none."""
        folder = facts.path.rpartition("/")[0]
        candidates = [facts]
        while True:
            conftest = self.files.get(f"{folder}/conftest.py" if folder else "conftest.py")
            if conftest is not None and conftest is not facts:
                candidates.append(conftest)
            if not folder:
                break
            folder = folder.rpartition("/")[0]
        for source in candidates:
            for d in source.defs:
                if d.name == name and d.is_fixture and d.kind in ("function", "method"):
                    return source, d
        return None

    def instance_attr(self, cls: str, attr: str) -> tuple:
        """``obj.attr`` on an instance of ``cls``: the instance a typed ``self.attr = ...`` of a method of ``cls``
        (or of a repository base) pins, else OBJECT."""
        seen, stack = set(), [cls]
        while stack and len(seen) <= _MAX_HOPS:
            current = stack.pop(0)
            if current in seen or current not in self.defs:
                continue
            seen.add(current)
            facts, idx = self.defs[current]
            found = facts.instance_attrs.get(idx, {}).get(attr)
            if found is not None:
                return self.typed(facts, found[1], found[0])
            stack[0:0] = self.bases(current)[0]
        return OBJECT

    def module(self, name: str) -> tuple:
        if name in self.modules:
            return ("sym", name)
        if name in self.packages:
            return ("module", name)  # a namespace package: a folder of modules without __init__.py
        return EXTERNAL

    def member(self, module: str, name: str, hops: int) -> tuple:
        """``module.name`` where ``module`` is a module name."""
        qname = f"{module}.{name}" if module else name
        if qname in self.modules or qname in self.defs:
            return ("sym", qname)
        if qname in self.packages:
            return ("module", qname)
        facts = self.modules.get(module)
        if facts is None:
            return ("missing", qname) if module in self.packages else EXTERNAL
        if hops > _MAX_HOPS or name in _MODULE_DUNDERS:
            return EXTERNAL
        binding = facts.module_bindings.get(name)
        if binding is not None:
            return self.binding(facts, binding, hops)
        for _scope, star_module, _line, _text in facts.star_imports:
            if star_module is None:
                return EXTERNAL
            result = self.member(star_module, name, hops + 1)
            if result[0] != "missing":
                return result
        return ("missing", qname)

    # -- classes -----------------------------------------------------------------------------
    def bases(self, cls: str) -> tuple[list[str], bool]:
        """(resolved repository bases, whether some base lies outside the repository)."""
        cached = self._bases.get(cls)
        if cached is not None:
            return cached
        self._bases[cls] = ([], False)  # a class hierarchy cycle stops here
        facts, idx = self.defs[cls]
        d = facts.defs[idx]
        found, outside = [], d.has_opaque_base
        for chain in d.bases:
            result = self.chain(facts, d.parent, chain)
            if result[0] == "sym" and result[1] in self.defs and self.defs[result[1]][0].defs[
                    self.defs[result[1]][1]].kind == "class":
                found.append(result[1])
            else:
                outside = True
        self._bases[cls] = (found, outside)
        return found, outside

    def mro(self, cls: str) -> tuple[list[str], bool]:
        """(``cls`` and its repository ancestors in C3 order, whether some ancestor lies outside the repository).
        Where C3 fails (an inconsistent hierarchy, a cycle, a base outside the repository between two inside), the
        order is depth-first left to right, as before Python 2.3."""
        cached = self._mros.get(cls)
        if cached is not None:
            return cached
        self._mros[cls] = ([cls], False)  # a cycle stops here
        bases, outside = self.bases(cls) if cls in self.defs else ([], False)
        parents = [self.mro(b) for b in bases]
        outside = outside or any(o for _, o in parents)
        order = _c3([cls], [list(m) for m, _ in parents] + [list(bases)])
        if order is None or len(order) > 4 * _MAX_HOPS:
            order, seen = [], set()
            for name in [cls] + [c for m, _ in parents for c in m]:
                if name not in seen:
                    seen.add(name)
                    order.append(name)
        self._mros[cls] = (order, outside)
        return order, outside

    def in_class(self, cls: str, attr: str, skip_self: bool = False, after: str | None = None) -> tuple:
        """Look ``attr`` up along ``cls``'s MRO (repository classes only); ``skip_self`` starts after ``cls`` itself,
        ``after`` after that class of the MRO (``super()`` in a method of ``after`` on an instance of ``cls``)."""
        order, outside = self.mro(cls)
        start = 1 if skip_self else 0
        if after is not None:
            start = order.index(after) + 1 if after in order else len(order)
        for current in order[start:]:
            qname = f"{current}.{attr}"
            if qname in self.defs:
                return ("sym", qname)
            entry = self.defs.get(current)
            if entry is not None and attr in entry[0].scope_bindings[entry[1]]:
                return OBJECT  # a class attribute holding some value
        if outside or (attr.startswith("__") and attr.endswith("__")):
            return EXTERNAL  # inherited from outside, or from ``object`` itself
        return ("missing", f"{cls}.{attr}")

    def collected_tests(self, facts: FileFacts) -> list[tuple[str, str]]:
        """(method qname, pytest node id) for every test method pytest runs in the classes of a test file, inherited
        ones included (a mixin's ``test_x`` run by ``TestA`` and ``TestB`` gives two ids, each under its class)."""
        out = []
        for idx, d in enumerate(facts.defs):
            if d.kind != "class":
                continue
            names, parent, owner = [d.name], d.parent, d
            while parent >= 0 and facts.defs[parent].kind == "class":
                names.append(facts.defs[parent].name)
                parent = facts.defs[parent].parent
            if parent != MODULE_SCOPE:
                continue
            order, _ = self.mro(d.qname)
            unittest_case = any(base[-1] in _TESTCASES for c in order if c in self.defs
                                for base in self.defs[c][0].defs[self.defs[c][1]].bases)
            if not unittest_case and not (owner.name.startswith("Test") and all(n.startswith("Test") for n in names)):
                continue
            if not unittest_case and any(f"{c}.__init__" in self.defs for c in order):
                continue  # pytest does not collect a class with an ``__init__``
            prefix = facts.path + "::" + "::".join(reversed(names))
            seen = set()
            for current in order:
                entry = self.defs.get(current)
                if entry is None:
                    continue
                cls_facts, cls_idx = entry
                for method in cls_facts.defs:
                    if (method.parent == cls_idx and method.kind == "method" and method.name.startswith("test")
                            and method.name not in seen):
                        seen.add(method.name)
                        out.append((method.qname, f"{prefix}::{method.name}"))
        return out

    def _enclosing_class(self, facts: FileFacts, scope: int) -> str | None:
        while scope >= 0:
            d = facts.defs[scope]
            if d.kind == "method":
                return facts.defs[d.parent].qname
            scope = d.parent
        return None

    # -- chains ------------------------------------------------------------------------------
    def chain(self, facts: FileFacts, scope: int, chain: tuple) -> tuple:
        """Resolve a dotted chain; returns the final result (deepest symbol is tracked by ``walk``)."""
        return self.walk(facts, scope, chain)[0]

    def walk(self, facts: FileFacts, scope: int, chain: tuple) -> tuple[tuple, str | None]:
        """(result for the whole chain, deepest repository symbol met on the way)."""
        head = chain[0]
        if head == "<super>":
            cls = self._enclosing_class(facts, scope)
            result = self.in_class(cls, chain[1], skip_self=True) if cls else EXTERNAL
            return result, (result[1] if result[0] == "sym" else None)
        rest = chain[1:]
        if head == "<expr>":
            result = OBJECT
        elif head == "<call>":
            made = self.chain(facts, scope, chain[1])
            result = ("instance", made[1]) if made[0] == "sym" and self._is_class(made[1]) else OBJECT
            if made[0] == "sym" and result is OBJECT and made[1] in self.defs:  # a factory: what it returns
                entry = self.defs[made[1]]
                d = entry[0].defs[entry[1]]
                if d.returns and d.kind != "class":
                    result = self.annotated(entry[0], d.parent, d.returns)
            rest = chain[2:]
        else:
            result = self.name(facts, scope, head)
        deepest = result[1] if result[0] == "sym" else None
        for attr in rest:
            kind = result[0]
            if kind == "sym":
                target = result[1]
                if target in self.modules:
                    result = self.member(target, attr, 1)
                elif self._is_class(target):
                    result = self.in_class(target, attr)
                else:
                    result = EXTERNAL  # attributes of functions (``f.cache_clear``) are not code
            elif kind == "module":
                result = self.member(result[1], attr, 1)
            elif kind == "instance":
                cls = result[1]
                result = self.in_class(cls, attr)
                if result[0] == "missing" or result is OBJECT:
                    typed = self.instance_attr(cls, attr)
                    if typed[0] not in ("instance", "container") and result[0] == "missing":
                        typed = self._getattr_type(cls)
                    if typed[0] in ("instance", "container"):  # an instance attribute of a pinned type
                        result = typed
                    elif result[0] == "missing":  # of unknown type, or a method of a subclass
                        result = ("dispatch", attr)
            elif result is OBJECT or kind in ("dispatch", "container"):
                result = ("dispatch", attr)
            else:
                return result, deepest
            if result[0] == "sym":
                deepest = result[1]
        return result, deepest

    def _getattr_type(self, cls: str) -> tuple:
        """What any missing attribute of an instance of ``cls`` is when its class (or a repository base) defines
        ``__getattr__`` with a return annotation naming a class (pluggy's ``HookRelay``: ``-> HookCaller``)."""
        found = self.in_class(cls, "__getattr__")
        if found[0] != "sym":
            return OBJECT
        facts, idx = self.defs[found[1]]
        d = facts.defs[idx]
        return self.annotated(facts, d.parent, d.returns) if d.returns else OBJECT

    def _nested(self, qname: str) -> list[str]:
        """The functions defined inside the function ``qname`` (at any depth)."""
        facts, idx = self.defs[qname]
        found, inside = [], {idx}
        for i in range(idx + 1, len(facts.defs)):
            d = facts.defs[i]
            if d.parent not in inside:
                if d.start > facts.defs[idx].end:
                    break
                continue
            inside.add(i)
            if d.kind == "function":
                found.append(d.qname)
        return found

    def _is_class(self, qname: str) -> bool:
        entry = self.defs.get(qname)
        return entry is not None and entry[0].defs[entry[1]].kind == "class"

    def _closure_fixtures(self, facts: FileFacts) -> dict[tuple[int, str], str]:
        """(nested def scope, name) -> fixture qname, for names a def nested in a test or fixture reads from the
        enclosing one's parameters (``def setup(): ... hooks``) where no closer scope binds them."""
        out: dict[tuple[int, str], str] = {}
        if not facts.fixture_params:
            return out
        fixtures = {}
        for owner, name in facts.fixture_params:
            found = self.fixture_def(facts, name)
            if found is not None:
                fixtures[owner, name] = found[1].qname
        if not fixtures:
            return out
        owners = {owner for owner, _ in fixtures}
        for scope, d in enumerate(facts.defs):
            parent = d.parent
            while parent >= 0 and parent not in owners:
                parent = facts.defs[parent].parent
            if parent < 0:
                continue
            for (owner, name), qname in fixtures.items():
                if owner != parent:
                    continue
                inner, shadowed = scope, False
                while inner != owner:  # a closer binding of the name hides the fixture
                    shadowed = shadowed or name in facts.scope_bindings[inner]
                    inner = facts.defs[inner].parent
                if not shadowed:
                    out[scope, name] = qname
        return out

    # -- one file ----------------------------------------------------------------------------
    def link(self, facts: FileFacts) -> tuple[list[Reference], list[Unresolved], set[str], set[str], list]:
        """References, unresolved uses, in-repo imported modules, method names called on unknown objects, and the
        (method, node id) pairs of the test methods pytest runs in the file's classes (:meth:`collected_tests`)."""
        path, module, defs = facts.path, facts.module, facts.defs
        refs: list[Reference] = []
        unresolved = list(facts.local_unresolved)
        imported: set[str] = set()
        dispatched: set[str] = set()

        def source_of(scope: int) -> str:
            return defs[scope].qname if scope >= 0 else module

        for scope, line, binding, text in facts.imports:
            if binding[0] == "module":
                result = self.module(binding[1])
                if result[0] == "sym":
                    imported.add(binding[1])
            else:
                result = self.member(binding[1], binding[2], 1)
                if binding[1] in self.modules:
                    imported.add(binding[1])
                if result[0] == "sym" and result[1] in self.modules:
                    imported.add(result[1])
            if result[0] == "sym":
                refs.append(Reference(source_of(scope), result[1], path, line, "import"))
            elif result[0] == "missing":
                unresolved.append(Unresolved(path, line, result[1], "unknown name"))
        for scope, star_module, line, _text in facts.star_imports:
            if star_module in self.modules:
                imported.add(star_module)
                refs.append(Reference(source_of(scope), star_module, path, line, "import"))
        for scope, name in sorted(facts.fixture_params):  # a test or fixture uses the fixtures it asks for
            found = self.fixture_def(facts, name)
            if found is not None and found[1].qname != defs[scope].qname:
                refs.append(Reference(defs[scope].qname, found[1].qname, path, defs[scope].line, "fixture"))
        method_names = self.method_names
        closures = self._closure_fixtures(facts)
        receivers: dict = {}  # (lookup scope, receiver chain) -> what it resolves to, for implicit refs
        for scope, lookup, line, kind, chain, text, obj_type in facts.refs:
            if closures and (lookup, chain[0]) in closures:  # a nested def using its test's fixture
                refs.append(Reference(source_of(scope), closures[lookup, chain[0]], path, line, "fixture"))
            if kind == "implicit":  # an operator or builtin running a dunder of an instance of a repository class
                if text.endswith("()") and self.name(facts, lookup, text[:-2]) is not EXTERNAL:
                    continue  # ``len`` rebound to something of the repository's: not the builtin
                key = (lookup, chain[:-1])
                receiver = receivers.get(key)
                if receiver is None:  # one operand often meets many operators: resolve it once
                    receiver = receivers[key] = self.chain(facts, lookup, chain[:-1])
                if receiver[0] == "instance":
                    found = self.in_class(receiver[1], chain[-1])
                    if found[0] == "sym":
                        refs.append(Reference(source_of(scope), found[1], path, line, "implicit"))
                continue
            result, deepest = self.walk(facts, lookup, chain)
            tag = result[0]
            if tag == "sym":
                target = result[1]
                refs.append(Reference(source_of(scope), target, path, line, kind))
                if kind == "call" and self._is_class(target):
                    for dunder in _CLASS_CALL:
                        found = self.in_class(target, dunder)
                        if found[0] == "sym":
                            refs.append(Reference(source_of(scope), found[1], path, line, "call"))
                continue
            if kind == "call" and tag == "instance":  # ``obj()`` runs its class's ``__call__``
                found = self.in_class(result[1], "__call__")
                if found[0] == "sym":
                    refs.append(Reference(source_of(scope), found[1], path, line, "implicit"))
            if deepest is not None:
                refs.append(Reference(source_of(scope), deepest, path, line, "attribute"))
            if kind != "call":
                continue
            if tag == "dispatch":
                dispatched.add(result[1])
                if result[1] in method_names and obj_type not in _LITERALS:
                    unresolved.append(Unresolved(path, line, text, "dynamic dispatch"))
            elif tag == "missing" or result is UNBOUND:
                unresolved.append(Unresolved(path, line, text, "unknown name"))
        for d in defs:  # a decorated def runs its decorator's wrappers, and so does the def that decorates it
            if not d.decorators:
                continue
            runner = d.parent  # the def whose run makes this one (a test defining a decorated helper or class)
            while runner >= 0 and defs[runner].kind == "class":
                runner = defs[runner].parent
            for chain in d.decorators:
                found = self.chain(facts, d.parent, chain)
                if found[0] == "sym" and found[1] in self.defs:
                    if self._is_class(found[1]):  # a class used as a decorator: its instance wraps the def
                        wrappers = [f"{found[1]}.{n}" for n in ("__init__", "__call__", "__get__")
                                    if f"{found[1]}.{n}" in self.defs]
                    else:
                        wrappers = self._nested(found[1])
                elif found[0] == "instance":  # ``@marker`` / ``@marker(...)``: its ``__call__`` and what that returns
                    call = self.in_class(found[1], "__call__")
                    wrappers = [call[1], *self._nested(call[1])] if call[0] == "sym" else []
                else:
                    continue
                refs.extend(Reference(d.qname, w, path, d.first_line, "implicit") for w in wrappers)
                if runner >= 0:
                    refs.extend(Reference(defs[runner].qname, w, path, d.first_line, "implicit") for w in wrappers)
        imported.discard(module)
        refs.sort(key=_by_line)
        unresolved.sort(key=_by_line)
        collected = self.collected_tests(facts) if facts.test_file else []
        return refs, unresolved, imported, dispatched, collected

