"""Running pytest inside a sandbox under the harness's launcher and report plugin (``inside/``).

The harness, not the repository, decides how pytest starts and reports. Each run stages, in a fresh folder
outside the repository, the report plugin and the launcher under random names, and a random frame key.
A test command that starts with ``python -m pytest``, ``python3 -m pytest`` or ``pytest`` (after optional
``VAR=value`` assignments) is run through the launcher (``inside/repogym_launch.py``):

- ``python -P``, the repository moved to the end of ``sys.path``: no repository file stands in for the
  standard library, pytest or the plugin;
- ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (no ``pytest11`` entry point of any distribution loads) with the
  report plugin named by ``-p``; ``PYTEST_ADDOPTS``/``PYTEST_PLUGINS`` emptied;
- bytecode read from and written to a harness-private cache (``PYTHONPYCACHEPREFIX``), never the tree's
  ``__pycache__``;
- each test result streamed out of the test process as it happens, to an outer process that runs no code of
  the repository, is not dumpable, and records pytest's real exit status and its last summary line in a
  frame line keyed with a secret the test process never sees. A report file that does not hash to the frame
  is not trusted.

Any other command runs as before (the plugin writes a nonce-tagged report at session end), with the same
environment guards. :class:`TestRun` carries what grading cross-checks (``envs/rewards/guards.py``); the
exit code of the shell command itself is never looked at. Shared by the agent's ``run_tests`` tool, the task
generator and grading.

Not guaranteed: code under test runs in the same process as pytest and the plugin and can rewrite either
(outcomes, reports, hooks). The launcher keeps it from forging what happens outside that process (exit
status, results already streamed); grading's canary tests catch forgeries inside it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import uuid
from dataclasses import dataclass, field

from repogym.envs.errors import InfraError, TestRunTimeout
from repogym.envs.sandbox.base import Sandbox

# Optional VAR=value assignments, then the pytest entry point, then the rest of the command.
_LAUNCHABLE = re.compile(r"""^\s*((?:[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|"[^"`\\]*"|[^\s;&|<>()`'"\\]*)\s+)*)"""
                         r"(?:(python3?)\s+-m\s+pytest|pytest)(?=\s|$)(.*)$", re.S)
_SHELL_PUNCTUATION = set("();<>|&")
SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+,? )*\d+ \w+|no tests ran) in [\d.]+s\b")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


@dataclass
class TestRun:
    """What one test run reported, and what grading cross-checks it against."""

    __test__ = False  # not a pytest test class

    outcomes: dict[str, str]
    """``{test id: outcome}``; empty when no trustworthy report came back."""
    log: str = ""
    """The tail of pytest's output."""
    launched: bool = False
    """Run under the harness's launcher (exit status and stream recorded outside the test process)."""
    exit_status: int | None = None
    """pytest's exit status: recorded by the launcher, else as the plugin reported it; None if unknown."""
    finish_status: int | None = None
    """The exit status the plugin saw at session end (launcher runs); None when the session never ended."""
    summary: str = ""
    """pytest's last terminal summary line, e.g. ``1 failed, 3 passed in 0.10s``; empty when none was seen."""
    reported_passes: int = 0
    """Test calls the report says passed (compared with the summary's count)."""
    problems: list[str] = field(default_factory=list)
    """Why the report cannot be trusted (no frame, a report rewritten after the fact, unreadable lines)."""

    def summary_counts(self) -> dict[str, int]:
        """The summary's counts by word (``passed``, ``failed``, ``errors``...); subtest counts left out."""
        counts: dict[str, int] = {}
        for part in self.summary.split(" in ")[0].strip("= ").split(","):
            words = part.split()
            if len(words) == 2 and words[0].isdigit():
                counts[words[1]] = counts.get(words[1], 0) + int(words[0])
        return counts


def launch_command(test_command: str) -> tuple[str, str, str, str] | None:
    """``(assignments, interpreter, mode, rest)`` of a command the launcher can run, else None."""
    match = _LAUNCHABLE.match(test_command)
    if not match:
        return None
    assignments, python, rest = match.group(1), match.group(2), match.group(3)
    if "`" in rest or "$(" in rest or "\n" in rest or "`" in assignments or "$(" in assignments:
        return None
    try:
        lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return None
    if any(t and set(t) <= _SHELL_PUNCTUATION for t in tokens):
        return None
    return assignments, python or "python", "--module" if python else "--script", rest.strip()


def run_tests(sandbox: Sandbox, test_command: str, files: list[str] | None = None, *,
              timeout: float = 900.0) -> tuple[dict[str, str], str]:
    """Run tests with the report plugin; returns ``({test id: outcome}, output tail)``.

    An empty dict means pytest wrote no trustworthy report (it crashed, or the agent's code killed it):
    every test counts as not passed. A harness timeout is a :class:`TestRunTimeout`.
    """
    run = run_test_command(sandbox, test_command, files, timeout=timeout)
    return run.outcomes, run.log


def run_test_command(sandbox: Sandbox, test_command: str, files: list[str] | None = None, *,
                     timeout: float = 900.0, extra_args: list[str] | None = None) -> TestRun:
    """Run tests as :func:`run_tests` does; the whole :class:`TestRun` (``extra_args``: pytest options)."""
    nonce, key = uuid.uuid4().hex, uuid.uuid4().hex
    folder, plugin, launcher = f"/tmp/.repogym-{nonce}", f"repogym_report_{nonce}", f"launch_{uuid.uuid4().hex}"
    report = f"{folder}/report.json"
    inside = getattr(sandbox, "inside_dir", "/opt/repogym")
    staged = sandbox.run(f"mkdir -m 700 {folder} && cp {inside}/repogym_report.py {folder}/{plugin}.py && "
                         f"cp {inside}/repogym_launch.py {folder}/{launcher}.py && "
                         f"(umask 077 && printf %s {key} > {folder}/key)", timeout=60)
    if not staged.ok:
        raise InfraError("sandbox.run_tests", f"could not stage the report plugin: {staged.stderr.strip()[-400:]}")
    args = " ".join(shlex.quote(a) for a in (extra_args or []))
    args += f" -p {plugin} " + " ".join(shlex.quote(f) for f in files or [])
    launch = launch_command(test_command)
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": f"{folder}/pycache", "PYTEST_ADDOPTS": "",
           "PYTEST_PLUGINS": "", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if launch:
        assignments, python, mode, rest = launch
        # exec: the shell becomes the launcher, so no process but the (non-dumpable) launcher holds the run.
        # -I: the launcher's own process reads no PYTHONPATH, so no sitecustomize of the repository runs in it.
        command = f"{assignments}exec {python} -I {folder}/{launcher}.py {mode} {rest} {args}"
    else:
        env.update({"REPOGYM_REPORT": report, "REPOGYM_REPORT_NONCE": nonce, "PYTHONPATH": folder})
        command = f"{test_command} {args}"
    result = sandbox.run(command, timeout=timeout, env=env, output_limit=256 * 1024)
    if result.timed_out:
        raise TestRunTimeout("sandbox.run_tests", f"tests ran past the harness timeout of {timeout:.0f}s")
    name = "report.jsonl" if launch else "report.json"
    raw = sandbox.run(f"cat {folder}/{name}; rm -rf {folder}", timeout=60, output_limit=16 << 20)
    if launch:
        return _read_stream(result.stdout, result.stderr, raw.stdout, key)
    return _read_file_report(result.stdout + result.stderr, raw.stdout, nonce)


def _read_file_report(output: str, raw: str, nonce: str) -> TestRun:
    run = TestRun({}, output[-4000:], summary=_last_summary(output))
    try:
        data = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        data = {}
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        run.problems.append("no report with the run's nonce")
        return run
    run.outcomes = {str(k): str(v) for k, v in data.get("tests", {}).items()}
    run.reported_passes = sum(v == "passed" for v in run.outcomes.values())
    status = data.get("exitstatus")
    run.exit_status = status if isinstance(status, int) else None
    return run


def _read_stream(stdout: str, stderr: str, raw: str, key: str) -> TestRun:
    """The launcher's run: trusted only with a frame line keyed ``key`` whose hash matches the stream."""
    before, sep, after = stdout.rpartition(f"\n{key} ")
    log = ((before if sep else stdout) + stderr)[-4000:]
    run = TestRun({}, log, launched=True)
    frame = _frame(after.split("\n", 1)[0]) if sep else None
    if frame is None:
        run.problems.append("the launcher left no frame: the test run was killed or cut short")
        return run
    run.exit_status, run.summary = frame["exit"], frame["summary"]
    if hashlib.sha256(raw.encode()).hexdigest() != frame["sha256"]:
        run.problems.append("the report file was changed after pytest exited (it does not hash to the frame)")
        return run
    run.outcomes, run.reported_passes, run.finish_status, unreadable = aggregate_stream(raw)
    if unreadable:
        run.problems.append(f"{unreadable} unreadable line(s) in the report stream")
    return run


def _frame(text: str) -> dict | None:
    try:
        frame = json.loads(text)
    except json.JSONDecodeError:
        return None
    if (not isinstance(frame, dict) or not isinstance(frame.get("exit"), int)
            or not isinstance(frame.get("sha256"), str) or not isinstance(frame.get("summary"), str)):
        return None
    return frame


def aggregate_stream(raw: str) -> tuple[dict[str, str], int, int | None, int]:
    """``(outcomes, call passes, finish status, unreadable lines)`` of a report stream.

    Fails closed: once a phase of a test did not pass, no later line makes it pass; a report of another
    kind than ``TestReport`` (a subtest's) can only make a test fail.
    """
    outcomes: dict[str, str] = {}
    passes, finish, unreadable = 0, None, 0
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            unreadable += 1
            continue
        if not isinstance(record, dict):
            unreadable += 1
            continue
        if "finish" in record:
            finish = record["finish"] if finish is None and isinstance(record["finish"], int) else -1
            continue
        if "collect_error" in record:
            continue
        nodeid, when, outcome = record.get("id"), record.get("when"), record.get("outcome")
        if not isinstance(nodeid, str) or when not in ("setup", "call", "teardown") or outcome not in OUTCOMES:
            unreadable += 1
            continue
        main = record.get("kind", "TestReport") == "TestReport"
        current = outcomes.get(nodeid)
        if when == "call":
            if record.get("xfail"):
                outcome = "xpassed" if outcome == "passed" else "xfailed"
            elif outcome == "passed" and main:
                passes += 1
            if outcome == "passed" and not main:
                continue
            if current in (None, "passed"):
                outcomes[nodeid] = outcome
        elif outcome == "failed":
            outcomes[nodeid] = "error"
        elif outcome == "skipped" and current is None:
            outcomes[nodeid] = "skipped"
    return outcomes, passes, finish, unreadable


def _last_summary(output: str) -> str:
    found = ""
    for line in output.splitlines():
        text = _ANSI.sub("", line).strip()
        if SUMMARY.match(text):
            found = text
    return found
