"""Grading in a pristine sandbox: the one place a reward comes from.

Steps: drop test tampering from the agent's diff (:mod:`envs.rewards.tamper`); in a fresh sandbox of the
task's environment, load the base commit, apply the filtered diff, restore any changed pytest section,
add the task's hidden ``test_patch``, run the test files that hold FAIL_TO_PASS and PASS_TO_PASS with the
report plugin, and read the per-test report. A test passes only when that report says ``passed``; a test
missing from it failed. Infrastructure failures are retried once, then recorded as ``infra_error``.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from envs.errors import InfraError
from envs.rewards.tamper import config_files_touched, filter_patch, pytest_section
from envs.sandbox.base import Sandbox
from envs.sandbox.testrun import run_tests
from envs.tasks.repos import snapshot
from envs.tasks.schema import Task

RESOLVED, UNRESOLVED, PATCH_FAILED, INFRA_ERROR = "resolved", "unresolved", "patch_failed", "infra_error"


@dataclass
class EvalRecord:
    """The outcome of grading one patch."""

    instance_id: str
    status: str
    """``resolved | unresolved | patch_failed | infra_error``."""
    tests: dict[str, str] = field(default_factory=dict)
    """Outcome of every FAIL_TO_PASS and PASS_TO_PASS test (``missing`` when the report lacks it)."""
    fail_to_pass: dict[str, int] = field(default_factory=dict)
    pass_to_pass: dict[str, int] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    """Files removed from the patch as test tampering."""
    error: dict[str, str] | None = None
    """``{"where", "message"}`` for patch failures and infrastructure errors."""
    attempts: int = 1
    duration_s: float = 0.0
    log_tail: str = ""

    @property
    def resolved(self) -> bool:
        return self.status == RESOLVED

    @property
    def f2p_fraction(self) -> float:
        total = self.fail_to_pass.get("total", 0)
        return self.fail_to_pass.get("passed", 0) / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``error`` is absent when there was none."""
        record = {**asdict(self), "resolved": self.resolved}
        if record["error"] is None:
            del record["error"]
        return record


def test_files(test_ids: list[str]) -> list[str]:
    """The files that hold some test ids (``path::name`` ids; a bare id is taken as a path)."""
    return sorted({tid.split("::", 1)[0] for tid in test_ids})


def grade(task: Task, patch: str, make_sandbox: Callable[[], Sandbox], *, timeout: float = 900.0,
          retries: int = 1) -> EvalRecord:
    """Grade ``patch`` for ``task``, each attempt in a new sandbox from ``make_sandbox``."""
    start = time.monotonic()
    last: InfraError | None = None
    for attempt in range(1, retries + 2):
        sandbox = None
        try:
            sandbox = make_sandbox()
            record = _grade_once(task, patch, sandbox, timeout)
            record.attempts, record.duration_s = attempt, time.monotonic() - start
            return record
        except InfraError as exc:
            last = exc
        except Exception as exc:  # a bug or daemon hiccup below us is still infrastructure, not the agent's fault
            last = InfraError("rewards.grade", f"{type(exc).__name__}: {exc}")
        finally:
            if sandbox is not None:
                sandbox.close()
    return EvalRecord(task.instance_id, INFRA_ERROR, error={"where": last.where, "message": last.message},
                      attempts=retries + 1, duration_s=time.monotonic() - start)


def _grade_once(task: Task, patch: str, sandbox: Sandbox, timeout: float) -> EvalRecord:
    kept, dropped = filter_patch(patch)
    sandbox.load(snapshot(task))
    if kept.strip():
        sandbox.write_file(".repogym-agent.patch", kept.encode())
        applied = sandbox.run("git apply --whitespace=nowarn .repogym-agent.patch && rm .repogym-agent.patch",
                              timeout=120)
        if not applied.ok:
            return EvalRecord(task.instance_id, PATCH_FAILED, dropped=dropped,
                              error={"where": "rewards.apply_patch", "message": applied.stderr.strip()[-2000:]})
        for name in config_files_touched(kept):
            if _pytest_section_changed(sandbox, name):
                sandbox.run(f"git checkout repogym-base -- {shlex.quote(name)}", timeout=60)
                dropped.append(name + " [pytest section]")
    if task.test_patch.strip():
        sandbox.write_file(".repogym-test.patch", task.test_patch.encode())
        added = sandbox.run("git apply --whitespace=nowarn .repogym-test.patch && rm .repogym-test.patch", timeout=120)
        if not added.ok:
            raise InfraError("rewards.test_patch", f"the task's test_patch does not apply: {added.stderr.strip()[-800:]}")
    wanted = list(dict.fromkeys(task.FAIL_TO_PASS + task.PASS_TO_PASS))
    outcomes, log = run_tests(sandbox, task.test_command, test_files(wanted), timeout=timeout)
    tests = {tid: outcomes.get(tid, "missing") for tid in wanted}
    f2p = sum(tests[t] == "passed" for t in task.FAIL_TO_PASS)
    p2p = sum(tests[t] == "passed" for t in task.PASS_TO_PASS)
    resolved = f2p == len(task.FAIL_TO_PASS) and p2p == len(task.PASS_TO_PASS) and bool(wanted)
    return EvalRecord(task.instance_id, RESOLVED if resolved else UNRESOLVED, tests=tests,
                      fail_to_pass={"passed": f2p, "total": len(task.FAIL_TO_PASS)},
                      pass_to_pass={"passed": p2p, "total": len(task.PASS_TO_PASS)}, dropped=dropped, log_tail=log)


def _pytest_section_changed(sandbox: Sandbox, name: str) -> bool:
    before = sandbox.run(f"git show repogym-base:{shlex.quote(name)}", timeout=60)
    try:
        after = sandbox.read_file(name).decode("utf-8", errors="replace")
    except FileNotFoundError:
        after = ""
    return pytest_section(name, before.stdout if before.ok else "") != pytest_section(name, after)
