"""Task validation: the gold patch resolves the task, the empty patch does not, no test is flaky, nothing leaks.

Per task: grade the gold patch once, or ``gold_runs`` times (which also says which FAIL_TO_PASS tests got no twin:
:attr:`Validation.unprotected`), and the empty patch three times (the baseline), and run the no-leak
check (:func:`repogym.envs.rewards.leaks.find_leaks`) in a sandbox made as an episode's would be. Problems found:
gold not resolved; a FAIL_TO_PASS test passing at base; a PASS_TO_PASS test failing at base; a way to the
fix inside the agent's sandbox (``leak: ...``); a gold patch in code the harness imports (the repository is
the test framework, pytest-dev/pytest: not graded safely, so not graded); tests whose outcome changes between runs of
one patch, the baselines' or the gold patch's (flaky);
infrastructure errors (reported apart, not as task bugs). Each verdict also names its failed checks in
``reasons`` (short keys of :data:`REASONS`), so a caller such as the task generator can count drops by kind.

Causes outside the patch: the PASS_TO_PASS tests failing at base, and the FAIL_TO_PASS tests the gold patch leaves
failing, are run once more and classified (:mod:`repogym.envs.rewards.causes`: ``needs_network``,
``missing_dependency``; an xfailed one is ``expected_failure`` without a second run); each classified test is in
:attr:`Validation.causes` and its cause among the reasons.
A leak in a copy of the project that pip vendors names its remedy in :attr:`Validation.remedies`
(``{"hide_vendored": [...]}``, a ``setup`` key). ``repogym tasks import --drop-broken-tests`` applies both.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from repogym.envs.core.errors import ConfigError, InfraError, LocatedError
from repogym.envs.rewards.causes import CAUSES, diagnose
from repogym.envs.rewards.coverage_run import describe, measure_coverage
from repogym.envs.rewards.evaluate import EvalRecord, grade, prepared
from repogym.envs.rewards.leaks import find_leaks, vendored_copies
from repogym.envs.rewards.tamper import is_shadow_path
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.sandbox.cleanup import close_later
from repogym.envs.sandbox.pool import SandboxPool
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
    "flaky": "a test's outcome changes between runs of the same patch (the empty patch's, or the gold patch's when "
             "it is graded more than once)",
    "infra_error": "the checks could not run (infrastructure, not the task)",
    "no_source": "the task's repository or base commit cannot be had (no mirror holds it, the clone failed)",
    "env_build": "the task's environment could not be made (its image, wheels or Python version) or could not "
                 "install the repository (setup.install)",
    "harness_code": "the gold patch changes code the harness itself imports (pytest, pluggy, py or a module "
                    "named like the standard library: the repository is the test framework); the tamper filter "
                    "drops such changes, so the task cannot be graded safely",
    **CAUSES,
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
    causes: dict[str, str] = field(default_factory=dict)
    """``{test: cause}`` for failing tests whose failure shows a cause outside the patch (a key of
    :data:`repogym.envs.rewards.causes.CAUSES`): PASS_TO_PASS at base, FAIL_TO_PASS under the gold patch."""
    remedies: dict[str, list[str]] = field(default_factory=dict)
    """``setup`` keys that would remove a leak found, e.g. ``{"hide_vendored": ["requests"]}``."""
    coverage: str = ""
    """The task's measured coverage map (``envs/rewards/coverage_run.py``), made for a valid task: its size and the
    coverage run's time beside the plain suite's; empty when not asked for."""

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
                  make_agent_sandbox: Callable[[], Sandbox] | None = None, leaks: bool = True,
                  coverage: bool = True, gold_runs: int = 1) -> Validation:
    """Validate one task with sandboxes from ``make_sandbox``; the no-leak check (``leaks``) uses
    ``make_agent_sandbox`` (default: ``make_sandbox``), which should make sandboxes as episodes get them.
    ``coverage``: a valid task's suite is run once more under the coverage probe, and its map kept (cached by base).
    ``gold_runs``: the gold patch is graded this many times, each in a fresh sandbox, and a test whose outcome changes
    between them is flaky (a reward that would flip on the same patch)."""
    if runs < 1 or gold_runs < 1:
        raise ValueError(f"expected at least one baseline and one gold run, got runs={runs}, gold_runs={gold_runs}")
    start = time.monotonic()
    result = Validation(task.instance_id)
    harness = sorted(p for p in touched_paths(task.patch) if is_shadow_path(p))
    if harness:  # grading would drop the fix itself: say so rather than report a gold patch that fails
        result.fail("harness_code", f"gold patch changes what the harness imports: {harness[:5]}")
        result.duration_s = time.monotonic() - start
        return result
    # The baselines' sandboxes are made ready (health-checked, the base loaded) while the one before is graded.
    pool = SandboxPool(prepared(make_sandbox, task), size=1)
    try:
        gold = grade(task, task.patch, make_sandbox)
        result.fail_to_pass, result.unprotected = len(task.FAIL_TO_PASS), list(gold.unprotected)
        if gold.status == Status.INFRA_ERROR and gold.error["where"] == "sandbox.install":
            result.fail("env_build", f"the install steps failed: {gold.error['message'][-1000:]}")
            result.duration_s = time.monotonic() - start
            return result
        def last() -> Sandbox:  # no sandbox made ready after the last one graded
            sandbox = pool.acquire()
            pool.stop()
            return sandbox
        patches = [task.patch] * (gold_runs - 1) + [""] * runs
        records = [grade(task, patch, last if i == len(patches) - 1 else pool.acquire, checked=True)
                   for i, patch in enumerate(patches)]
        golds, baselines = [gold] + records[:gold_runs - 1], records[gold_runs - 1:]
    finally:
        close_later(pool, timeout=0)  # a start it has in progress is not waited for
    labelled = ([("gold", r) if gold_runs == 1 else (f"gold {i + 1}", r) for i, r in enumerate(golds)]
                + [(f"baseline {i + 1}", r) for i, r in enumerate(baselines)])
    for label, record in labelled:
        if record.status in (Status.INFRA_ERROR, Status.INTERNAL_ERROR):  # nothing judged: the task is not at fault
            result.infra_errors.append(f"{label}: {record.error['where']}: {record.error['message']}")
    if leaks:
        try:
            found = find_leaks(task, make_agent_sandbox or make_sandbox)
            for problem in found:
                result.fail("leak", f"leak: {problem}")
            hidden = sorted(set(vendored_copies(found)) - set(task.setup.get("hide_vendored") or []))
            if hidden:
                result.remedies["hide_vendored"] = hidden
        except InfraError as exc:
            result.infra_errors.append(f"leak check: {exc.where}: {exc.message}")
    if result.infra_errors:
        result.reasons.append("infra_error")
        result.duration_s = time.monotonic() - start
        return result
    base = baselines[0]
    passing_f2p = [t for t in task.FAIL_TO_PASS if base.tests.get(t) == "passed"]
    failing_p2p = [t for t in task.PASS_TO_PASS if base.tests.get(t) != "passed"]
    undiagnosed = ""
    try:  # only for a task that fails already: a valid task costs no extra run
        if not gold.resolved:
            gold_failing = [t for t in task.FAIL_TO_PASS if gold.tests.get(t) != "passed"]
            result.causes.update(diagnose(task, gold_failing, make_sandbox, patch=task.patch))
        # An xfailed test's outcome is its cause already: no second run for it.
        result.causes.update({t: "expected_failure" for t in failing_p2p if base.tests.get(t) == "xfailed"})
        rerun = [t for t in failing_p2p if t not in result.causes]
        if rerun:
            result.causes.update(diagnose(task, rerun, make_sandbox))
    except InfraError as exc:  # the causes explain a verdict that stands without them: said, not an infra verdict
        undiagnosed = f" (causes not diagnosed: {exc.where}: {exc.message[:200]})"
    if not gold.resolved:
        failing = [t for t, o in gold.tests.items() if o != "passed"]
        result.fail("gold_unresolved", f"gold patch is {gold.status}: not passing {failing[:10]}"
                    + (f" ({gold.error['message'][:300]})" if gold.error else "") + _causes_note(failing, result)
                    + undiagnosed)
    if passing_f2p:
        result.fail("passes_without_fix", f"FAIL_TO_PASS passes without the fix: {passing_f2p[:10]}")
    if failing_p2p:
        result.fail("p2p_fails_at_base", f"PASS_TO_PASS fails at the base commit: {failing_p2p[:10]}"
                    + _causes_note(failing_p2p, result) + undiagnosed)
    for cause in dict.fromkeys(result.causes.values()):
        if cause not in result.reasons:
            result.reasons.append(cause)
    if not task.FAIL_TO_PASS:
        result.fail("no_f2p", "no FAIL_TO_PASS tests")
    result.flaky = sorted(set(changed_tests(baselines)) | set(changed_tests(golds)))
    if len({r.status for r in golds}) > 1:  # e.g. a guard that trips on one run: no test outcome need differ
        result.fail("flaky", f"the gold patch's status changes between runs: {[r.status for r in golds]}")
    if result.flaky and "flaky" not in result.reasons:
        result.reasons.append("flaky")
    if coverage and result.ok:  # harness data, made before any agent: the tests that really run each function
        try:
            result.coverage = describe(measure_coverage(task, make_sandbox))
        except (InfraError, LocatedError) as exc:  # the sandbox or its staging failed: no map, the task is still valid
            result.coverage = f"coverage map: not measured ({exc.where}: {exc.message[:300]})"
    result.duration_s = time.monotonic() - start
    return result


def changed_tests(records: list[EvalRecord]) -> list[str]:
    """The tests whose outcome is not the same in every one of ``records`` (grades of one patch)."""
    names = sorted(set().union(*(r.tests for r in records))) if records else []
    return [t for t in names if len({r.tests.get(t) for r in records}) > 1]


def _causes_note(tests: list[str], result: Validation) -> str:
    """``; causes: needs_network 2 (t1, t2)`` for those of ``tests`` with a cause; empty when none has one."""
    by_cause: dict[str, list[str]] = {}
    for test in tests:
        if test in result.causes:
            by_cause.setdefault(result.causes[test], []).append(test)
    return "".join(f"; {cause}: {len(found)} ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''})"
                   for cause, found in by_cause.items())


def validate_tasks(tasks: list[Task], factory_for: Callable[[Task], Callable[[], Sandbox]], workers: int = 2,
                   on_result: Callable[[Validation], None] | None = None,
                   agent_factory_for: Callable[[Task], Callable[[], Sandbox]] | None = None,
                   coverage: bool = True, gold_runs: int = 1, runs: int = BASELINE_RUNS) -> list[Validation]:
    """Validate many tasks, ``workers`` at a time; ``on_result`` sees each verdict as it lands; ``coverage``,
    ``gold_runs`` and ``runs`` (the empty patch's grades): as :func:`validate_task`.

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
        return validate_task(task, make, runs, make_agent_sandbox=make_agent, coverage=coverage, gold_runs=gold_runs)

    def one(task: Task) -> Validation:
        verdict = verdict_of(task)
        if on_result:
            on_result(verdict)
        return verdict

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, tasks))


DROPPED_FIELD = "repogym_dropped_tests"
"""The task field that lists the PASS_TO_PASS tests :func:`prune_task` dropped, each with its cause."""
NOTE_FIELD = "repogym_note"
"""The task field that says, in words, what :func:`prune_task` changed and why."""


def prune_task(task: Task, verdict: dict) -> tuple[Task, dict[str, int]]:
    """``task`` with a verdict's remedies applied (a ``repogym validate --results`` record): the PASS_TO_PASS tests
    that fail for a cause outside the patch dropped (listed in :data:`DROPPED_FIELD`), the remedies' ``setup``
    keys added; a note in :data:`NOTE_FIELD` says what changed. FAIL_TO_PASS tests are never dropped: a task whose
    FAIL_TO_PASS test has such a cause stays as it is, and invalid. Returns the task and counts of what changed
    (``dropped``, ``remedied``, ``f2p_broken``)."""
    causes = verdict.get("causes") or {}
    remedies = verdict.get("remedies") or {}
    if not isinstance(causes, dict) or not isinstance(remedies, dict):
        raise ConfigError(f"{task.instance_id}: expected causes and remedies as objects in the verdict, got "
                          f"{type(causes).__name__} and {type(remedies).__name__}")
    counts = {"dropped": 0, "remedied": 0, "f2p_broken": sum(t in causes for t in task.FAIL_TO_PASS)}
    dropped = {t: causes[t] for t in task.PASS_TO_PASS if causes.get(t) in CAUSES}
    notes = []
    if dropped:
        by_cause = {c: sum(v == c for v in dropped.values()) for c in dict.fromkeys(dropped.values())}
        notes.append(f"dropped {len(dropped)} PASS_TO_PASS test(s) that fail at the base commit for a cause outside "
                     f"the patch ({', '.join(f'{c} {n}' for c, n in by_cause.items())}), listed in {DROPPED_FIELD}")
        counts["dropped"] = len(dropped)
    setup = dict(task.setup)
    hidden = sorted(set(remedies.get("hide_vendored") or []) - set(setup.get("hide_vendored") or []))
    if hidden:
        setup["hide_vendored"] = sorted(set(setup.get("hide_vendored") or []) | set(hidden))
        notes.append(f"the image hides pip's vendored copies of {', '.join(hidden)} (they held the fix)")
        counts["remedied"] = 1
    if not notes:
        return task, counts
    extra = dict(task.extra)
    if dropped:
        extra[DROPPED_FIELD] = {**(extra.get(DROPPED_FIELD) or {}), **dropped}
    extra[NOTE_FIELD] = "; ".join(filter(None, [extra.get(NOTE_FIELD), *notes])) + " (repogym validate's verdict)"
    return dataclasses.replace(task, PASS_TO_PASS=[t for t in task.PASS_TO_PASS if t not in dropped], setup=setup,
                               extra=extra), counts
