"""Running tests inside a sandbox under the harness's launcher and reporters (``inside/``).

The harness, not the repository, decides how the tests start and report. A task names its test runner in
``task.setup["runner"]`` (:data:`RUNNERS`: ``pytest``, the default, ``django`` or ``sympy``; any other name is
a :class:`ConfigError` listing these); the command is always ``task.test_command``, with the files (or test
labels) to run appended. Each run stages, in a fresh folder outside the repository, the launcher and the
runner's reporter under random names, and a random frame key.

**pytest.** A test command that starts with ``python -m pytest``, ``python3 -m pytest`` or ``pytest`` (after
optional ``VAR=value`` assignments) is run through the launcher (``inside/repogym_launch.py``):

- ``python -P``, the repository moved to the end of ``sys.path``: no repository file stands in for the
  standard library, pytest or the plugin;
- ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (no ``pytest11`` entry point of any distribution loads by itself, a
  ``.dist-info`` the agent writes into the tree included) with the report plugin named by ``-p``, after the
  plugins the environment's ``setup.pip`` installed (listed when the environment was built, where the tests'
  user cannot write: :data:`repogym.envs.sandbox.install.PLUGIN_LIST`), which plain pytest would have loaded;
  ``PYTEST_ADDOPTS``/``PYTEST_PLUGINS`` emptied;
- bytecode read only from a harness prefix (``PYTHONPYCACHEPREFIX``), never the tree's ``__pycache__``, and
  never written: the sandbox's warm read-only prefix (the interpreter's own files compiled once,
  :mod:`repogym.envs.sandbox.bytecode`), else an empty one of the run's own;
- in a grading sandbox prepared ahead (:func:`start_warm`), pytest already imported: a warm inner process, started
  before the agent's patch was applied, forks the run (the launcher's docstring says how it stays the same run);
- each test result streamed out of the test process as it happens, to an outer process that runs no code of
  the repository, is not dumpable, and records pytest's real exit status and its last summary line in a
  frame line keyed with a secret the test process never sees, then writes the stream after it, all on its
  stdout: one command, and a stream that does not hash to the frame is not trusted. On docker the runner
  stages the launcher and the key itself (:meth:`~repogym.envs.sandbox.base.Sandbox.staging_folder`).

Any other pytest command runs as before (the plugin writes a nonce-tagged report at session end), with the
same environment guards.

**django.** The command is a script (``./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1``,
optionally after ``python``/``python3`` and ``VAR=value`` assignments); files are turned into Django's test
labels (``tests/foo/test_bar.py`` -> ``foo.test_bar``, see :func:`django_label`). The launcher runs the script
(``--unittest-script``) with the harness's unittest reporter (``inside/repogym_unittest.py``) installed
before the script starts: each test's outcome streams out with its id ``name (module.Class)`` and its
docstring's first line (:attr:`TestRun.docs`), under the same key, frame and outer process as pytest. The
summary is unittest's ``Ran N tests in Xs; OK`` / ``...; FAILED (...)``.

**sympy.** The command is sympy's own runner (``bin/test -C --verbose``), given test files. The launcher runs
it (``--sympy-script``) with the harness's sympy reporter (``inside/repogym_sympy.py``) installed before the
script starts: when sympy's runner module loads, its ``PyTestReporter`` is wrapped, so each result streams out
as the runner decides it (ids ``path::name``), under the same key, frame and outer process as pytest. What the
tests print (sympy's verbose ``test_foo ok`` lines) is never read as a result. The summary is sympy's
``tests finished: ... in X seconds`` line.

A ``django`` or ``sympy`` command the launcher cannot run (shell syntax in it) still runs, for the agent's
eyes, but its report is not trusted (:attr:`TestRun.problems`). :class:`TestRun` carries what grading
cross-checks (``envs/rewards/guards.py``); the exit code of the shell command itself is never looked at.
Shared by the agent's ``run_tests`` tool, the task generator and grading.

Not guaranteed: code under test runs in the same process as the test runner and its reporter and can rewrite
either (outcomes, reports, hooks, printed lines). The launcher keeps it from forging what happens outside
that process (exit status, results already streamed, output already written); grading's twin tests catch
forgeries inside it.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shlex
import uuid
from dataclasses import dataclass, field

from repogym.envs.core.errors import SandboxRefused, TestRunTimeout
from repogym.envs.core.registry import Registry
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.sandbox.install import PLUGIN_LIST

# Optional VAR=value assignments, then the pytest entry point, then the rest of the command.
_LAUNCHABLE = re.compile(r"""^\s*((?:[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|"[^"`\\]*"|[^\s;&|<>()`'"\\]*)\s+)*)"""
                         r"(?:(python3?)\s+-m\s+pytest|pytest)(?=\s|$)(.*)$", re.S)
_SHELL_PUNCTUATION = set("();<>|&")
SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+,? )*\d+ \w+|no tests ran) in [\d.]+s\b")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")

@dataclass(frozen=True)
class Runner:
    """A test runner a task may name in ``setup["runner"]``."""

    name: str
    description: str


RUNNERS: Registry[Runner] = Registry("test runner", {r.name: r for r in (
    Runner("pytest", "pytest, with the harness's report plugin (the default)"),
    Runner("django", "Django's tests/runtests.py (unittest), with the harness's unittest reporter"),
    Runner("sympy", "sympy's bin/test --verbose, with the harness's reporter wrapped around sympy's"))})
"""The test runners a task may name in ``setup["runner"]`` (name -> what it is)."""
# Optional VAR=value assignments, optional python/python3, then a script path, then its arguments.
_SCRIPT = re.compile(r"""^\s*((?:[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|"[^"`\\]*"|[^\s;&|<>()`'"\\]*)\s+)*)"""
                     r"(?:(python3?)\s+)?([A-Za-z0-9_./+-]+)(?=\s|$)(.*)$", re.S)
_UNITTEST_SUMMARY = re.compile(r"^Ran (\d+) tests? in [\d.]+s; (OK|FAILED)\b(?: \((.*)\))?")


def runner_name(setup: dict | None) -> str:
    """The runner a task's ``setup`` names (``pytest`` when none); an unknown one is a :class:`ConfigError`."""
    name = (setup or {}).get("runner") or "pytest"
    if not isinstance(name, str):
        name = repr(name)
    RUNNERS.resolve(name)  # raises, listing the valid names
    return name


def django_label(path: str) -> str:
    """Django's test label for a test file or id: ``tests/foo/test_bar.py`` -> ``foo.test_bar``,
    ``tests/foo/test_bar.py::Case::test_x`` -> ``foo.test_bar.Case.test_x``; a label stays as it is."""
    file, _, rest = path.partition("::")
    if "/" in file or file.endswith(".py"):
        file = file[len("tests/"):] if file.startswith("tests/") else file
        file = file[:-3] if file.endswith(".py") else file
        file = file.strip("/").replace("/", ".")
    return ".".join([file, *filter(None, rest.split("::"))])


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
    warm: bool = False
    """Forked from a warm test interpreter (:func:`start_warm`), as the launcher's frame says."""
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
    runner: str = "pytest"
    """The runner that ran (:data:`RUNNERS`)."""
    docs: dict[str, str] = field(default_factory=dict)
    """``{test id: its docstring's first line}`` (django runs: what unittest's verbose output prints)."""

    def summary_counts(self) -> dict[str, int]:
        """The summary's counts by word (``passed``, ``failed``, ``errors``...; subtest counts left out).

        django: ``ran``, ``failures``, ``errors``, ``skipped``, ``expected failures``, ``unexpected
        successes`` and ``ok`` (1 when unittest said ``OK``, 0 for ``FAILED``); empty when unreadable.
        """
        counts: dict[str, int] = {}
        if self.runner == "django":
            match = _UNITTEST_SUMMARY.match(self.summary)
            if not match:
                return counts
            counts = {"ran": int(match.group(1)), "ok": int(match.group(2) == "OK")}
            for part in (match.group(3) or "").split(","):
                word, _, number = part.strip().partition("=")
                if number.isdigit():
                    counts[word] = counts.get(word, 0) + int(number)
            return counts
        text = self.summary.split(" in ")[0].strip("= ")
        text = text[len("tests finished:"):] if text.startswith("tests finished:") else text
        for part in text.split(","):
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
    if not _plain_arguments(assignments, rest):
        return None
    return assignments, python or "python", "--module" if python else "--script", rest.strip()


def _plain_arguments(assignments: str, rest: str) -> bool:
    """Whether a command's assignments and arguments are plain words: no substitution, no second command."""
    if "`" in rest or "$(" in rest or "\n" in rest or "`" in assignments or "$(" in assignments:
        return False
    try:
        lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return False
    return not any(t and set(t) <= _SHELL_PUNCTUATION for t in tokens)


def script_command(test_command: str) -> tuple[str, str, str, str] | None:
    """``(assignments, interpreter, script, rest)`` of a script command the launcher can run, else None."""
    match = _SCRIPT.match(test_command)
    if not match:
        return None
    assignments, python, script, rest = match.group(1), match.group(2) or "python", match.group(3), match.group(4)
    if script in ("python", "python3", "pytest", "exec", "env") or script.startswith("-"):
        return None
    if not _plain_arguments(assignments, rest):
        return None
    return assignments, python, script, rest.strip()


def environment_plugin_args(python: str = "python") -> str:
    """A shell fragment that expands to ``-p MODULE`` for each pytest plugin the environment lists
    (:data:`PLUGIN_LIST`, under ``python``'s prefix, trusted only where the tests' user cannot write it): what the
    launcher adds itself, for the pytest commands that run without it."""
    script = (f"import os, sys; p = os.path.join(sys.prefix, {PLUGIN_LIST!r}); "
              "mine = os.access(p, os.W_OK) or os.access(os.path.dirname(p), os.W_OK); "
              "print('' if mine or not os.path.isfile(p) else "
              "' '.join('-p ' + line.split()[1] for line in open(p) if len(line.split()) == 2))")
    return f"$({python} -I -c {shlex.quote(script)} 2>/dev/null)"


def run_tests(sandbox: Sandbox, test_command: str, files: list[str] | None = None, *,
              timeout: float = 900.0, runner: str = "pytest") -> tuple[dict[str, str], str]:
    """Run tests with the runner's reporter; returns ``({test id: outcome}, output tail)``.

    An empty dict means the run left no trustworthy report (it crashed, or the agent's code killed it):
    every test counts as not passed. A harness timeout is a :class:`TestRunTimeout`.
    """
    run = run_test_command(sandbox, test_command, files, timeout=timeout, runner=runner)
    return run.outcomes, run.log


def run_test_command(sandbox: Sandbox, test_command: str, files: list[str] | None = None, *,
                     timeout: float = 900.0, extra_args: list[str] | None = None, runner: str = "pytest") -> TestRun:
    """Run tests as :func:`run_tests` does; the whole :class:`TestRun` (``extra_args``: pytest options, pytest only)."""
    RUNNERS.resolve(runner)
    if runner != "pytest":
        return _run_script(sandbox, test_command, files or [], timeout, runner)
    nonce, key = uuid.uuid4().hex, uuid.uuid4().hex
    plugin, launcher = f"repogym_report_{nonce}", f"launch_{uuid.uuid4().hex}"
    folder = _stage(sandbox, nonce, key, {f"{plugin}.py": "repogym_report.py", f"{launcher}.py": "repogym_launch.py"})
    report = f"{folder}/report.json"
    args = " ".join(shlex.quote(a) for a in (extra_args or []))
    args += f" -p {plugin} " + " ".join(shlex.quote(f) for f in files or [])
    launch = launch_command(test_command)
    env = _pytest_env(sandbox, folder)
    warm, sandbox.warm_interpreter = sandbox.warm_interpreter, None  # one run each
    if warm and warm[0] == test_command:
        env[WARM_ENV] = warm[1]
    if launch:
        assignments, python, mode, rest = launch
        # exec: the shell becomes the launcher, so no process but the (non-dumpable) launcher holds the run.
        # -I: the launcher's own process reads no PYTHONPATH, so no sitecustomize of the repository runs in it.
        command = f"{assignments}exec {python} -I {folder}/{launcher}.py {mode} {rest} {args}"
    else:
        env.update({"REPOGYM_REPORT": report, "REPOGYM_REPORT_NONCE": nonce, "PYTHONPATH": folder})
        command = f"{test_command} {environment_plugin_args()} {args}"
    result = sandbox.run(command, timeout=timeout, env=env, output_limit=LAUNCHED_OUTPUT_LIMIT)
    if result.timed_out:
        raise TestRunTimeout("sandbox.run_tests", f"tests ran past the harness timeout of {timeout:.0f}s")
    if launch:
        return _read_stream(result.stdout, result.stderr, key)
    raw = sandbox.run(f"cat {folder}/report.json; rm -rf {folder}", timeout=60, output_limit=16 << 20)
    return _read_file_report(result.stdout + result.stderr, raw.stdout, nonce)


def _run_script(sandbox: Sandbox, test_command: str, files: list[str], timeout: float, runner: str) -> TestRun:
    """A django or sympy run under the launcher (``--unittest-script`` / ``--sympy-script``)."""
    nonce, key = uuid.uuid4().hex, uuid.uuid4().hex
    kind = "unittest" if runner == "django" else "sympy"
    reporter, launcher = f"repogym_{kind}_{nonce}", f"launch_{uuid.uuid4().hex}"
    folder = _stage(sandbox, nonce, key, {f"{launcher}.py": "repogym_launch.py", f"{reporter}.py": f"repogym_{kind}.py"})
    targets = [django_label(f) for f in files] if runner == "django" else [f.split("::", 1)[0] for f in files]
    args = " ".join(shlex.quote(t) for t in dict.fromkeys(targets))
    env = _bytecode_env(sandbox, folder)
    if runner == "sympy":
        # sympy reruns its tests in a child interpreter (for hash randomization) unless a seed is set; there
        # the harness's reporter would not be. A random seed, set here, is what that child would have had.
        env["PYTHONHASHSEED"] = str(secrets.randbelow(2**32))
    launch = script_command(test_command)
    if launch:
        assignments, python, script, rest = launch
        mode = f"--{kind}-script {reporter}"
        command = f"{assignments}exec {python} -I {folder}/{launcher}.py {mode} {script} {rest} {args}"
    else:
        command = f"{test_command} {args}"
    result = sandbox.run(command, timeout=timeout, env=env, output_limit=LAUNCHED_OUTPUT_LIMIT)
    if result.timed_out:
        raise TestRunTimeout("sandbox.run_tests", f"tests ran past the harness timeout of {timeout:.0f}s")
    if not launch:
        sandbox.run(f"rm -rf {folder}", timeout=60)
        run = TestRun({}, (result.stdout + result.stderr)[-4000:], runner=runner)
        run.problems.append(f"the {runner} test command cannot run under the harness's launcher (shell syntax in it)")
        return run
    return _read_stream(result.stdout, result.stderr, key, runner=runner)


def start_warm(sandbox: Sandbox, test_command: str) -> bool:
    """Start, in ``sandbox``, a warm inner process for the next run of ``test_command`` (pytest under the launcher,
    with the sandbox's read-only bytecode prefix; else nothing starts): pytest imported, waiting for that run, which
    then skips the interpreter's and pytest's start-up (``inside/repogym_launch.py``, ``--serve``).

    Only for a sandbox nothing of the agent's has reached yet (a grading sandbox prepared ahead): the process
    imports what the environment has installed before the patch is applied. Whether it started and outlived its
    command (not where each command has a PID namespace of its own: :attr:`~Sandbox.nested_commands`); a run without
    one starts its own inner process as before (a sandbox :meth:`~Sandbox.load` ends it)."""
    launch = launch_command(test_command)
    if not launch or not sandbox.bytecode_prefix or sandbox.nested_commands:  # (nested: it would end with its command)
        return False
    assignments, python, mode, _ = launch
    name, launcher = uuid.uuid4().hex, f"launch_{uuid.uuid4().hex}"
    folder = _stage(sandbox, uuid.uuid4().hex, "", {f"{launcher}.py": "repogym_launch.py"})
    started = sandbox.run(f"{assignments}exec {python} -I {folder}/{launcher}.py --serve {name} {mode}",
                          timeout=120, env=_pytest_env(sandbox, folder))
    # Still there once its command ended? (Where each command has a PID namespace of its own, as on the local
    # backend, what it leaves running ends with it: no warm process there.)
    alive = started.ok and sandbox.run(f"grep -q '@{name}' /proc/net/unix", timeout=60).ok
    sandbox.warm_interpreter = (test_command, name) if alive else None
    return alive


WARM_ENV = "REPOGYM_WARM"
"""Where a run's launcher finds the warm inner process to hand the run to (``inside/repogym_launch.py``)."""


def _pytest_env(sandbox: Sandbox, folder: str) -> dict[str, str]:
    """A pytest run's environment under the harness (the launcher adds the rest)."""
    return {**_bytecode_env(sandbox, folder), "PYTEST_ADDOPTS": "", "PYTEST_PLUGINS": "",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _bytecode_env(sandbox: Sandbox, folder: str) -> dict[str, str]:
    """Bytecode only from the harness's prefix: the sandbox's warm read-only one, else one of the run's own (empty);
    never written (the launcher passes the same to the test process)."""
    prefix = sandbox.bytecode_prefix or f"{folder}/pycache"
    return {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": prefix, "REPOGYM_BYTECODE": prefix}


# A launched run's output: the launcher's tail of what the tests printed (64 KiB), its frame line and the report
# stream (what a report file could hold before).
LAUNCHED_OUTPUT_LIMIT = (16 << 20) + (256 << 10)
# The agent's own scratch folders, where a run is staged when the runner has no place of its own (local), in order.
STAGING_FALLBACKS = ("/tmp", "/dev/shm")


def _stage(sandbox: Sandbox, nonce: str, key: str, files: dict[str, str]) -> str:
    """A fresh folder for one run holding ``files`` (``{name there: harness file in inside_dir}``) and the frame key.

    First a folder the runner makes and fills where the agent cannot write (docker: a root-owned tmpfs, see
    ``inside/runner.py`` ``stage``; no command runs for it), then :data:`STAGING_FALLBACKS`. Those are the agent's:
    it may have filled them or made them read-only, so when none takes the run it is a :class:`SandboxRefused` (an
    observation, ``unresolved`` at grading), never an :class:`InfraError` a failing policy could ask for.
    """
    staged = sandbox.staging_folder(nonce, files, key)
    if staged:
        return staged
    inside = sandbox.inside_dir
    refused = []
    for folder in (f"{parent}/.repogym-{nonce}" for parent in STAGING_FALLBACKS):
        steps = [f"mkdir -m 700 {folder}"]
        steps += [f"cp {inside}/{source} {folder}/{name}" for name, source in files.items()]
        steps.append(f"(umask 077 && printf %s {key} > {folder}/key)")
        # A half-staged folder is removed, so a later run's fallback finds the room it took.
        staged = sandbox.run(" && ".join(steps) + f" || {{ status=$?; rm -rf {folder}; exit $status; }}", timeout=60)
        if staged.ok:
            return folder
        refused.append(f"{folder.rsplit('/', 1)[0]}: {(staged.stderr.strip() or 'timed out')[-300:]}")
    raise SandboxRefused("sandbox.run_tests.stage", "the harness could not stage the test run in the sandbox ("
                         + "; ".join(refused) + "): free space or give write permission back in /tmp")


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


def _read_stream(stdout: str, stderr: str, key: str, *, runner: str = "pytest") -> TestRun:
    """The launcher's run: trusted only with a frame line keyed ``key`` followed by the report stream it hashes.

    The launcher writes the output's tail, then the frame line, then the stream; code under test never knows the key,
    so it can neither end the output early nor add a stream of its own."""
    before, sep, after = stdout.rpartition(f"\n{key} ")
    log = ((before if sep else stdout) + stderr)[-4000:]
    run = TestRun({}, log, launched=True, runner=runner)
    line, _, raw = after.partition("\n")
    frame = _frame(line) if sep else None
    if frame is None:
        run.problems.append("the launcher left no frame: the test run was killed or cut short")
        return run
    run.exit_status, run.summary, run.warm = frame["exit"], frame["summary"], frame.get("warm") is True
    if hashlib.sha256(raw.encode()).hexdigest() != frame["sha256"]:
        run.problems.append("the report stream does not hash to the frame (cut short or changed)")
        return run
    run.outcomes, run.reported_passes, run.finish_status, unreadable = aggregate_stream(raw)
    if runner == "django":
        run.docs = stream_docs(raw)
    if unreadable:
        run.problems.append(f"{unreadable} unreadable line(s) in the report stream")
    return run


def stream_docs(raw: str) -> dict[str, str]:
    """``{test id: docstring first line}`` from a unittest report stream (the first non-empty one per test)."""
    docs: dict[str, str] = {}
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("id"), str) and isinstance(record.get("doc"), str):
            if record["doc"] and record["id"] not in docs:
                docs[record["id"]] = record["doc"]
    return docs


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
