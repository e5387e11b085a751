"""The builtin suite's long-horizon tasks: marked as such, and their bug far from a test that catches it.

Structural, from the static call graph (``repogym.envs.analysis``), on the fixed project plus the hidden tests: each
long task has a FAIL_TO_PASS test that calls or imports nothing from the files its gold patch touches and,
where the graph links that test to a function the gold patch changes, is at least three calls away from it.
"""

import shutil
import subprocess

import pytest

from repogym.envs.analysis import RepoIndex
from repogym.envs.analysis.diffs import parse_diff
from repogym.envs.analysis.extract import is_test_file
from repogym.envs.taskgen.horizon import distances_from_tests, nearest_target_files
from repogym.envs.tasks.suites import load_suite, task_repos_dir

MIN_DISTANCE = 3
LONG = [t for t in load_suite("builtin") if t.extra.get("horizon") == "long"]


def test_the_suite_has_at_least_eight_long_tasks_across_the_projects():
    assert len(LONG) >= 8
    assert {t.repo for t in LONG} == {"repogym/cfgparse", "repogym/schedkit", "repogym/tablekit"}


def _changed_functions(index, gold):
    """Innermost defs (in the fixed tree) around the lines the gold patch adds."""
    changed = set()
    for diff in parse_diff(gold):
        for line in diff.added:
            around = [s for s in index.symbols_in(diff.new_path)
                      if s.kind in ("function", "method") and s.line <= line <= s.end_line]
            if around:
                changed.add(max(around, key=lambda s: s.line).name)
    return changed


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """Per task: the index of the fixed project with the hidden tests applied."""
    out = {}
    for task in LONG:
        root = tmp_path_factory.mktemp(task.instance_id)
        shutil.copytree(task_repos_dir() / task.repo.split("/")[1] / "project", root, dirs_exist_ok=True)
        subprocess.run(["git", "apply", "-"], cwd=root, input=task.test_patch.encode(), check=True)
        out[task.instance_id] = RepoIndex.from_folder(root)
    return out


def far_tests(task, index):
    """``(test id, calls to the nearest changed function or None when the graph does not link them)`` for the
    FAIL_TO_PASS tests that call or import nothing in the gold patch's files and are not linked closer."""
    gold_files = {d.new_path for d in parse_diff(task.patch)}
    changed = _changed_functions(index, task.patch)
    assert changed, "the gold patch changes no function"
    distances = [distances_from_tests(index, f) for f in changed]
    tests = {s.test_id: s for s in index.symbols.values() if s.test_id}
    far = []
    for test_id in task.FAIL_TO_PASS:
        symbol = tests[test_id.split("[", 1)[0]]
        if nearest_target_files(index, symbol, is_test_file) & gold_files:
            continue
        linked = [by_test[symbol.test_id] for by_test in distances if symbol.test_id in by_test]
        if all(d >= MIN_DISTANCE for d in linked):
            far.append((test_id, min(linked, default=None)))
    return far


@pytest.mark.parametrize("task", LONG, ids=lambda t: t.instance_id)
def test_long_task_bug_is_far_from_a_failing_test(task, indexes):
    assert task.extra.get("min_turns", 0) >= 10 and task.difficulty >= 3
    assert task.patch.strip() and task.FAIL_TO_PASS
    assert far_tests(task, indexes[task.instance_id]), (
        f"every failing test calls into the patched files directly or is < {MIN_DISTANCE} calls from the bug")


def test_most_long_tasks_have_the_chain_visible_in_the_call_graph(indexes):
    """Calls the graph cannot resolve (``obj.method()``) hide some chains; most must still be measured."""
    measured = [t.instance_id for t in LONG if any(d is not None for _, d in far_tests(t, indexes[t.instance_id]))]
    assert len(measured) >= len(LONG) // 2, measured


def test_task_json_horizon_fields_are_checked():
    from repogym.envs.core.errors import ConfigError
    from repogym.envs.tasks.builtin import horizon_fields
    assert horizon_fields({"difficulty": 1}, "p/t") == {}  # absent stays absent: old records are unchanged
    assert horizon_fields({"horizon": "long", "min_turns": 12}, "p/t") == {"horizon": "long", "min_turns": 12}
    with pytest.raises(ConfigError, match=r"p/t/task.json: horizon: expected \"long\""):
        horizon_fields({"horizon": "short"}, "p/t")
    for bad in (0, True, "12"):
        with pytest.raises(ConfigError, match="min_turns: expected a positive integer"):
            horizon_fields({"min_turns": bad}, "p/t")
