"""Why a test fails for a cause outside the patch: the sandbox withholds something the test needs.

Validation asks when a PASS_TO_PASS test fails at the base commit (or a FAIL_TO_PASS test under the gold patch):
:func:`diagnose` runs those tests once more in a fresh sandbox (pytest with full tracebacks, its plugins' autoload off as in
grading) and
:func:`classify` reads each test's own failure text for a cause of :data:`CAUSES`:

- ``needs_network``: the failure shows the network missing (DNS that cannot resolve, a network or host that
  cannot be reached): sandboxes have no network;
- ``missing_dependency``: ``ModuleNotFoundError`` / ``ImportError: No module named X`` for a module the repository
  does not hold (a conda-only package, an optional dependency the environment lacks);
- ``expected_failure``: the test is marked ``xfail`` and failed as marked (its outcome says so; no second run).
  SWE-bench's grading counts an XFAIL as a pass, so its rows list such tests as PASS_TO_PASS; repogym counts
  only a pass, since code under test could mark the tests it breaks as expected failures.

Anything else (an assertion, a version mismatch, a crash) gets no cause: it may be the task's own bug. Only
pytest runs are diagnosed (the ``django`` and ``sympy`` runners' tests get no cause). Not guaranteed: a test
that swallows the error and fails on an assertion about its result shows no cause (the traceback has it only
when the error propagates).
"""

from __future__ import annotations

import io
import re
import shlex
import tarfile
import uuid
from typing import Callable

from repogym.envs.sandbox.base import Sandbox
from repogym.envs.sandbox.testrun import environment_plugin_args, runner_name
from repogym.envs.tasks.repos import snapshot
from repogym.envs.tasks.schema import Task

CAUSES = {
    "needs_network": "the test needs the network (DNS or connection errors in its failure); sandboxes have none",
    "missing_dependency": "the test imports a module that neither the environment nor the repository holds",
    "expected_failure": "the test is marked xfail and fails as marked: SWE-bench's grading counts an XFAIL as a "
                        "pass, repogym's only a pass",
}
"""Causes outside the patch, by key: what ``repogym tasks import --drop-broken-tests`` may drop."""

_NETWORK = re.compile(
    r"Temporary failure in name resolution|Name or service not known|nodename nor servname|No address associated "
    r"with hostname|getaddrinfo failed|socket\.gaierror|gaierror: \[Errno -\d+\]|Network is unreachable|No route to "
    r"host|\[Errno (101|113|-2|-3|-5)\]|NameResolutionError")
_NO_MODULE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '?([A-Za-z_][\w.]*)'?")
_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$", re.MULTILINE)
_BANNER = re.compile(r"^={3,}", re.MULTILINE)  # the end of the failures (the summary, the warnings)
MAX_DIAGNOSED = 200
"""Tests one diagnosis runs at most (the first, sorted): a task with more broken tests is broken as a whole."""


def repo_modules(task: Task) -> set[str]:
    """Top-level module names the repository holds (folders and ``.py`` files at any depth of its tree)."""
    names = set()
    with tarfile.open(fileobj=io.BytesIO(snapshot(task).tar)) as tar:
        for member in tar.getmembers():
            for part in member.name.split("/"):
                names.add(part[:-3] if part.endswith(".py") else part)
    return names


def classify(text: str, modules: set[str]) -> str | None:
    """The cause (a key of :data:`CAUSES`) that a test's failure ``text`` shows, or None; ``modules``: the
    repository's own module names (a missing one of those is the repository's problem, not the environment's)."""
    if _NETWORK.search(text):
        return "needs_network"
    for name in _NO_MODULE.findall(text):
        if name.split(".")[0] not in modules:
            return "missing_dependency"
    return None


def head_line(test_id: str) -> str:
    """pytest's section title of a test id: ``tests/t.py::Case::test_x[1]`` -> ``Case.test_x[1]``."""
    return ".".join(test_id.split("::")[1:]) or test_id


def causes_in_output(output: str, tests: list[str], modules: set[str]) -> dict[str, str]:
    """``{test: cause}`` for the ``tests`` whose failure in pytest's ``output`` (``--tb=long -rA``) shows a cause:
    read from the test's own failure section, else its file's collection error, else its short summary line."""
    sections: dict[str, str] = {}
    marks = list(_SECTION.finditer(output))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(output)
        banner = _BANNER.search(output, mark.end(), end)
        sections.setdefault(mark.group(1).strip(), output[mark.end():banner.start() if banner else end])
    summary = {}
    for line in output.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("FAILED", "ERROR"):
            summary.setdefault(rest.split(" - ", 1)[0].strip(), line)
    found = {}
    for test in tests:
        text = (sections.get(head_line(test)) or sections.get(f"ERROR at setup of {head_line(test)}")
                or sections.get(f"ERROR collecting {test.split('::')[0]}") or summary.get(test, ""))
        cause = classify(text, modules)
        if cause:
            found[test] = cause
    return found


def diagnose(task: Task, tests: list[str], make_sandbox: Callable[[], Sandbox], *, patch: str = "",
             timeout: float = 900.0) -> dict[str, str]:
    """``{test: cause}`` for those of ``tests`` that fail, in a fresh sandbox with the task's base, ``patch`` and
    its ``test_patch`` applied, for a cause of :data:`CAUSES`; ``{}`` for runners other than pytest."""
    if not tests or runner_name(task.setup) != "pytest":
        return {}
    tests = sorted(tests)[:MAX_DIAGNOSED]
    sandbox = make_sandbox()
    try:
        sandbox.load(snapshot(task))
        for name, text in (("gold", patch), ("tests", task.test_patch)):
            if text.strip():
                path = f".repogym-diagnose-{name}-{uuid.uuid4().hex[:8]}.patch"
                sandbox.write_file(path, text.encode())
                sandbox.run(f"git apply --whitespace=nowarn {path}; rm -f {path}", timeout=120)
        # As grading runs pytest (envs/sandbox/testrun.py): no plugin loads by itself; those the environment
        # installed are named, so a test that needs another fails here as it does there. Wide columns: pytest cuts
        # summary lines at the terminal's width. A file that does not import must not keep the others from running.
        command = (f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTEST_ADDOPTS= PYTEST_PLUGINS= COLUMNS=400 {task.test_command} "
                   f"{environment_plugin_args()} --tb=long -rfE --maxfail=0 --continue-on-collection-errors "
                   + " ".join(shlex.quote(t) for t in tests))
        done = sandbox.run(command, timeout=timeout, output_limit=8 << 20)
    finally:
        sandbox.close()
    return causes_in_output(done.stdout + "\n" + done.stderr, tests, repo_modules(task))
