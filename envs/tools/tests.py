"""``run_tests``: run the visible tests in the agent's sandbox (the hidden ones are not there).

Runs the task's own runner (``task.setup["runner"]``, see ``envs/sandbox/testrun.py``): pytest takes test
ids and files; django takes test files (``tests/foo/test_bar.py``, turned into the label ``foo.test_bar``),
ids ``tests/foo/test_bar.py::Case::test_x`` or labels; sympy takes test files (a ``::name`` part is dropped).

Every run that finishes is recorded on the episode's state (a :class:`repogym.envs.core.episode_state.TestRunRecord`),
which ``inspect_diff`` and the reward facts read; a run that timed out is not recorded. A run the agent's sandbox
refused to stage (every place it may write full or read-only) is an ``error (sandbox_refused)`` observation.
"""

from __future__ import annotations

from repogym.envs.core.episode_state import TestRunRecord
from repogym.envs.core.errors import SandboxRefused
from repogym.envs.sandbox.testrun import TestRunTimeout, run_tests, runner_name
from repogym.envs.tools.base import Tool, ToolContext, ToolError, ToolResult, repo_path


def run_run_tests(ctx: ToolContext, args: dict) -> ToolResult:
    tests = args.get("tests") or []
    if not all(isinstance(t, str) and t.strip() and not t.startswith("-") for t in tests):
        raise ToolError("bad_arguments", "run_tests: tests must be test ids or paths like "
                                         "'tests/test_x.py::test_name', not options")
    for test in tests:
        repo_path(test.split("::")[0], ctx.repo_dir)  # inside the repository, or path_outside_repo
    try:
        outcomes, log = run_tests(ctx.sandbox, ctx.task.test_command, tests, timeout=ctx.max_timeout,
                                  runner=runner_name(ctx.task.setup))
    except TestRunTimeout as exc:  # the agent's tests hung: its mistake, an observation (never infra_error)
        return ToolResult(f"[{exc.message}; every process of the run was killed]", exit_code=1, error="timeout")
    except SandboxRefused as exc:  # the agent filled or locked where runs are staged: its doing, never infra_error
        raise ToolError("sandbox_refused", f"run_tests: {exc.message}") from None
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    failed = sorted(t for t, o in outcomes.items() if o != "passed" and o != "skipped")
    ctx.episode.test_runs.append(TestRunRecord(ctx.episode.turn, list(tests), outcomes))
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no tests ran"
    text = log.rstrip() + f"\n[{summary}]"
    if failed:
        text += "\n[not passing: " + ", ".join(failed[:30]) + (" ..." if len(failed) > 30 else "") + "]"
    return ToolResult(text, exit_code=0 if outcomes and not failed else 1,
                      data={"counts": counts, "failed": failed[:200]})


RUN_TESTS = Tool("run_tests", "Run the repository's tests (all, or the given test ids / files) and report per-test "
                              "outcomes.",
                 {"type": "object", "properties": {"tests": {
                     "type": "array", "items": {"type": "string"},
                     "description": "Test ids like tests/test_x.py::test_name, or test files; empty for all."}}},
                 run_run_tests)
