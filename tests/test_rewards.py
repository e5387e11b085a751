"""Grading: statuses, per-test results, retries, and infrastructure errors and bugs of ours that never become a
plain 0."""

from dataclasses import replace

import pytest

from repogym.envs.core import bugs
from repogym.envs.core.errors import InternalError, SandboxError
from repogym.envs.rewards import EvalRecord, evaluate, grade
from repogym.envs.rewards.validate import changed_tests, validate_task
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.core.status import Status


@pytest.fixture
def factory(backend):
    return sandbox_factory(backend, {}, SandboxConfig(run_id="pytest"))


@pytest.mark.slow
def test_gold_resolves_and_empty_does_not(factory, tiny_task):
    gold = grade(tiny_task, tiny_task.patch, factory)
    assert gold.status == Status.RESOLVED
    assert set(gold.tests.values()) == {"passed"}
    empty = grade(tiny_task, "", factory)
    assert empty.status == Status.UNRESOLVED
    assert empty.tests["tests/test_hidden.py::test_clamp_above"] == "failed"


def test_a_patch_that_does_not_apply_is_patch_failed(factory, tiny_task):
    broken = tiny_task.patch.replace("high - 1", "something else entirely")
    record = grade(tiny_task, broken, factory)
    assert record.status == Status.PATCH_FAILED
    assert record.error["where"] == "rewards.apply_patch"


def test_a_test_missing_from_the_report_fails_closed(factory, tiny_task):
    # A patch that makes pytest exit before writing any report: nothing counts as passed.
    patch = tiny_task.patch + (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n"
        "@@ -0,0 +1,2 @@\n+import os\n+os._exit(0)\n")
    record = grade(tiny_task, patch, factory)
    assert record.status == Status.UNRESOLVED
    assert set(record.tests.values()) == {"missing"}
    assert record.error["message"] == "the test run left no report"  # no error shows in its output
    # A run that stops before any test (here an option no plugin provides) says why in the verdict.
    record = grade(replace(tiny_task, test_command=tiny_task.test_command + " --cov=calc"), tiny_task.patch, factory)
    assert record.status == Status.UNRESOLVED and set(record.tests.values()) == {"missing"}
    assert record.error["message"].startswith("the test run left no report (its last error: ")
    assert "unrecognized arguments: --cov=calc" in record.error["message"], record.error


def test_infra_errors_are_retried_once_then_reported_not_zeroed(tiny_task, backend):
    real = sandbox_factory(backend, {}, SandboxConfig(run_id="pytest"))
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise SandboxError("sandbox.test", "daemon hiccup")
        return real()

    record = grade(tiny_task, tiny_task.patch, flaky)
    assert record.status == Status.RESOLVED and record.attempts == 2

    def dead():
        raise SandboxError("sandbox.test", "daemon gone")

    record = grade(tiny_task, tiny_task.patch, dead)
    assert record.status == Status.INFRA_ERROR and record.attempts == 2
    assert record.error == {"where": "sandbox.test", "message": "daemon gone"}


@pytest.mark.slow
def test_validate_task_accepts_a_good_task_and_flags_a_wrong_one(factory, tiny_task):
    verdict = validate_task(tiny_task, factory)
    assert verdict.ok
    # A valid task gets its measured coverage map, with the run's cost beside the plain suite's; the env reads it.
    from repogym.envs.rewards.coverage_run import cached_map
    assert verdict.coverage.startswith("coverage map:") and "not measured" not in verdict.coverage, verdict.coverage
    assert cached_map(tiny_task) is not None and cached_map(tiny_task).functions
    from dataclasses import replace
    wrong = replace(tiny_task, FAIL_TO_PASS=["tests/test_ops.py::test_add_zero"],
                    PASS_TO_PASS=["tests/test_hidden.py::test_clamp_above"])
    verdict = validate_task(wrong, factory)
    assert not verdict.ok
    assert any("FAIL_TO_PASS passes without the fix" in p for p in verdict.problems)
    assert any("PASS_TO_PASS fails at the base" in p for p in verdict.problems)


def test_a_test_whose_outcome_changes_between_grades_of_one_patch_is_flaky():
    def record(**tests):
        return EvalRecord("t", Status.RESOLVED, tests={k.replace("_", "::"): v for k, v in tests.items()})

    same = [record(a_x="passed", a_y="failed")] * 3
    assert changed_tests(same) == [] and changed_tests([]) == []
    flipped = same + [record(a_x="failed", a_y="failed")]
    assert changed_tests(flipped) == ["a::x"]
    assert changed_tests(same + [record(a_y="failed")]) == ["a::x"]  # absent from one grade is a change too


def test_validation_needs_a_gold_run_and_a_baseline(tiny_task):
    def no_sandbox():
        raise AssertionError("refused before any sandbox")

    for runs, gold_runs in ((1, 0), (0, 1)):
        with pytest.raises(ValueError, match="at least one baseline and one gold run"):
            validate_task(tiny_task, no_sandbox, runs=runs, gold_runs=gold_runs)


def test_a_task_whose_fix_is_in_the_test_framework_is_refused_not_graded(tiny_task):
    # pytest-dev/pytest: the fix is in src/_pytest, which the tamper filter drops from any patch.
    from dataclasses import replace
    fix = ("diff --git a/src/_pytest/python.py b/src/_pytest/python.py\n--- a/src/_pytest/python.py\n"
           "+++ b/src/_pytest/python.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n")
    task = replace(tiny_task, repo="pytest-dev/pytest", patch=fix + tiny_task.patch)

    def no_sandbox():
        raise AssertionError("a task that cannot be graded safely is not graded")

    verdict = validate_task(task, no_sandbox)
    assert not verdict.ok and verdict.reasons == ["harness_code"]
    assert "src/_pytest/python.py" in verdict.problems[0]


@pytest.mark.slow
def test_every_grading_plants_fresh_twins_and_lists_each_guard(factory, tiny_task):
    first, second = grade(tiny_task, tiny_task.patch, factory), grade(tiny_task, "", factory)
    assert first.status == Status.RESOLVED and second.status == Status.UNRESOLVED
    for record in (first, second):
        assert set(record.guards) == {"twin", "report", "exit_status", "summary"}
        assert set(record.guards.values()) == {"ok"} and len(record.twins) >= 2 and record.unprotected == []
        assert any(t.startswith("tests/test_hidden.py::test_") for t in record.twins)
        assert not set(record.twins) & set(record.tests)  # twins are never graded as the task's tests
        assert set(record.tests) == set(tiny_task.FAIL_TO_PASS + tiny_task.PASS_TO_PASS)  # under the task's own ids
        assert record.to_dict()["guards"] == record.guards and record.to_dict()["unprotected"] == []
    assert not set(first.twins) & set(second.twins)


@pytest.mark.slow
def test_a_task_with_no_fail_to_pass_test_is_never_resolved(factory, tiny_task):
    # Loading refuses such a task (tests/test_task_schema.py); one built in code still cannot pay.
    record = grade(replace(tiny_task, FAIL_TO_PASS=[]), "", factory)
    assert record.status == Status.UNRESOLVED and record.pass_to_pass["passed"] == record.pass_to_pass["total"] == 3


@pytest.mark.parametrize("broken", ["plant_twins", "snapshot"])  # while grading; while setting up the sandbox
def test_a_grading_bug_is_an_internal_error_never_a_zero_nor_infrastructure(factory, tiny_task, monkeypatch, broken):
    def bug(*args, **kwargs):
        raise KeyError("oops")
    monkeypatch.setattr(evaluate, broken, bug)
    with pytest.raises(InternalError, match="KeyError") as caught:  # strict, as the suite runs
        grade(tiny_task, tiny_task.patch, factory)
    assert caught.value.where == "rewards.grade"
    monkeypatch.setenv(bugs.STRICT_ENV, "0")
    record = grade(tiny_task, tiny_task.patch, factory)
    assert record.status == Status.INTERNAL_ERROR and record.attempts == 1
    assert record.error == {"where": "rewards.grade", "message": "KeyError: 'oops'"}
