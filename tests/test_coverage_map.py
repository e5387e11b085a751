"""The measured coverage map (issue 45): the probe plugin on a real pytest run, the map's names and form, coverage.py
data files, covering tests held against the map (measured where it saw the code, static elsewhere), the CLI, and the
measuring run in a sandbox (slow)."""

from __future__ import annotations

import ast
import difflib
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace

import pytest

from repogym.envs.analysis import RepoIndex, analyze_diff
from repogym.envs.analysis.coverage import (PROBE, CoverageMap, cached, from_coverage_db, from_probe, load, read_map,
                                            save)
from repogym.envs.core.errors import ConfigError

REPO = {
    "pkg/__init__.py": b"",
    "pkg/core.py": b'''import functools


def deco(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


@deco
def double(x):
    return 2 * x


def evens(n):
    for i in range(n):
        yield double(i)


class Box:
    size = 3

    def __init__(self, items):
        self.items = list(items)

    def __len__(self):
        return len(self.items)

    def total(self):
        return sum(x for x in self.items)


def unused():
    return 0
''',
    "tests/__init__.py": b"",
    "tests/checks.py": b'''from pkg.core import Box


class LenChecks:
    def test_len(self):
        assert len(Box([1, 2])) == 2
''',
    "tests/test_core.py": b'''import pytest

from pkg.core import Box, double, evens
from tests.checks import LenChecks


@pytest.mark.parametrize("x", [1, 2])
def test_double(x):
    assert double(x) == 2 * x


def test_evens():
    assert list(evens(3)) == [0, 2, 4]


def test_total():
    class Local:
        pass
    assert Box([1, 2]).total() == 3


class TestA(LenChecks):
    pass


class TestB(LenChecks):
    pass
''',
}


def _write(root, files: dict) -> None:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """(index, map) from one real pytest run of REPO under the probe (this interpreter)."""
    root = tmp_path_factory.mktemp("cov") / "repo"
    _write(root, REPO)
    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "probe_under_test.py").write_bytes(PROBE.read_bytes())
    out = root.parent / "report.json"
    env = {**os.environ, "PYTHONPATH": f"{plugins}{os.pathsep}{root}", "REPOGYM_COVERAGE_OUT": str(out),
           "REPOGYM_COVERAGE_ROOT": str(root), "PYTEST_ADDOPTS": "", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "probe_under_test",
                           "tests"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    index = RepoIndex.from_files(REPO)
    return index, from_probe(json.loads(out.read_text()), index, key="k"), json.loads(out.read_text())


def test_the_probe_imports_only_the_standard_library():
    imported = set()
    for node in ast.walk(ast.parse(PROBE.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            imported.add(node.module.partition(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names)


def test_the_probe_records_functions_per_test_named_as_the_index_names_them(measured):
    index, cmap, report = measured
    assert cmap.tests_of("pkg.core.double") == {"tests/test_core.py::test_double", "tests/test_core.py::test_evens"}
    assert cmap.tests_of("pkg.core.deco.wrapper") == {"tests/test_core.py::test_double",
                                                      "tests/test_core.py::test_evens"}
    assert cmap.tests_of("pkg.core.evens") == {"tests/test_core.py::test_evens"}  # a generator's body
    assert cmap.tests_of("pkg.core.Box.total") == {"tests/test_core.py::test_total"}
    # the mixin's test under each class that runs it, parameters left out
    assert cmap.tests_of("tests.checks.LenChecks.test_len") == {"tests/test_core.py::TestA::test_len",
                                                                "tests/test_core.py::TestB::test_len"}
    assert cmap.tests_of("pkg.core.Box.__len__") == cmap.tests_of("tests.checks.LenChecks.test_len")
    assert cmap.tests_of("pkg.core.unused") == frozenset()
    assert "tests/test_core.py::test_double" in cmap.tests and len(cmap.tests) == 5
    # module and class bodies (import time), comprehensions and code outside the tree are never recorded
    names = {name for _path, _line, name in report["functions"]}
    assert not {"<module>", "Box", "Local", "<genexpr>"} & names
    assert all(not path.startswith(("/", "<")) for path, _line, _name in report["functions"])
    # the index names each test as pytest does, so static and measured ids meet
    assert index.test_ids("tests.checks.LenChecks.test_len") == sorted(cmap.tests_of("tests.checks.LenChecks.test_len"))


def _analyze(index: RepoIndex, path: str, old: bytes, new: bytes, cmap=None) -> dict:
    before = REPO[path]
    after = before.replace(old, new)
    assert after != before
    diff = "".join(difflib.unified_diff(before.decode().splitlines(True), after.decode().splitlines(True),
                                        f"a/{path}", f"b/{path}"))
    return {t["test_id"]: t["source"] for t in analyze_diff(index, diff, {path: after}, coverage=cmap).tests}


def test_a_modified_function_gets_exactly_its_measured_tests(measured):
    index, cmap, _ = measured
    found = _analyze(index, "pkg/core.py", b"    return 2 * x\n", b"    return x + x\n", cmap)
    assert found == {"tests/test_core.py::test_double": "measured", "tests/test_core.py::test_evens": "measured"}
    # a function no test ran is covered by none, though the static graph could guess none either
    assert _analyze(index, "pkg/core.py", b"    return 0\n", b"    return 1\n", cmap) == {}
    # without the map: the static graph alone
    assert set(_analyze(index, "pkg/core.py", b"    return 2 * x\n", b"    return x + x\n").values()) == {"static"}


def test_new_code_and_changed_signatures_add_static_tests_through_measured_callers(measured):
    index, cmap, _ = measured
    # a new helper called by ``total``: the map has never seen it, so its tests are total's measured ones
    found = _analyze(index, "pkg/core.py", b"        return sum(x for x in self.items)\n",
                     b"        return helper(sum(x for x in self.items))\n\n\ndef helper(v):\n    return v\n", cmap)
    assert found == {"tests/test_core.py::test_total": "measured"}  # total itself changed: measured wins
    found = _analyze(index, "pkg/core.py", b"def unused():\n    return 0\n",
                     b"def unused():\n    return 0\n\n\ndef fresh():\n    return Box([]).total()\n", cmap)
    assert found == {}  # new and called by nothing
    found = _analyze(index, "pkg/core.py", b"def double(x):\n", b"def double(x, y=0):\n", cmap)
    assert found["tests/test_core.py::test_double"] == "measured"
    assert all(source in ("measured", "static") for source in found.values())


def test_a_class_level_change_takes_the_measured_tests_of_its_methods(measured):
    index, cmap, _ = measured
    found = _analyze(index, "pkg/core.py", b"    size = 3\n", b"    size = 4\n", cmap)
    assert found == {t: "measured" for t in cmap.tests_of("pkg.core.Box.__init__") | cmap.tests_of("pkg.core.Box.total")
                     | cmap.tests_of("pkg.core.Box.__len__")}


def test_a_map_that_saw_no_test_is_no_map(measured):
    index, _, _ = measured
    found = _analyze(index, "pkg/core.py", b"    return 2 * x\n", b"    return x + x\n", CoverageMap())
    assert found and set(found.values()) == {"static"}


def test_the_map_round_trips_and_is_cached_by_key(measured, tmp_path):
    _, cmap, _ = measured
    again = CoverageMap.from_json(json.loads(json.dumps(cmap.to_json())))
    assert again.functions == cmap.functions and again.tests == cmap.tests and again.key == "k"
    save(cmap, tmp_path)
    assert load(tmp_path, "k").functions == cmap.functions
    assert load(tmp_path, "other") is None
    assert cached("k", tmp_path) is cached("k", tmp_path)  # read once
    with pytest.raises(ConfigError, match="coverage map"):
        CoverageMap.from_json({"version": 99})


def _coverage_db(path, root, contexts: dict[str, dict[str, list[int]]]) -> None:
    """A data file in coverage.py's schema (the tables its reader uses): context -> file -> lines."""
    db = sqlite3.connect(path)
    db.executescript("create table file (id integer primary key, path text);"
                     "create table context (id integer primary key, context text);"
                     "create table line_bits (file_id integer, context_id integer, numbits blob);")
    files = {}
    for c_id, (context, per_file) in enumerate(contexts.items(), 1):
        db.execute("insert into context values (?, ?)", (c_id, context))
        for name, lines in per_file.items():
            if name not in files:
                files[name] = len(files) + 1
                db.execute("insert into file values (?, ?)", (files[name], str(root / name)))
            bits = bytearray(max(lines) // 8 + 1)
            for n in lines:
                bits[n // 8] |= 1 << (n % 8)
            db.execute("insert into line_bits values (?, ?, ?)", (files[name], c_id, bytes(bits)))
    db.commit()
    db.close()


def test_a_coverage_py_data_file_with_test_contexts(tmp_path):
    index = RepoIndex.from_files(REPO)
    # pkg/core.py: double's body is line 13, its def line 12 (import time); Box.__len__'s body is line 28, total's 31
    _coverage_db(tmp_path / ".coverage", tmp_path, {
        "": {"pkg/core.py": [1, 4, 12]},
        "tests/test_core.py::test_double[1]|run": {"pkg/core.py": [13]},
        "tests/test_core.py::test_total|setup": {"pkg/core.py": [12]},
        "tests/test_core.py::test_total|run": {"pkg/core.py": [31]},
        "tests/test_core.py::TestA::test_len|run": {"pkg/core.py": [28], "tests/checks.py": [6]},
    })
    cmap = read_map(tmp_path / ".coverage", index, tmp_path)
    assert cmap.tests_of("pkg.core.double") == {"tests/test_core.py::test_double"}
    assert cmap.tests_of("pkg.core.Box.total") == {"tests/test_core.py::test_total"}
    assert cmap.tests_of("pkg.core.Box.__len__") == {"tests/test_core.py::TestA::test_len"}
    assert cmap.tests_of("tests.checks.LenChecks.test_len") == {"tests/test_core.py::TestA::test_len"}
    assert cmap.tests_of("pkg.core.evens") == frozenset()
    assert cmap.knows("pkg/core.py") and not cmap.knows("tests/test_core.py")
    _coverage_db(tmp_path / "by_function", tmp_path, {"test_core.test_total": {"pkg/core.py": [28]}})
    with pytest.raises(ConfigError, match="cov-context=test"):
        from_coverage_db(tmp_path / "by_function", index, tmp_path)


def test_cli_analyze_takes_a_coverage_file(measured, tmp_path, capsys):
    from repogym.cli import main
    _, cmap, report = measured
    _write(tmp_path, REPO)
    (tmp_path / "report.json").write_text(json.dumps(report))
    old = REPO["pkg/core.py"]
    new = old.replace(b"    return 2 * x\n", b"    return x + x\n")
    (tmp_path / "change.diff").write_text("".join(difflib.unified_diff(
        old.decode().splitlines(True), new.decode().splitlines(True), "a/pkg/core.py", "b/pkg/core.py")))
    assert main(["analyze", "--repo", str(tmp_path), "--diff", str(tmp_path / "change.diff"), "--coverage",
                 str(tmp_path / "report.json"), "--json"]) == 0
    tests = json.loads(capsys.readouterr().out)["tests"]
    assert {(t["test_id"], t["source"]) for t in tests} == {("tests/test_core.py::test_double", "measured"),
                                                           ("tests/test_core.py::test_evens", "measured")}
    assert main(["analyze", "--repo", str(tmp_path), "--diff", str(tmp_path / "change.diff"), "--coverage",
                 str(tmp_path / "missing.json")]) != 0


def test_a_task_that_is_not_a_pytest_command_gets_no_map(tiny_task):
    from repogym.envs.rewards.coverage_run import describe, measure_coverage

    def no_sandbox():
        raise AssertionError("no sandbox should start")

    django = replace(tiny_task, setup={**tiny_task.setup, "runner": "django"},
                     test_command="./tests/runtests.py --verbosity 2")
    assert measure_coverage(django, no_sandbox) is None
    assert "not measured" in describe(None)


@pytest.mark.slow
def test_measure_coverage_in_a_sandbox_then_from_the_cache(tiny_task, backend):
    from repogym.envs.rewards.coverage_run import cached_map, describe, measure_coverage
    from repogym.envs.sandbox import SandboxConfig, sandbox_factory

    factory = sandbox_factory(backend, tiny_task.setup, SandboxConfig(run_id="pytest"))
    cmap = measure_coverage(tiny_task, factory, use_cache=False)
    assert cmap.tests_of("calc.ops.clamp") == {"tests/test_ops.py::test_clamp_inside"}
    assert cmap.tests_of("calc.ops.add") == {"tests/test_ops.py::test_add_zero"}
    assert cmap.info["plain_s"] > 0 and cmap.info["measured_s"] > 0 and not cmap.info["errors"]
    assert "2 tests" in describe(cmap) and "plain" in describe(cmap)

    def no_sandbox():
        raise AssertionError("a cached map needs no sandbox")

    assert measure_coverage(tiny_task, no_sandbox).functions == cmap.functions
    assert cached_map(tiny_task).functions == cmap.functions


def test_a_changed_fixture_keeps_the_tests_that_ask_for_it():
    files = {"tests/conftest.py": b'''import pytest


@pytest.fixture(scope="session")
def db():
    return {}
''', "tests/test_a.py": b'''def test_one(db):
    assert db == {}


def test_two(db):
    assert not db
'''}
    index = RepoIndex.from_files(files)
    cmap = CoverageMap({"tests.conftest.db": frozenset({"tests/test_a.py::test_one"}),
                        "tests.test_a.test_one": frozenset({"tests/test_a.py::test_one"}),
                        "tests.test_a.test_two": frozenset({"tests/test_a.py::test_two"})},
                       frozenset({"tests/test_a.py::test_one", "tests/test_a.py::test_two"}))
    after = files["tests/conftest.py"].replace(b"return {}", b"return {1: 2}")
    diff = "".join(difflib.unified_diff(files["tests/conftest.py"].decode().splitlines(True),
                                        after.decode().splitlines(True), "a/tests/conftest.py", "b/tests/conftest.py"))
    found = {t["test_id"]: t["source"] for t in analyze_diff(index, diff, {"tests/conftest.py": after},
                                                              coverage=cmap).tests}
    assert found == {"tests/test_a.py::test_one": "measured", "tests/test_a.py::test_two": "static"}
