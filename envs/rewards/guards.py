"""Cross-checks of a graded test run: independent guards against a test process forged from the inside.

Code under test runs inside pytest, so no single check made there holds alone. Grading runs each of these
over every run (see ``envs/rewards/evaluate.py``); any guard that trips makes the episode ``unresolved``
with reward 0 and ``error.where = "rewards.guard.<name>"``, never ``infra_error``:

- ``twin``: every twin test (``envs/rewards/twins.py``) ran, and no run of a twin passed where the same run
  (same parameters) of its real test passed; a must-fail test of the harness's own never passed.
- ``report``: the launcher's frame came back (keyed with a secret the test process never saw) and the
  report stream hashes to it, so nothing rewrote results after pytest exited (an ``atexit`` handler, an
  escaped child); for commands the launcher does not wrap, the report carries the run's nonce.
- ``exit_status``: with twins failing, an honest run exits 1. pytest's real exit status (recorded
  outside the test process) must be 1 and equal the status the session ended with; a run forced to
  ``passed`` everywhere, or ended early with ``os._exit``, shows here.
- ``summary``: pytest's own last summary line must be there (launcher runs) and must count at least as
  many passes as the report holds, so a report rewritten inside the process without pytest's own
  bookkeeping gives itself away.

The same guards hold for the other runners (``envs/sandbox/testrun.py``), read in their terms:

- **django** (unittest under the launcher): ``exit_status`` as for pytest (``runtests.py`` exits 1 when a test
  failed, and the launcher's inner process records the script's end as the session's). ``summary``:
  unittest's ``Ran N tests in Xs`` and its verdict must be there; the report may hold no more passes than
  tests ran; with twins planted the verdict must be ``FAILED``, never ``OK``. unittest prints no count of
  passes (and counts each failing subtest), so a finer count is not compared: that would trip honest runs.
- **sympy** (``bin/test`` under the launcher, sympy's reporter streaming each result): ``exit_status`` as for
  pytest (``bin/test`` exits 1 when a test failed); ``summary``: the ``tests finished: ... in X seconds`` line
  must be there and count at least as many ``passed`` as the stream holds passes.

Also :func:`harness_reach`: the added lines of a diff that name the harness's insides (``_pytest``,
``pluggy``, the report plugin, ``gc.get_objects``, ``atexit``, ``PYTEST_CURRENT_TEST``...). It is data for
``info["eval"]["harness_reach"]`` only: honest code may use these names, so it decides nothing.
"""

from __future__ import annotations

import re

from repogym.envs.rewards.twins import TwinPlan
from repogym.envs.sandbox.testrun import TestRun
from repogym.envs.tasks.patches import split_patch

GUARDS = ("twin", "report", "exit_status", "summary")
OK = "ok"
HARNESS_NAMES = ("_pytest", "pluggy", "repogym_report", "repogym_launch", "repogym_unittest", "repogym_sympy", "REPOGYM_", "gc.get_objects",
                 "get_referrers", "atexit", "PYTEST_CURRENT_TEST", "pytest_runtest", "pytest_sessionfinish",
                 "TestReport", "hookwrapper", "pluginmanager")


def check_run(run: TestRun, plan: TwinPlan) -> dict[str, str]:
    """``{guard: "ok" | why it tripped}`` for a graded run with the twins of ``plan`` planted."""
    return {"twin": _twins(run, plan), "report": _report(run), "exit_status": _exit_status(run),
            "summary": _summary(run, plan)}


def tripped(guards: dict[str, str]) -> dict[str, str]:
    """The guards that tripped, in :data:`GUARDS` order."""
    return {name: why for name, why in guards.items() if why != OK}


def _report(run: TestRun) -> str:
    return "; ".join(run.problems) if run.problems else OK


def _exit_status(run: TestRun) -> str:
    what = "pytest" if run.runner == "pytest" else f"the {run.runner} runner"
    if run.exit_status is None:
        return f"{what}'s exit status is unknown"
    if run.exit_status != 1:
        return f"{what} exited with {run.exit_status}; with its twins failing an honest run exits 1"
    if run.launched and run.finish_status != run.exit_status:
        ended = "never ended" if run.finish_status is None else f"ended with {run.finish_status}"
        return f"the {what} session {ended} but the process exited with {run.exit_status}"
    return OK


def _summary(run: TestRun, plan: TwinPlan) -> str:
    if run.runner == "django":
        return _unittest_summary(run, plan)
    what = "pytest" if run.runner == "pytest" else f"the {run.runner} runner"
    if not run.summary:
        # Without the launcher the output may be cut before pytest's last line: nothing to compare with.
        return f"{what} printed no summary line" if run.launched else OK
    passed = run.summary_counts().get("passed", 0)
    if run.reported_passes > passed:
        return f"the report holds {run.reported_passes} passes but {what}'s summary counts {passed}"
    return OK


def _unittest_summary(run: TestRun, plan: TwinPlan) -> str:
    counts = run.summary_counts()
    if not counts:
        return "unittest printed no 'Ran N tests' summary and verdict" if run.launched else OK
    if run.reported_passes > counts["ran"]:
        return f"the report holds {run.reported_passes} passes but unittest ran {counts['ran']} tests"
    if plan.twins and counts["ok"]:
        return "unittest's verdict is OK, but with its twins planted an honest run fails"
    return OK


def _twins(run: TestRun, plan: TwinPlan) -> str:
    runs = plan.twin_runs(run.outcomes)
    ran = {(twin.file, twin.name) for twin, _, _, _ in runs}
    for twin in plan.twins:
        if (twin.file, twin.name) not in ran:
            return f"twin {twin.test_id} ({twin.kind}) is missing from the report"
    for twin, test_id, outcome, real in sorted(runs, key=lambda r: r[1]):
        judged = twin.real is None or real == "passed"
        if judged and outcome in ("passed", "xpassed"):
            why = ("an object equal to anything, or outcomes forced to pass" if twin.kind == "literal"
                   else "test outcomes forced to pass")
            return f"twin {test_id} ({twin.kind}) must fail but {outcome}: {why}"
    return OK


def harness_reach(patch: str) -> list[str]:
    """``"path: name"`` for each harness name an added line of ``patch`` holds (sorted, each pair once)."""
    found: set[str] = set()
    pattern = re.compile("|".join(re.escape(n) for n in HARNESS_NAMES))
    for part in split_patch(patch):
        path = part.new_path if part.new_path != "/dev/null" else part.old_path
        for line in part.text.splitlines():
            if line.startswith("+") and not line.startswith("+++"):
                found.update(f"{path}: {m}" for m in pattern.findall(line))
    return sorted(found)
