"""Task validation: the gold patch resolves the task, the empty patch does not, no test is flaky, nothing leaks.

Per task: grade the gold patch once (which also says which FAIL_TO_PASS tests got no twin: :attr:`Validation.unprotected`)
and the empty patch three times (the baseline), and run the no-leak
check (:func:`repogym.envs.rewards.leaks.find_leaks`) in a sandbox made as an episode's would be. Problems found:
gold not resolved; a FAIL_TO_PASS test passing at base; a PASS_TO_PASS test failing at base; a way to the
fix inside the agent's sandbox (``leak: ...``); a gold patch in code the harness imports (the repository is
the test framework, pytest-dev/pytest: not graded safely, so not graded); tests whose baseline outcome changes between runs (flaky);
infrastructure errors (reported apart, not as task bugs). Each verdict also names its failed checks in
``reasons`` (short keys of :data:`REASONS`), so a caller such as the task generator can count drops by kind.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from repogym.envs.core.errors import ConfigError, InfraError, LocatedError
from repogym.envs.rewards.evaluate import grade
from repogym.envs.rewards.leaks import find_leaks
from repogym.envs.rewards.tamper import is_shadow_path
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.core.status import Status
from repogym.envs.tasks.patches import touched_paths
from repogym.envs.tasks.repos import snapshot
from repogym.envs.tasks.schema import Task

BASELINE_RUNS = 3
REASONS = {
    "gold_unresolved": "the gold patch does not resolve the task",
    "passes_without_fix": "a FAIL_TO_PASS test passes at the base commit (the empty patch is not a failure)",
    "p2p_fails_at_base": "a PASS_TO_PASS test fails at the base commit",
    "no_f2p": "the task has no FAIL_TO_PASS test",
    "leak": "the agent's sandbox holds a way to the fix (the no-leak check)",
    "flaky": "a test's baseline outcome changes between runs",
    "infra_error": "the checks could not run (infrastructure, not the task)",
    "no_source": "the task's repository or base commit cannot be had (no mirror holds it, the clone failed)",
    "env_build": "the task's environment could not be made (its image, wheels or Python version) or could not "
                 "install the repository (setup.install)",
    "harness_code": "the gold patch changes code the harness itself imports (pytest, pluggy, py or a module "
                    "named like the standard library: the repository is the test framework); the tamper filter "
                    "drops such changes, so the task cannot be graded safely",
}
"""The checks a verdict can fail, by the key it names them with in :attr:`Validation.reasons`."""


@dataclass
class Validation:
    """The verdict on one task."""

    instance_id: str
    problems: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    infra_errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    reasons: list[str] = field(default_factory=list)
    """The failed checks, each once, as keys of :data:`REASONS`; empty when ``ok``."""
    fail_to_pass: int = 0
    """The task's FAIL_TO_PASS tests."""
    unprotected: list[str] = field(default_factory=list)
    """FAIL_TO_PASS tests the gold patch's grading could make no twin for (``envs/rewards/twins.py``): a forger
    that fools the test process is caught there only by the run's other guards."""

    def fail(self, reason: str, problem: str) -> None:
        """Record ``problem`` under the check ``reason`` (a key of :data:`REASONS`)."""
        if reason not in REASONS:
            raise ValueError(f"expected a reason in {sorted(REASONS)}, got {reason!r}")
        self.problems.append(problem)
        if reason not in self.reasons:
            self.reasons.append(reason)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.flaky and not self.infra_errors


def validate_task(task: Task, make_sandbox: Callable[[], Sandbox], runs: int = BASELINE_RUNS, *,
                  make_agent_sandbox: Callable[[], Sandbox] | None = None, leaks: bool = True) -> Validation:
    """Validate one task with sandboxes from ``make_sandbox``; the no-leak check (``leaks``) uses
    ``make_agent_sandbox`` (default: ``make_sandbox``), which should make sandboxes as episodes get them."""
    start = time.monotonic()
    result = Validation(task.instance_id)
    harness = sorted(p for p in touched_paths(task.patch) if is_shadow_path(p))
    if harness:  # grading would drop the fix itself: say so rather than report a gold patch that fails
        result.fail("harness_code", f"gold patch changes what the harness imports: {harness[:5]}")
        result.duration_s = time.monotonic() - start
        return result
    gold = grade(task, task.patch, make_sandbox)
    result.fail_to_pass, result.unprotected = len(task.FAIL_TO_PASS), list(gold.unprotected)
    if gold.status == Status.INFRA_ERROR and gold.error["where"] == "sandbox.install":
        result.fail("env_build", f"the install steps failed: {gold.error['message'][-1000:]}")
        result.duration_s = time.monotonic() - start
        return result
    baselines = [grade(task, "", make_sandbox) for _ in range(runs)]
    for label, record in [("gold", gold)] + [(f"baseline {i + 1}", r) for i, r in enumerate(baselines)]:
        if record.status in (Status.INFRA_ERROR, Status.INTERNAL_ERROR):  # nothing judged: the task is not at fault
            result.infra_errors.append(f"{label}: {record.error['where']}: {record.error['message']}")
    if leaks:
        try:
            for problem in find_leaks(task, make_agent_sandbox or make_sandbox):
                result.fail("leak", f"leak: {problem}")
        except InfraError as exc:
            result.infra_errors.append(f"leak check: {exc.where}: {exc.message}")
    if result.infra_errors:
        result.reasons.append("infra_error")
        result.duration_s = time.monotonic() - start
        return result
    if not gold.resolved:
        failing = [t for t, o in gold.tests.items() if o != "passed"]
        result.fail("gold_unresolved", f"gold patch is {gold.status}: not passing {failing[:10]}"
                    + (f" ({gold.error['message'][:300]})" if gold.error else ""))
    base = baselines[0]
    passing_f2p = [t for t in task.FAIL_TO_PASS if base.tests.get(t) == "passed"]
    failing_p2p = [t for t in task.PASS_TO_PASS if base.tests.get(t) != "passed"]
    if passing_f2p:
        result.fail("passes_without_fix", f"FAIL_TO_PASS passes without the fix: {passing_f2p[:10]}")
    if failing_p2p:
        result.fail("p2p_fails_at_base", f"PASS_TO_PASS fails at the base commit: {failing_p2p[:10]}")
    if not task.FAIL_TO_PASS:
        result.fail("no_f2p", "no FAIL_TO_PASS tests")
    result.flaky = sorted(t for t in base.tests if len({r.tests.get(t) for r in baselines}) > 1)
    if result.flaky:
        result.reasons.append("flaky")
    result.duration_s = time.monotonic() - start
    return result


def validate_tasks(tasks: list[Task], factory_for: Callable[[Task], Callable[[], Sandbox]], workers: int = 2,
                   on_result: Callable[[Validation], None] | None = None,
                   agent_factory_for: Callable[[Task], Callable[[], Sandbox]] | None = None) -> list[Validation]:
    """Validate many tasks, ``workers`` at a time; ``on_result`` sees each verdict as it lands.

    ``agent_factory_for``: sandboxes for the no-leak check, made as episodes get them (default: ``factory_for``).
    A task whose repository or base commit cannot be had gets a ``no_source`` verdict, and one whose factory cannot
    be made (its environment does not build) an ``env_build`` verdict."""
    def verdict_of(task: Task) -> Validation:
        try:
            snapshot(task)  # the repository first: without it nothing else can be judged
        except (ConfigError, InfraError) as exc:
            verdict = Validation(task.instance_id)
            why = exc.message if isinstance(exc, LocatedError) else str(exc)
            verdict.fail("no_source", f"repository not available: {why}"[:1200])
            return verdict
        try:
            make, make_agent = factory_for(task), (agent_factory_for or factory_for)(task)
        except Exception as exc:
            # Building the task's environment (a docker build, a registry, wheel downloads, the task's own setup)
            # failed outside repogym: one task's verdict like the others, not the end of the whole run.
            verdict = Validation(task.instance_id)
            verdict.fail("env_build", f"environment not built: {type(exc).__name__}: {exc}"[:1200])
            return verdict
        return validate_task(task, make, make_agent_sandbox=make_agent)

    def one(task: Task) -> Validation:
        verdict = verdict_of(task)
        if on_result:
            on_result(verdict)
        return verdict

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, tasks))
