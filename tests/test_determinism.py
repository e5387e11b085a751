"""Reward determinism: grading the same patch again gives the same record.

For each task the gold patch and the empty patch are graded several times; every grade of one patch must agree
exactly on the status and on the outcome of every graded test, gold must resolve and empty must not. A disagreement
names the task, the patch and the tests whose outcome changed (a flaky task, or a grader that is not deterministic),
rather than being retried away. (On docker, every builtin task's gold and empty patches are graded twice each by
test_builtin_suite's validation sweep, which fails on the same disagreements; ``repogym validate --gold-runs 5`` grades
the gold patch five times.)

Each grade gets a fresh sandbox, as episodes get them: a warm :class:`SandboxPool` per task (of sandboxes
health-checked and holding the base, as an env's grading pool keeps them) makes the next one ready while the
current grade runs, so reuse buys start-up time, never shared state.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest

from repogym.envs.rewards import EvalRecord, grade
from repogym.envs.rewards.evaluate import prepared
from repogym.envs.rewards.validate import changed_tests
from repogym.envs.core.status import Status
from repogym.envs.sandbox import SandboxConfig, make_sandbox
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.sandbox.pool import SandboxPool
from repogym.envs.tasks.repos import repo_path
from repogym.envs.tasks.schema import Task
from repogym.envs.tasks.suites import load_suite
from tests.conftest import require_backend

EVAL_TIMEOUT = 300.0
# One task per bundled repository, for the fast local run.
FAST_TASKS = ("repogym__cfgparse-list-trailing-comma", "repogym__schedkit-dispatch-tie-order",
              "repogym__tablekit-zero-header-label")


def disagreements(task: Task, label: str, records: list[EvalRecord], expected: str) -> list[str]:
    """What is wrong with the repeated grades of one patch: outcomes that differ between runs, or a wrong status."""
    problems = []
    statuses = [r.status for r in records]
    if len(set(statuses)) > 1:
        errors = [r.error for r in records]
        problems.append(f"{task.instance_id} [{label}]: statuses differ across runs: {statuses} (errors: {errors})")
    changed = {test: [r.tests.get(test, "<absent>") for r in records] for test in changed_tests(records)}
    if changed:
        problems.append(f"{task.instance_id} [{label}]: {len(changed)} test outcome(s) differ across runs: {changed}")
    wrong = [(i, r.status, r.error) for i, r in enumerate(records) if r.status != expected]
    if wrong:
        problems.append(f"{task.instance_id} [{label}]: expected {expected}, got (run, status, error) {wrong}")
    return problems


def check_task(task: Task, make: Callable[[], Sandbox], runs: int, empty_runs: int) -> tuple[list[str], float]:
    """Grade gold ``runs`` times and empty ``empty_runs`` times; the problems found and the seconds it took.

    As an env grades: from a warm pool of sandboxes health-checked and holding the base (``prepared``), the next one
    made ready while the current grade runs; each grade still gets a fresh sandbox."""
    start = time.monotonic()
    problems = []
    pool = SandboxPool(prepared(make, task), size=1)
    try:
        for label, patch, expected, times in (("gold", task.patch, Status.RESOLVED, runs),
                                              ("empty", "", Status.UNRESOLVED, empty_runs)):
            records = [grade(task, patch, pool.acquire, timeout=EVAL_TIMEOUT, checked=True) for _ in range(times)]
            problems += disagreements(task, label, records, expected)
    finally:
        pool.close()
    return problems, time.monotonic() - start


def check_tasks(tasks: list[Task], factory_for: Callable[[Task], Callable[[], Sandbox]], runs: int, empty_runs: int,
                workers: int) -> tuple[list[str], dict[str, float]]:
    """:func:`check_task` over ``tasks``, ``workers`` at a time; every problem, and the seconds per task."""
    with ThreadPoolExecutor(max_workers=workers) as executor:
        results = list(executor.map(lambda t: check_task(t, factory_for(t), runs, empty_runs), tasks))
    problems = [p for found, _ in results for p in found]
    return problems, {t.instance_id: seconds for t, (_, seconds) in zip(tasks, results)}


def report(capsys, what: str, wall: float, seconds: dict[str, float]) -> None:
    slowest = sorted(seconds.items(), key=lambda kv: -kv[1])[:3]
    with capsys.disabled():
        print(f"\n[determinism] {what}: {wall:.1f}s wall; slowest tasks: "
              + ", ".join(f"{task} {s:.1f}s" for task, s in slowest))


@pytest.mark.slow
def test_repeated_grades_agree_on_a_few_tasks_locally(capsys):
    require_backend("local")
    tasks = [t for t in load_suite("builtin") if t.instance_id in FAST_TASKS]
    assert len(tasks) == len(FAST_TASKS)

    def factory_for(task):
        # As the env does on this backend: the task's source repository (its whole history) is hidden.
        config = SandboxConfig(run_id="pytest-determinism", hidden_paths=(str(repo_path(task)),))
        return lambda: make_sandbox("local", config)

    start = time.monotonic()
    # Gold three times (flakiness there would flip the reward), empty twice: under 30 s on two busy cores.
    problems, seconds = check_tasks(tasks, factory_for, runs=3, empty_runs=2, workers=3)
    report(capsys, f"local, {len(tasks)} tasks x (3 gold + 2 empty) grades", time.monotonic() - start, seconds)
    assert problems == []
