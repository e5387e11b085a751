"""repogym.envs.analysis: symbols, resolution, reverse graph, incremental updates, diff impact, the CLI.

Every repository here is tiny and written out in full, so each expectation is an exact list.
"""

from __future__ import annotations

import argparse
import difflib
import json
import subprocess

import pytest

from repogym.envs.analysis import RepoIndex, Unresolved, analyze_diff
from repogym.envs.analysis import extract as extract_module
from repogym.envs.core.errors import ConfigError

REPO = {
    "app/__init__.py": b"",
    "app/core.py": b'''from . import helpers
from .helpers import fmt as format_it


def tracer(fn):
    return fn


class Base:
    def __init__(self, n):
        self.n = n

    def run(self):
        return self.step()

    def step(self):
        return helpers.clean(self.n)


class Child(Base):
    def step(self):
        value = super().step()
        return format_it(value)


@tracer
def outer(x):
    def inner(y):
        return y + 1
    return inner(x)


def make():
    return Child(1).run()
''',
    "app/helpers.py": b'''def clean(v):
    return v


def fmt(v):
    return str(clean(v))
''',
    "util/__init__.py": b"",
    "util/alias.py": b'''import app.core as c
from app import helpers as h


def ping():
    return c.make()


def pong():
    return list(map(h.clean, [1]))
''',
    "cyc.py": b'''def a(n):
    return b(n - 1) if n else 0


def b(n):
    return a(n)
''',
    "dyn.py": b'''from app.helpers import *


def call(obj, name):
    obj.run()
    return getattr(obj, name)
''',
    "broken.py": b"def ok():\n    return 1\n\ndef bad(:\n    return 2\n",
    "tests/test_core.py": b'''from app.core import make
from util.alias import ping


def test_make():
    assert make() == "1"


class TestAlias:
    def test_ping(self):
        assert ping()

    def helper(self):
        return 1
''',
}


@pytest.fixture(scope="module")
def index() -> RepoIndex:
    return RepoIndex.from_files(REPO)


def refs(index: RepoIndex, qname: str) -> list[tuple[str, int, str]]:
    return [(r.target, r.line, r.kind) for r in index.references(qname)]


def names(pairs) -> list[tuple[str, int]]:
    return [(s.name, d) for s, d in pairs]


def unified(path: str, old: bytes | None, new: bytes | None) -> str:
    """A git-style diff of one file (difflib, with a/ b/ prefixes and /dev/null for add/delete)."""
    a = (old or b"").decode().splitlines(keepends=True)
    b = (new or b"").decode().splitlines(keepends=True)
    head = f"diff --git a/{path} b/{path}\n"
    return head + "".join(difflib.unified_diff(a, b, f"a/{path}" if old is not None else "/dev/null",
                                               f"b/{path}" if new is not None else "/dev/null"))


# -- symbols ----------------------------------------------------------------------------------
def test_symbols_of_a_file_with_classes_methods_and_nested_functions(index):
    got = [(s.name, s.kind, s.line, s.end_line, s.signature) for s in index.symbols_in("app/core.py")]
    assert got == [
        ("app.core", "module", 1, 34, ""),
        ("app.core.tracer", "function", 5, 6, "(fn)"),
        ("app.core.Base", "class", 9, 17, ""),
        ("app.core.Base.__init__", "method", 10, 11, "(self, n)"),
        ("app.core.Base.run", "method", 13, 14, "(self)"),
        ("app.core.Base.step", "method", 16, 17, "(self)"),
        ("app.core.Child", "class", 20, 23, ""),
        ("app.core.Child.step", "method", 21, 23, "(self)"),
        ("app.core.outer", "function", 27, 30, "(x)"),
        ("app.core.outer.inner", "function", 28, 29, "(y)"),
        ("app.core.make", "function", 33, 34, "()"),
    ]
    assert index.symbols["app"].file == "app/__init__.py"


def test_test_ids_for_functions_and_methods_of_test_classes(index):
    tests = sorted((s.name, s.test_id) for s in index.symbols.values() if s.test_id)
    assert tests == [("tests.test_core.TestAlias.test_ping", "tests/test_core.py::TestAlias::test_ping"),
                     ("tests.test_core.test_make", "tests/test_core.py::test_make")]
    assert index.symbols["tests.test_core.TestAlias.helper"].test_id is None


# -- resolution -------------------------------------------------------------------------------
def test_self_calls_resolve_in_the_class_and_through_repo_bases(index):
    assert refs(index, "app.core.Base.run") == [("app.core.Base.step", 14, "call")]
    assert refs(index, "app.core.Base.step") == [("app.helpers.clean", 17, "call")]


def test_super_and_aliased_relative_import(index):
    # super().step() -> the base's method; format_it is `from .helpers import fmt as format_it`
    assert refs(index, "app.core.Child.step") == [("app.core.Base.step", 22, "call"),
                                                  ("app.helpers.fmt", 23, "call")]
    assert refs(index, "app.core.Child") == [("app.core.Base", 20, "name")]


def test_class_call_references_class_and_inherited_init(index):
    # Child(1).run(): the class, its (inherited) __init__, and run looked up on the instance
    assert refs(index, "app.core.make") == [("app.core.Base.run", 34, "call"), ("app.core.Child", 34, "call"),
                                            ("app.core.Base.__init__", 34, "call")]


def test_decorators_and_nested_functions(index):
    assert refs(index, "app.core.outer") == [("app.core.tracer", 26, "call"), ("app.core.outer.inner", 30, "call")]
    assert refs(index, "app.core.outer.inner") == []


def test_import_as_alias_and_callback_names(index):
    assert refs(index, "util.alias") == [("app.core", 1, "import"), ("app.helpers", 2, "import")]
    assert refs(index, "util.alias.ping") == [("app.core.make", 6, "call")]
    assert refs(index, "util.alias.pong") == [("app.helpers.clean", 10, "attribute")]
    assert refs(index, "app.helpers.fmt") == [("app.helpers.clean", 6, "call")]  # `str` is a builtin: dropped


def test_module_import_graph(index):
    assert index.module_imports == {
        "app": set(), "app.core": {"app", "app.helpers"}, "app.helpers": set(), "broken": set(), "cyc": set(),
        "dyn": {"app.helpers"}, "tests.test_core": {"app.core", "util.alias"}, "util": set(),
        "util.alias": {"app", "app.core", "app.helpers"}}


def test_unresolved_star_import_getattr_and_dynamic_dispatch(index):
    assert index.unresolved == [
        Unresolved("dyn.py", 1, "from app.helpers import *", "star import"),
        Unresolved("dyn.py", 5, "obj.run", "dynamic dispatch"),  # Base defines run
        Unresolved("dyn.py", 6, "getattr(obj, name)", "getattr"),
    ]
    assert refs(index, "dyn") == [("app.helpers", 1, "import")]


def test_unknown_names_and_missing_module_members_are_reported():
    idx = RepoIndex.from_files({"a.py": b"def f():\n    pass\n",
                                "b.py": b"import a\nfrom a import nope\n\ndef g():\n    a.gone()\n    mystery()\n"})
    assert idx.unresolved == [Unresolved("b.py", 2, "a.nope", "unknown name"),
                              Unresolved("b.py", 5, "a.gone", "unknown name"),
                              Unresolved("b.py", 6, "mystery", "unknown name")]


def test_locals_and_parameters_shadow_module_functions():
    idx = RepoIndex.from_files({"m.py": b"def f():\n    pass\n\ndef g(f):\n    f()\n\ndef h():\n    f = 1\n    f()\n"})
    assert refs(idx, "m.g") == [] and refs(idx, "m.h") == []


def test_syntax_error_is_listed_and_the_file_still_indexed(index):
    assert [(e.file, e.line, e.message) for e in index.parse_errors] == [("broken.py", 4, "missing ')'")]
    assert [s.name for s in index.symbols_in("broken.py")] == ["broken", "broken.ok", "broken.bad"]


def test_garbage_never_raises():
    idx = RepoIndex.from_files({"junk.py": b"\x00\xff def (((( class : : ]]]\n" * 20})
    assert [e.file for e in idx.parse_errors] == ["junk.py"]


# -- reverse graph ----------------------------------------------------------------------------
def test_dependents_with_distances(index):
    assert names(index.dependents(["app.helpers.clean"])) == [
        ("app.core.Base.step", 1), ("app.helpers.fmt", 1), ("util.alias.pong", 1),
        ("app.core", 2), ("app.core.Base.run", 2), ("app.core.Child.step", 2),
        ("app.core.make", 3), ("util.alias", 3)]
    assert names(index.dependents(["app.helpers.clean"], max_depth=1)) == [
        ("app.core.Base.step", 1), ("app.helpers.fmt", 1), ("util.alias.pong", 1)]


def test_call_cycle_terminates(index):
    assert names(index.dependents(["cyc.a"], max_depth=50)) == [("cyc.b", 1)]
    assert names(index.dependents(["cyc.a", "cyc.b"])) == []


def test_tests_reaching(index):
    assert [s.test_id for s in index.tests_reaching(["app.helpers.clean"])] == [
        "tests/test_core.py::TestAlias::test_ping", "tests/test_core.py::test_make"]
    assert [s.test_id for s in index.tests_reaching(["app.core.make"], max_depth=1)] == [
        "tests/test_core.py::test_make"]
    assert index.tests_reaching(["cyc.a"]) == []


# -- incremental updates ----------------------------------------------------------------------
def snapshot(idx: RepoIndex):
    every = sorted(idx.symbols)
    return (sorted(idx.symbols.values(), key=lambda s: s.name), {q: idx.references(q) for q in every},
            idx.unresolved, idx.parse_errors, idx.module_imports,
            {q: names(idx.dependents([q])) for q in every})


@pytest.mark.parametrize("path, new", [
    ("app/helpers.py", REPO["app/helpers.py"].replace(b"    return v\n", b"    v = v * 2\n    return v\n")),
    ("app/helpers.py", REPO["app/helpers.py"] + b"\n\ndef extra():\n    return fmt(1)\n"),
    ("app/core.py", REPO["app/core.py"].replace(b"def step(self):\n        return helpers",
                                                b"def step(self, k=2):\n        return helpers")),
    ("app/helpers.py", b"def renamed(v):\n    return v\n"),
    ("cyc.py", b"def a(n:\n    return b(n)\n"),
    ("new/mod.py", b"from app.core import make\n\ndef uses():\n    return make()\n"),
])
def test_update_file_matches_a_full_rebuild(index, path, new):
    updated = index.copy()
    updated.update_file(path, new)
    assert snapshot(updated) == snapshot(RepoIndex.from_files({**REPO, path: new}))
    assert snapshot(index) == snapshot(RepoIndex.from_files(REPO))  # the original is untouched


def test_update_file_deleting_a_module(index):
    updated = index.copy()
    updated.update_file("app/helpers.py", None)
    rest = {p: s for p, s in REPO.items() if p != "app/helpers.py"}
    assert snapshot(updated) == snapshot(RepoIndex.from_files(rest))
    assert "app.helpers.clean" not in updated.symbols


def test_update_file_reparses_only_that_file_incrementally(index, monkeypatch):
    calls = []
    real = extract_module.parse_source

    def counting(source, old_tree=None):
        calls.append(old_tree is not None)
        return real(source, old_tree)

    monkeypatch.setattr(extract_module, "parse_source", counting)
    updated = index.copy()
    trees_before = {p: updated._files[p].tree for p in REPO}
    updated.update_file("app/helpers.py", REPO["app/helpers.py"] + b"# tail\n")
    assert calls == [True]  # one parse, given the edited old tree
    assert all(updated._files[p].tree is trees_before[p] for p in REPO if p != "app/helpers.py")
    assert updated._files["app/helpers.py"].tree is not trees_before["app/helpers.py"]


def test_update_file_rejects_non_python_paths(index):
    with pytest.raises(ConfigError, match="expected a .py path"):
        index.copy().update_file("README.md", b"hi")


# -- diff impact ------------------------------------------------------------------------------
def impact(path: str, new: bytes | None, depth: int = 3) -> dict:
    before = RepoIndex.from_files(REPO)
    return analyze_diff(before, unified(path, REPO.get(path), new), {path: new}, max_depth=depth).to_dict()


def test_diff_modifying_a_function_body():
    result = impact("app/helpers.py", REPO["app/helpers.py"].replace(b"    return v\n", b"    return v or 0\n"))
    assert set(result) == {"changed", "dependents", "tests", "syntax_errors", "unresolved"}
    assert result["changed"] == [{"name": "app.helpers.clean", "kind": "function", "file": "app/helpers.py",
                                  "line": 1, "change": "modified", "signature_changed": False}]
    assert [(d["name"], d["distance"]) for d in result["dependents"]] == [
        ("app.core.Base.step", 1), ("app.helpers.fmt", 1), ("util.alias.pong", 1),
        ("app.core", 2), ("app.core.Base.run", 2), ("app.core.Child.step", 2),
        ("app.core.make", 3), ("util.alias", 3)]
    assert result["tests"] == [
        {"name": "tests.test_core.TestAlias.test_ping", "file": "tests/test_core.py", "line": 10,
         "test_id": "tests/test_core.py::TestAlias::test_ping", "source": "static"},
        {"name": "tests.test_core.test_make", "file": "tests/test_core.py", "line": 5,
         "test_id": "tests/test_core.py::test_make", "source": "static"}]
    assert result["syntax_errors"] == [] and result["unresolved"] == []


def test_diff_changing_a_signature():
    new = REPO["app/core.py"].replace(b"    def run(self):", b"    def run(self, fast=False):")
    result = impact("app/core.py", new, depth=1)
    assert result["changed"] == [{"name": "app.core.Base.run", "kind": "method", "file": "app/core.py",
                                  "line": 13, "change": "modified", "signature_changed": True}]
    assert [(d["name"], d["distance"]) for d in result["dependents"]] == [("app.core.make", 1)]
    assert [t["test_id"] for t in result["tests"]] == ["tests/test_core.py::TestAlias::test_ping",
                                                       "tests/test_core.py::test_make"]


def test_diff_adding_a_function():
    new = REPO["cyc.py"] + b"\n\ndef c():\n    return a(3)\n"
    result = impact("cyc.py", new)
    assert result["changed"] == [{"name": "cyc.c", "kind": "function", "file": "cyc.py", "line": 9,
                                  "change": "added", "signature_changed": False}]
    assert result["dependents"] == [] and result["tests"] == []


def test_diff_removing_a_function_lists_its_former_callers():
    new = REPO["app/helpers.py"].replace(b"def clean(v):\n    return v\n\n\n", b"")
    result = impact("app/helpers.py", new, depth=1)
    assert result["changed"] == [{"name": "app.helpers.clean", "kind": "function", "file": "app/helpers.py",
                                  "line": 1, "change": "removed", "signature_changed": False}]
    # found through the *before* graph: after the patch nothing resolves to clean any more
    assert [(d["name"], d["distance"]) for d in result["dependents"]] == [
        ("app.core.Base.step", 1), ("app.helpers.fmt", 1), ("util.alias.pong", 1)]
    assert [t["test_id"] for t in result["tests"]] == ["tests/test_core.py::TestAlias::test_ping",
                                                       "tests/test_core.py::test_make"]
    assert result["unresolved"] == [{"file": "app/helpers.py", "line": 2, "expression": "clean",
                                     "reason": "unknown name"}]


def test_diff_introducing_a_syntax_error():
    new = REPO["cyc.py"].replace(b"def b(n):", b"def b(n:")
    result = impact("cyc.py", new)
    assert result["syntax_errors"] == [{"file": "cyc.py", "line": 5, "message": "invalid syntax near 'def'"}]
    # an error that was already there is not news
    before = RepoIndex.from_files(REPO)
    edited = REPO["broken.py"] + b"\n# comment\n"
    again = analyze_diff(before, unified("broken.py", REPO["broken.py"], edited), {"broken.py": edited})
    assert again.syntax_errors == []


def test_diff_unresolved_lists_only_touched_files():
    new = REPO["dyn.py"] + b"\n\ndef more(x):\n    x.step()\n"
    result = impact("dyn.py", new)
    assert result["unresolved"] == [
        {"file": "dyn.py", "line": 1, "expression": "from app.helpers import *", "reason": "star import"},
        {"file": "dyn.py", "line": 5, "expression": "obj.run", "reason": "dynamic dispatch"},
        {"file": "dyn.py", "line": 6, "expression": "getattr(obj, name)", "reason": "getattr"},
        {"file": "dyn.py", "line": 10, "expression": "x.step", "reason": "dynamic dispatch"}]


def test_render_has_every_section():
    text = analyze_diff(RepoIndex.from_files(REPO), unified("cyc.py", REPO["cyc.py"], REPO["cyc.py"] + b"x = a(1)\n"),
                        {"cyc.py": REPO["cyc.py"] + b"x = a(1)\n"}).render()
    assert text.splitlines()[:5] == ["changed (1)", "  cyc  cyc.py:1  (modified)", "dependents (0)", "  (none)",
                                     "tests (0)"]


# -- CLI --------------------------------------------------------------------------------------
def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_cli_analyze_rev_range_on_a_real_git_repo(tmp_path, capsys):
    repo = tmp_path / "repo"
    for path, source in REPO.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(source)
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (repo / "app/helpers.py").write_bytes(REPO["app/helpers.py"].replace(b"return v\n", b"return -v\n"))
    (repo / "cyc.py").unlink()
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")

    from repogym.cli import analyze
    parser = argparse.ArgumentParser()
    analyze.add_parser(parser.add_subparsers())
    args = parser.parse_args(["analyze", "--repo", str(repo), "--rev", "HEAD~1..HEAD", "--json", "--depth", "1"])
    assert args.func(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"changed", "dependents", "tests", "syntax_errors", "unresolved"}
    assert [(c["name"], c["change"]) for c in result["changed"]] == [
        ("app.helpers.clean", "modified"), ("cyc", "removed"), ("cyc.a", "removed"), ("cyc.b", "removed")]
    assert [(d["name"], d["distance"]) for d in result["dependents"]] == [
        ("app.core.Base.step", 1), ("app.helpers.fmt", 1), ("util.alias.pong", 1)]
    assert [t["test_id"] for t in result["tests"]] == ["tests/test_core.py::TestAlias::test_ping",
                                                       "tests/test_core.py::test_make"]

    # no --rev: uncommitted changes against HEAD, rendered as text
    (repo / "app/core.py").write_bytes(REPO["app/core.py"].replace(b"def make():", b"def make(n=1):"))
    args = parser.parse_args(["analyze", "--repo", str(repo)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "app.core.make  app/core.py:33  (modified, signature changed)" in out
    assert "tests/test_core.py::test_make  tests/test_core.py:5" in out


# -- source roots: module names are import names ----------------------------------------------------------------
_SRC_PACKAGE = {
    "src/cart/__init__.py": b"from .core import total\n",
    "src/cart/core.py": b"def total(prices):\n    return sum(prices)\n\n\ndef describe(prices):\n    return total(prices)\n",
    "tests/test_cart.py": b"from cart import total\nfrom cart.core import describe\n\n\n"
                          b"def test_total():\n    assert total([1]) == 1\n\n\n"
                          b"def test_describe():\n    assert describe([1]) == 1\n",
}


@pytest.mark.parametrize("packaging", [
    {"pyproject.toml": b'[tool.setuptools.packages.find]\nwhere = ["src"]\n'},
    {"pyproject.toml": b'[tool.setuptools.package-dir]\n"" = "src"\n'},
    {"pyproject.toml": b'[tool.hatch.build.targets.wheel]\npackages = ["src/cart"]\n'},
    {"pyproject.toml": b'[tool.poetry]\npackages = [{include = "cart", from = "src"}]\n'},
    {"setup.cfg": b"[options]\npackage_dir =\n    =src\n\n[options.packages.find]\nwhere = src\n"},
    {"setup.py": b'from setuptools import setup, find_packages\nsetup(package_dir={"": "src"}, '
                 b'packages=find_packages(where="src"))\n'},
    {},  # no packaging data: src/ holding a package is a root by layout
], ids=["setuptools-find", "setuptools-package-dir", "hatch", "poetry", "setup.cfg", "setup.py", "layout"])
def test_a_src_layout_is_named_by_import_names_and_its_tests_are_found(packaging):
    index = RepoIndex.from_files({**_SRC_PACKAGE, **packaging})
    assert index.source_roots == ("src", "")
    assert "cart.core.total" in index.symbols and not any(q.startswith("src.") for q in index.symbols)
    assert index.module_of("src/cart/core.py") == "cart.core" and index.module_of("tests/test_cart.py") == "tests.test_cart"
    assert sorted(s.test_id for s in index.tests_reaching(["cart.core.total"])) == [
        "tests/test_cart.py::test_describe", "tests/test_cart.py::test_total"]
    assert "cart.core.describe" in {s.name for s, _ in index.dependents(["cart.core.total"], max_depth=1)}


def test_source_roots_given_override_and_a_flat_project_keeps_its_names(tmp_path, capsys):
    flat = {"cart/__init__.py": b"", "cart/core.py": b"def total():\n    return 1\n",
            "pyproject.toml": b"[project]\nname = 'cart'\n"}
    assert RepoIndex.from_files(flat).source_roots == ("",) and "cart.core.total" in RepoIndex.from_files(flat).symbols
    # An explicit root wins over what the layout says (here: code under code/, which no convention names).
    odd = {"code/cart/__init__.py": b"", "code/cart/core.py": b"def total():\n    return 1\n",
           "tests/test_c.py": b"from cart.core import total\n\n\ndef test_t():\n    assert total()\n"}
    assert "code.cart.core.total" in RepoIndex.from_files(odd).symbols
    index = RepoIndex.from_files(odd, source_roots=["code/"])
    assert [s.test_id for s in index.tests_reaching(["cart.core.total"])] == ["tests/test_c.py::test_t"]
    # Broken packaging files never stop indexing: the layout decides.
    assert RepoIndex.from_files({**_SRC_PACKAGE, "pyproject.toml": b"[tool", "setup.py": b"setup(("}).source_roots \
        == ("src", "")

    # The CLI: --source-root on a repository whose packaging data says nothing.
    for path, source in odd.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(source)
    patch = tmp_path / "change.diff"
    patch.write_text("--- a/code/cart/core.py\n+++ b/code/cart/core.py\n@@ -1,2 +1,2 @@\n def total():\n-    return 1\n"
                     "+    return 2\n")
    from repogym.cli import analyze
    parser = argparse.ArgumentParser()
    analyze.add_parser(parser.add_subparsers())
    args = parser.parse_args(["analyze", "--repo", str(tmp_path), "--diff", str(patch), "--json", "--source-root", "code"])
    assert args.func(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in result["changed"]] == ["cart.core.total"]
    assert [t["test_id"] for t in result["tests"]] == ["tests/test_c.py::test_t"]


# -- receiver types: a method call through a variable whose class the syntax pins ---------------------------------
_SHOP = {
    "shop/__init__.py": b"",
    "shop/cart.py": b'''from typing import Optional


class Cart:
    def __init__(self, region):
        self.region = region

    def total(self):
        return 1

    def total_in_cents(self):
        return 100


class Ledger:
    def __init__(self):
        self.cart = Cart("eu")
        self.spare: "Cart | None" = None

    def settle(self):
        return self.cart.total() + self.spare.total_in_cents()


def make_cart() -> "Cart":
    return Cart("us")


def describe(cart: Cart):
    return cart.total_in_cents()


def maybe(cart: Optional[Cart] = None, other: "Cart" = None, third: Cart | None = None):
    return cart.total(), other.total(), third.total()


def built():
    c = make_cart()
    return c.total()


def opened():
    with Cart("eu") as c:
        return c.total_in_cents()


def ambiguous(flag):
    x = Cart("eu") if flag else None
    y = Cart("eu")
    y = Ledger()
    return x.total(), y.total()
''',
    "tests/conftest.py": b'''import pytest

from shop.cart import Cart


@pytest.fixture
def cart():
    yield Cart("eu")


@pytest.fixture
def annotated() -> Cart:
    return make()
''',
    "tests/test_cart.py": b'''import pytest

from shop.cart import Cart, Ledger


@pytest.fixture
def ledger():
    return Ledger()


def test_built_in_the_test():
    c = Cart("eu")
    assert c.total() == 1


def test_fixture_from_conftest(cart):
    assert cart.total_in_cents() == 100


def test_annotated_fixture(annotated):
    assert annotated.total()


def test_fixture_in_this_file(ledger):
    assert ledger.settle()


def test_untyped(thing):
    assert thing.total()
''',
}


def _callers(index, qname):
    return {s.name for s, _ in index.dependents([qname], max_depth=1)}


def test_receiver_types_from_constructors_annotations_attributes_and_fixtures():
    index = RepoIndex.from_files(_SHOP)
    total, cents = _callers(index, "shop.cart.Cart.total"), _callers(index, "shop.cart.Cart.total_in_cents")
    assert {"shop.cart.describe", "shop.cart.opened", "shop.cart.Ledger.settle"} <= cents
    assert {"shop.cart.maybe", "shop.cart.built", "shop.cart.Ledger.settle"} <= total
    assert "tests.test_cart.test_built_in_the_test" in total  # c = Cart("eu"); c.total()
    assert "tests.test_cart.test_fixture_from_conftest" in cents  # the conftest fixture yields a Cart
    assert "tests.test_cart.test_annotated_fixture" in total  # the fixture's return annotation
    assert "tests.test_cart.test_fixture_in_this_file" in _callers(index, "shop.cart.Ledger.settle")
    # Covering tests now reach through typed receivers, two calls deep.
    assert {s.test_id for s in index.tests_reaching(["shop.cart.Cart.total"])} >= {
        "tests/test_cart.py::test_built_in_the_test", "tests/test_cart.py::test_annotated_fixture",
        "tests/test_cart.py::test_fixture_in_this_file"}
    # Not guessed: a name bound to two classes, a conditional value, an untyped parameter with no fixture.
    assert "shop.cart.ambiguous" not in total and "tests.test_cart.test_untyped" not in total
    unresolved = {(u.file, u.expression) for u in index.unresolved if u.reason == "dynamic dispatch"}
    assert {("shop/cart.py", "x.total"), ("shop/cart.py", "y.total"), ("tests/test_cart.py", "thing.total")} <= unresolved


def test_receiver_types_follow_incremental_updates():
    index = RepoIndex.from_files(_SHOP)
    # The conftest fixture stops building a Cart: the test that used it is no longer a caller, as a fresh index says.
    new = _SHOP["tests/conftest.py"].replace(b'yield Cart("eu")', b"yield object()")
    index.update_file("tests/conftest.py", new)
    fresh = RepoIndex.from_files({**_SHOP, "tests/conftest.py": new})
    assert "tests.test_cart.test_fixture_from_conftest" not in _callers(index, "shop.cart.Cart.total_in_cents")
    assert _callers(index, "shop.cart.Cart.total_in_cents") == _callers(fresh, "shop.cart.Cart.total_in_cents")
    assert sorted(map(repr, index.unresolved)) == sorted(map(repr, fresh.unresolved))


def test_hostile_typing_cycles_and_annotations_end_and_stay_unresolved():
    """Code an agent writes reaches the receiver typing through inspect_diff: self-referential bindings, fixtures
    and attributes, and pathological annotations must end quickly, raise nothing, and pin nothing."""
    hostile = {
        "pkg/__init__.py": b"",
        "pkg/loop.py": b'''class A:
    def __init__(self):
        self.a = self.a
        self.b: "''' + b"[" * 2000 + b'''" = None

    def m(self):
        return self.a.m(), self.b.m()


def f() -> "f":
    return f()


def g(c: "Optional[Optional[''' + b"Optional[" * 500 + b'''A''' + b"]" * 502 + b'''"):
    c = c()
    x = f()
    return c.m(), x.m()
''',
        "tests/conftest.py": b"import pytest\n\n\n@pytest.fixture\ndef cart(cart):\n    return cart\n",
        "tests/test_loop.py": b"def test_cart(cart):\n    assert cart.m()\n",
        "setup.py": b"setup(package_dir=" + b"(" * 5000 + b")\n",
        "pyproject.toml": b"[tool]\n" + b"x = " + b"[" * 5000 + b"\n",
    }
    index = RepoIndex.from_files(hostile)
    assert index.source_roots == ("",)  # unreadable packaging data is no data
    assert index.dependents(["pkg.loop.A.m"], max_depth=1) == []
    assert {u.expression for u in index.unresolved if u.reason == "dynamic dispatch"} >= {"c.m", "x.m", "cart.m"}
    index.update_file("pkg/loop.py", hostile["pkg/loop.py"] + b"\n\ny = y()\n")  # and incrementally
    assert "pkg.loop" in index.symbols


_TYPES = {
    "pkg/__init__.py": b"",
    "pkg/version.py": b'''from typing import Final, Union


class Version:
    def __init__(self, text):
        self.text = text

    @property
    def epoch(self):
        return 0

    def is_prerelease(self):
        return False


UnparsedVersion = Union[Version, str]


def canonicalize(version: Version | str):
    if isinstance(version, str):
        parsed = Version(version)
    else:
        parsed = version
    return parsed.epoch


def contains(item: UnparsedVersion):
    if not isinstance(item, Version):
        item = Version(item)
    return item.is_prerelease()


class Root:
    def get(self, name) -> "Sub":
        return Sub(self)


class Sub:
    def __init__(self, root: Root):
        self.root = root


class Manager:
    def __init__(self):
        self.trace: Final[Sub] = Root().get("manager")

    def versions(self) -> list[Version] | None:
        return [Version("1")]

    def pairs(self) -> tuple[Version, Root]:
        return Version("1"), Root()

    def tracing(self):
        return self.trace.root.get("hook")

    def unregister(self):
        for version in self.versions():
            version.is_prerelease()
        found = self.versions()
        return [v.epoch for v in found]

    def mixed(self, either: Union[Version, Root]):
        for one in self.pairs():
            one.is_prerelease()
        return either.get("x")
''',
    "tests/test_bench.py": b'''import pytest

from pkg.version import canonicalize


def helper():
    return 1


@pytest.fixture
def helpers():
    return [helper for _ in range(3)]


def test_speed(helpers, benchmark):
    def setup():
        return helpers + []

    def shadowed(helpers=None):
        return helpers

    benchmark(canonicalize, setup=setup)
''',
}


def test_receiver_types_through_unions_with_scalars_aliases_loops_and_wrapped_annotations():
    index = RepoIndex.from_files(_TYPES)
    v = "pkg.version."
    assert f"{v}canonicalize" in _callers(index, f"{v}Version.epoch")  # Version(v) or v: Version | str
    assert f"{v}contains" in _callers(index, f"{v}Version.is_prerelease")  # the UnparsedVersion alias
    assert f"{v}Manager.tracing" in _callers(index, f"{v}Root.get")  # Final[Sub], then Sub.root: Root
    assert f"{v}Manager.unregister" in _callers(index, f"{v}Version.is_prerelease")  # for x in list[Version] | None
    assert f"{v}Manager.unregister" in _callers(index, f"{v}Version.epoch")  # a comprehension over a typed list
    # Not guessed: a tuple of two classes, a union of two classes.
    assert f"{v}Manager.mixed" not in _callers(index, f"{v}Version.is_prerelease")
    assert f"{v}Manager.mixed" not in _callers(index, f"{v}Root.get")
    unresolved = {u.expression for u in index.unresolved if u.reason == "dynamic dispatch"}
    assert {"one.is_prerelease", "either.get"} <= unresolved


def test_bare_names_in_comprehensions_and_operators_and_fixtures_used_by_nested_defs():
    index = RepoIndex.from_files(_TYPES)
    assert "tests.test_bench.helpers" in _callers(index, "tests.test_bench.helper")  # [helper for _ in ...]
    users = _callers(index, "tests.test_bench.helpers")
    assert {"tests.test_bench.test_speed", "tests.test_bench.test_speed.setup"} <= users  # closure over the fixture
    assert "tests.test_bench.test_speed.shadowed" not in users  # its own parameter hides the fixture


def test_annotation_chains_pin_one_class_or_nothing():
    chain = extract_module.annotation_chain
    of = extract_module.ELEMENTS
    assert chain("Final[m.Cart]") == ("m", "Cart") == chain("Annotated[m.Cart, 'x']")
    assert chain("Union[Cart, str, None]") == ("Cart",) == chain("'Cart' | bytes")
    assert chain("Sequence[Cart]") == (of, "Cart") == chain("tuple[Cart, ...]") == chain("Optional[list['Cart']]")
    for nothing in ("Union[Cart, Ledger]", "tuple[Cart, Ledger]", "list[list[Cart]]", "list[" * 3000 + "A" + "]" * 3000,
                    "str | int"):
        assert chain(nothing) is None


# -- implicit calls (issue 45): what runs without its name being written -------------------------------------------
IMPLICIT = {
    "box/__init__.py": b"",
    "box/store.py": b'''import functools


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


class Store:
    def __init__(self):
        self.data = {}

    def __setitem__(self, key, value):
        self.data[key] = value

    def __getitem__(self, key):
        return self.data[key]

    def __delitem__(self, key):
        del self.data[key]

    def __len__(self):
        return len(self.data)

    def __iter__(self):
        return iter(self.data)

    def __contains__(self, key):
        return key in self.data

    def __eq__(self, other):
        return self.data == other.data

    def __add__(self, other):
        return Store()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self):
        return 1

    def save(self):
        return self.write()

    def write(self):
        return 0


class Cached(Store):
    def write(self):
        return super().write() + 1


class A:
    def hello(self):
        return "A"


class B(A):
    def hello(self):
        return "B" + super().hello()


class C(A):
    def hello(self):
        return "C" + super().hello()


class D(B, C):
    def hello(self):
        return super().hello()


@logged
def shout(text):
    return text.upper()
''',
    "tests/__init__.py": b"",
    "tests/mixins.py": b'''from box.store import Store


class StoreChecks:
    def make(self):
        return Store()

    def test_len(self):
        assert len(self.make()) == 0

    def helper(self):
        return 1
''',
    "tests/test_store.py": b'''import unittest

from box.store import Cached, Store, shout
from tests.mixins import StoreChecks


class TestPlain(StoreChecks):
    pass


class TestCached(StoreChecks):
    def make(self):
        return Cached()


class Base(unittest.TestCase):
    def test_in_base(self):
        pass


class CachedCase(Base):
    def test_own(self):
        pass


def test_item():
    s = Store()
    s["k"] = 1
    assert s["k"] == 1
    del s["k"]


def test_protocols():
    s = Store()
    other: Store = Store()
    assert "k" not in s
    assert s == other
    s + other
    for _ in s:
        pass
    with Store() as t:
        t()


def test_save_through_the_base():
    s: Store = Store()
    s.save()


def test_shout():
    assert shout("a") == "A"
''',
}


@pytest.fixture(scope="module")
def implicit() -> RepoIndex:
    return RepoIndex.from_files(IMPLICIT)


def test_operators_and_builtins_reach_dunders_of_typed_receivers(implicit):
    called = {r.target.rpartition(".")[2] for r in implicit.references("tests.test_store.test_item")}
    assert {"__init__", "__setitem__", "__getitem__", "__delitem__"} <= called
    called = {r.target.rpartition(".")[2] for r in implicit.references("tests.test_store.test_protocols")}
    assert {"__contains__", "__eq__", "__add__", "__iter__", "__enter__", "__exit__", "__call__"} <= called
    assert ("box.store.Store.__len__", "implicit") in {(r.target, r.kind) for r in
                                                       implicit.references("tests.mixins.StoreChecks.test_len")}
    # ``len(self.data)`` on a dict: nothing of the repository's, and nothing reported as unresolved
    assert not [u for u in implicit.unresolved if "__" in u.expression]


def test_super_follows_the_c3_mro(implicit):
    # D(B, C): D's MRO is D, B, C, A, so super() in B would go to C on a D, but statically B's own MRO says A;
    # D's super().hello() goes to B (the first after D), and the MRO itself is C3's
    from repogym.envs.analysis.resolve import Resolver
    assert Resolver(implicit).mro("box.store.D")[0] == ["box.store.D", "box.store.B", "box.store.C", "box.store.A"]
    assert [r.target for r in implicit.references("box.store.D.hello")] == ["box.store.B.hello"]


def test_mixin_tests_are_named_under_each_class_that_runs_them(implicit):
    assert implicit.test_ids("tests.mixins.StoreChecks.test_len") == [
        "tests/test_store.py::TestCached::test_len", "tests/test_store.py::TestPlain::test_len"]
    assert implicit.test_ids("tests.mixins.StoreChecks.helper") == []
    # a unittest case through a base of the repository: its own tests and the inherited one
    assert implicit.test_ids("tests.test_store.Base.test_in_base") == [
        "tests/test_store.py::Base::test_in_base", "tests/test_store.py::CachedCase::test_in_base"]
    assert implicit.test_ids("tests.test_store.CachedCase.test_own") == ["tests/test_store.py::CachedCase::test_own"]
    assert implicit.test_symbol("tests/test_store.py::TestPlain::test_len[1]").name == \
        "tests.mixins.StoreChecks.test_len"


def _tests_of_edit(index: RepoIndex, files: dict, path: str, old: bytes, new: bytes, coverage=None) -> dict:
    after = files[path].replace(old, new)
    assert after != files[path]
    analysis = analyze_diff(index, unified(path, files[path], after), {path: after}, coverage=coverage)
    return {t["test_id"]: t["source"] for t in analysis.tests}


def test_a_changed_dunder_finds_the_tests_using_its_operator(implicit):
    found = _tests_of_edit(implicit, IMPLICIT, "box/store.py", b"        return len(self.data)\n",
                           b"        return len(self.data) + 0\n")
    assert set(found) == {"tests/test_store.py::TestCached::test_len", "tests/test_store.py::TestPlain::test_len"}


def test_an_override_is_reached_through_calls_on_the_base_type(implicit):
    # Cached.write overrides Store.write: Store.save's ``self.write()`` may run it, so the tests calling save count
    found = _tests_of_edit(implicit, IMPLICIT, "box/store.py", b"        return super().write() + 1\n",
                           b"        return super().write() + 2\n")
    assert "tests/test_store.py::test_save_through_the_base" in found


def test_a_decorator_wrapper_is_reached_through_the_decorated_function(implicit):
    assert ("box.store.logged.wrapper", "implicit") in {(r.target, r.kind) for r in implicit.references("box.store.shout")}
    found = _tests_of_edit(implicit, IMPLICIT, "box/store.py", b"        return fn(*args)\n",
                           b"        return fn(*args) or None\n")
    assert set(found) == {"tests/test_store.py::test_shout"}


def test_attributes_of_a_class_with_an_annotated_getattr_and_a_bare_final_annotation():
    index = RepoIndex.from_files({
        "relay.py": b'''from typing import Final


class Caller:
    def __call__(self, **kw):
        return kw


class Relay:
    def __getattr__(self, name: str) -> Caller: ...


class Manager:
    def __init__(self):
        self.hook: Final = Relay()
''',
        "tests/test_relay.py": b'''from relay import Manager


def test_call():
    pm = Manager()
    pm.hook.anything(arg=1)
'''})
    assert ("relay.Caller.__call__", "implicit") in {(r.target, r.kind) for r in index.references("tests.test_relay.test_call")}
