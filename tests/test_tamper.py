"""The tamper filter drops test files and pytest configuration from graded patches."""

import pytest

from repogym.envs.rewards.tamper import (config_files_touched, filter_patch, is_tamper_path, is_test_path, pytest_section,
                                 split_patch)


def file_patch(path):
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n")


@pytest.mark.parametrize("path, is_test", [
    ("tests/test_x.py", True), ("pkg/tests/helpers.py", True), ("test_a.py", True), ("pkg/a_test.py", True),
    ("conftest.py", True), ("sub/conftest.py", True), ("pytest.ini", True), ("tox.ini", True),
    ("pkg/core.py", False), ("pkg/testing_utils.py", False), ("setup.cfg", False), ("contest.py", False),
])
def test_is_test_path(path, is_test):
    assert is_test_path(path) is is_test


def test_filter_keeps_source_and_drops_tests():
    patch = file_patch("pkg/core.py") + file_patch("tests/test_core.py") + file_patch("conftest.py")
    kept, dropped = filter_patch(patch)
    assert [p.new_path for p in split_patch(kept)] == ["pkg/core.py"]
    assert dropped == ["tests/test_core.py", "conftest.py"]


def test_renaming_a_test_file_out_of_tests_is_dropped():
    patch = "diff --git a/tests/test_a.py b/pkg/a.py\nsimilarity index 100%\nrename from tests/test_a.py\nrename to pkg/a.py\n"
    kept, dropped = filter_patch(patch)
    assert kept == "" and "tests/test_a.py" in dropped


def test_pytest_section_detection():
    assert config_files_touched(file_patch("setup.cfg") + file_patch("pkg/x.py")) == ["setup.cfg"]
    before = "[metadata]\nname = x\n[tool:pytest]\naddopts = -q\n"
    assert pytest_section("setup.cfg", before) == pytest_section("setup.cfg", before.replace("name = x", "name = y"))
    assert pytest_section("setup.cfg", before) != pytest_section("setup.cfg", before + "python_files = *.py\n")
    toml = '[project]\nname = "x"\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    assert pytest_section("pyproject.toml", toml) != pytest_section("pyproject.toml", toml.replace("-q", "-p no:x"))
    assert pytest_section("pyproject.toml", toml) == pytest_section("pyproject.toml", toml.replace('"x"', '"y"'))


@pytest.mark.parametrize("path, dropped", [
    ("sitecustomize.py", True), ("src/usercustomize.py", True), ("calc.pth", True), ("lib/x.pth", True),
    ("pytest.toml", True), (".pytest.toml", True), (".pytest.ini", True), ("pkg/sitecustomize_helpers.py", False),
    ("pkg/pth.py", False), ("spec/check_core.py", False),
])
def test_start_up_hooks_and_every_pytest_config_file_are_tampering(path, dropped):
    assert is_tamper_path(path) is dropped


def test_the_task_s_own_test_files_are_protected_whatever_their_names():
    patch = file_patch("spec/check_core.py") + file_patch("pkg/core.py")
    kept, dropped = filter_patch(patch, protected=["spec/check_core.py"])
    assert [p.new_path for p in split_patch(kept)] == ["pkg/core.py"] and dropped == ["spec/check_core.py"]
    assert filter_patch(patch)[1] == []


@pytest.mark.parametrize("path, dropped", [
    ("json.py", True), ("pytest.py", True), ("py.py", True), ("pytest/__init__.py", True), ("_pytest/python.py", True),
    ("pluggy/__init__.py", True), ("src/json.py", True), ("src/pytest/__init__.py", True),
    ("os.cpython-311-x86_64-linux-gnu.so", True),
    ("calc/__pycache__/ops.cpython-311.pyc", True), ("calc/ops.pyc", True), ("evil.pyc", True),
    ("fake-1.0.dist-info/entry_points.txt", True), ("lib/x.egg-info/entry_points.txt", True),
    ("calc/json.py", False), ("calc/pytest_helpers.py", False), ("jsonlib.py", False), ("calc/ops.py", False),
    ("site/index.html", False), ("code/README.md", False), ("setup.py", False), ("src/calc/json.py", False),
])
def test_shadowing_modules_bytecode_and_distribution_metadata_are_tampering(path, dropped):
    assert is_tamper_path(path) is dropped


def test_every_standard_library_name_at_the_root_is_dropped_from_the_patch():
    import sys
    names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_"))[:40]
    patch = "".join(file_patch(f"{n}.py") for n in names) + file_patch("calc/ops.py")
    kept, dropped = filter_patch(patch)
    assert [p.new_path for p in split_patch(kept)] == ["calc/ops.py"] and dropped == [f"{n}.py" for n in names]
