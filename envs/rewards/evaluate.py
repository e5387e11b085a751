"""Grading in a pristine sandbox: the one place a reward comes from, and it fails closed.

Steps: drop tampering from the agent's diff (:mod:`repogym.envs.rewards.tamper`); start a fresh sandbox of the
task's environment and run its health check (a trivial command answers, the interpreter starts with
pytest) and load the base commit (both done ahead, while the agent works, for sandboxes from a warm pool of
:func:`prepared` ones); apply the filtered diff; ask git what really changed and put back any
test file, start-up hook, shadowing module, bytecode or pytest section the diff still reached; add the
task's hidden ``test_patch``; rewrite each FAIL_TO_PASS test (and a sample of PASS_TO_PASS) into itself and its
must-fail twins under fresh names (:mod:`repogym.envs.rewards.twins`);
run the files that hold FAIL_TO_PASS and PASS_TO_PASS under the harness's launcher and report plugin
(:func:`repogym.envs.sandbox.testrun.run_test_command`) and read its per-test report; cross-check the run
(:mod:`repogym.envs.rewards.guards`).

The task's runner (``task.setup["runner"]``: ``pytest``, ``django`` or ``sympy``; an unknown one is a
:class:`ConfigError` before any sandbox starts) decides what runs (:func:`run_targets`): pytest the files of
the ids; django the test labels of the ``test_patch``'s files under ``tests/`` and of the ids' modules
(``name (foo.test_bar.Case)`` -> ``foo.test_bar``), as SWE-bench derives them; sympy the ``test_patch``'s
Python files (its ids are bare names). The runner's own files are protected like tests
(:data:`repogym.envs.rewards.tamper.RUNNER_FILES`), and the health check asks for pytest only when it runs
the tests.

Fails closed: a test passes only when that report says ``passed`` (an id cut at its first whitespace, as
SWE-bench lists some, is matched by :mod:`repogym.envs.rewards.ids`); a test the report lacks (not collected,
deselected, or the run left no report at all) is ``missing`` and failed, as are ``skipped``, ``error``,
``xfailed``. The exit code of the shell command decides nothing. A guard that trips (a twin that passed, a
report rewritten after the fact, an exit status or summary that disagrees with the report) makes the record
``unresolved`` with ``error.where = "rewards.guard.<name>"``, whatever the tests say; ``guards`` lists every
guard's verdict and ``harness_reach`` the diff's added lines that name the harness's insides (data only).
``infra_error`` (retried once) comes from the steps before the agent's patch (start, health check, base
load) and, after them, only from a sandbox lost from outside (its container killed or frozen, the daemon
gone: a :class:`SandboxError` the backend did not blame on the inside). Anything the patch's code can cause
(a hang past the timeout, a runner killed from inside, no report, a tripped guard) is ``unresolved``, with
``error`` saying where, so a patch can never buy its way out of a 0 into an excluded episode. Any other exception
is a bug of ours: :func:`repogym.envs.core.bugs.report_bug` (raised in strict mode) and ``internal_error``
(excluded, counted), never a 0 that is trained on.
"""

from __future__ import annotations

import codecs
import copy
import re
import shlex
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Mapping

from repogym.envs.core.bugs import report_bug
from repogym.envs.core.errors import (
    InfraError, InternalError, LocatedError, RepogymError, SandboxError, SandboxRefused, SandboxRequestError)
from repogym.envs.rewards.twins import TwinPlan, plant_twins
from repogym.envs.rewards.guards import check_run, harness_reach, tripped
from repogym.envs.rewards.ids import MISSING, PASSED, django_id, outcomes_of
from repogym.envs.rewards.tamper import (
    CONFIG_WITH_PYTEST_SECTION, RUNNER_FILES, filter_patch, is_tamper_path, pytest_section)
from repogym.envs.sandbox.cleanup import close_later
from repogym.envs.sandbox.base import CommandResult, Sandbox
from repogym.envs.sandbox.testrun import django_label, run_test_command, runner_name, start_warm
from repogym.envs.core.status import Status
from repogym.envs.tasks.patches import touched_paths
from repogym.envs.tasks.repos import snapshot
from repogym.envs.tasks.schema import Task


@dataclass
class EvalRecord:
    """The outcome of grading one patch."""

    instance_id: str
    status: Status
    """``resolved``, ``unresolved``, ``patch_failed``, ``infra_error`` or ``internal_error`` (a plain string is taken
    as its :class:`Status`)."""
    tests: dict[str, str] = field(default_factory=dict)
    """Outcome of every FAIL_TO_PASS and PASS_TO_PASS test (``missing`` when the report lacks it)."""
    fail_to_pass: dict[str, int] = field(default_factory=dict)
    pass_to_pass: dict[str, int] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    """Files removed from the patch as test tampering."""
    error: dict[str, str] | None = None
    """``{"where", "message"}`` for patch failures, tripped guards, infrastructure errors and bugs of ours."""
    guards: dict[str, str] = field(default_factory=dict)
    """Each guard of the test run (``twin``, ``report``, ``exit_status``, ``summary``): ``ok`` or why it
    tripped; empty when the tests never ran."""
    twins: list[str] = field(default_factory=list)
    """The twin tests planted for this grading, as the runner reported them (random names each time)."""
    unprotected: list[str] = field(default_factory=list)
    """FAIL_TO_PASS tests no twin could be made for (``envs/rewards/twins.py``): guarded only by the other guards."""
    harness_reach: list[str] = field(default_factory=list)
    """``"path: name"`` for added lines of the diff that name the test harness's insides (flagged, not judged)."""
    attempts: int = 1
    duration_s: float = 0.0
    log_tail: str = ""

    def __post_init__(self):
        try:
            self.status = Status(self.status)
        except ValueError:
            raise ValueError(f"expected a status in {[s.value for s in Status]}, got {self.status!r}") from None

    @property
    def resolved(self) -> bool:
        return self.status is Status.RESOLVED

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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], instance_id: str = "") -> EvalRecord:
        """The record :meth:`to_dict` wrote (``info["eval"]``, a trajectory's end), back as an object.

        ``info["eval"]`` of an episode that was never graded holds only ``status`` (and ``error``): the other
        fields take their defaults, and ``instance_id`` (the record's own, else this argument) names the task.
        ``resolved`` is derived from ``status`` and read from no dict; any other unknown key is an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"resolved"})
        if unknown:
            raise ValueError(f"expected the fields of an EvalRecord ({', '.join(sorted(known))}), got {unknown}")
        if "status" not in data:
            raise ValueError(f"expected an EvalRecord's status, got the keys {sorted(data)}")
        values = {k: copy.deepcopy(v) for k, v in data.items() if k in known}
        values.setdefault("instance_id", instance_id)
        return cls(**values)


def test_files(test_ids: list[str]) -> list[str]:
    """The files that hold some test ids (``path::name`` ids; a bare id is taken as a path)."""
    return sorted({tid.split("::", 1)[0] for tid in test_ids})


def _django_modules(test_ids: list[str]) -> list[str]:
    """The modules of Django ids: ``name (foo.test_bar.Case)`` -> ``foo.test_bar`` (docstring lines give none)."""
    modules = []
    for tid in test_ids:
        canonical = django_id(tid)
        if canonical:
            modules.append(canonical[:-1].split(" (", 1)[1].rpartition(".")[0])
    return modules


def run_targets(task: Task, runner: str | None = None) -> list[str]:
    """What grading hands the runner: test files (pytest, sympy) or Django test labels, sorted, each once."""
    runner = runner or runner_name(task.setup)
    wanted = task.FAIL_TO_PASS + task.PASS_TO_PASS
    touched = [p for p in touched_paths(task.test_patch) if p.endswith(".py")]
    if runner == "django":
        labels = [django_label(p) for p in touched if p.startswith("tests/") and p != "tests/runtests.py"]
        return sorted(set(labels) | {m for m in _django_modules(wanted) if m})
    if runner == "sympy":
        return sorted(set(touched) | {tid.split("::", 1)[0] for tid in wanted if "::" in tid})
    return test_files(wanted)


def protected_paths(task: Task, runner: str | None = None) -> list[str]:
    """The task's own test files (those holding FAIL_TO_PASS/PASS_TO_PASS and those its ``test_patch``
    touches) and its runner's own files (``runner``: the task's, when not given)."""
    runner = runner or runner_name(task.setup)
    if runner == "django":
        held = {f"tests/{m.replace('.', '/')}.py" for m in _django_modules(task.FAIL_TO_PASS + task.PASS_TO_PASS)}
    elif runner == "sympy":
        held = {tid.split("::", 1)[0] for tid in task.FAIL_TO_PASS + task.PASS_TO_PASS if "::" in tid}
    else:
        held = set(test_files(task.FAIL_TO_PASS + task.PASS_TO_PASS))
    return sorted(held | set(touched_paths(task.test_patch)) | set(RUNNER_FILES[runner]))


def health_check(sandbox: Sandbox, runner: str = "pytest") -> None:
    """:class:`InfraError` unless the sandbox runs a trivial command and its interpreter starts (with pytest,
    when pytest runs the tests)."""
    interpreter = "python -c 'import pytest'" if runner == "pytest" else "python -c 'import sys'"
    for command, where in (("true", "rewards.health_check.command"),
                           (interpreter, "rewards.health_check.interpreter")):
        result = sandbox.run(command, timeout=60)
        if not result.ok:
            raise InfraError(where, f"`{command}` failed in a fresh sandbox (exit {result.exit_code}): "
                                    f"{(result.stdout + result.stderr).strip()[-400:]}")


def prepared(make_sandbox: Callable[[], Sandbox], task: Task, spares: list[Sandbox] | None = None
             ) -> Callable[[], Sandbox]:
    """``make_sandbox`` whose sandboxes passed :func:`health_check` for ``task``'s runner and hold its base (one that
    fails either is closed, its error raised): the factory of a warm :class:`~repogym.envs.sandbox.pool.SandboxPool`
    for grading ``task``, so both are done while the agent works, and a warm test interpreter waits in each
    (:func:`_warm_up`); :func:`grade` (``checked=True``) then starts at the patch. Nothing of the agent's has run
    in them: a failure here is the infrastructure's, as it is in :func:`grade`.

    ``spares``: sandboxes this factory made for another task of the same environment (same setup, so the same check
    passed) that were never acquired, so nothing ran in them (:meth:`SandboxPool.take_ready`): each is loaded with
    ``task``'s base before a new sandbox is started (a load, which clears the last base whole, instead of a start)."""
    runner = runner_name(task.setup)
    spares = spares if spares is not None else []

    def make() -> Sandbox:
        while True:
            try:
                spare = spares.pop()  # (the pool's thread and an acquire may both ask: pop is atomic)
            except IndexError:
                break
            try:
                spare.load(snapshot(task))
                _warm_up(spare, task, runner)
                return spare
            except (InfraError, SandboxRequestError):  # that container is lost: a new start instead
                close_later(spare)
            except BaseException:
                spare.close()
                raise
        sandbox = make_sandbox()
        try:
            health_check(sandbox, runner)
            sandbox.load(snapshot(task))
            _warm_up(sandbox, task, runner)
        except BaseException:
            sandbox.close()
            raise
        return sandbox
    return make


def _warm_up(sandbox: Sandbox, task: Task, runner: str) -> None:
    """pytest imported ahead in a warm interpreter for the grading's run (:func:`start_warm`): its start-up is paid
    while the agent works. Nothing of the agent's has reached the sandbox yet; where none starts, the run starts its
    own interpreter as before."""
    if runner == "pytest":
        start_warm(sandbox, task.test_command)


def grade(task: Task, patch: str, make_sandbox: Callable[[], Sandbox], *, timeout: float = 900.0,
          retries: int = 1, checked: bool = False) -> EvalRecord:
    """Grade ``patch`` for ``task``, each attempt in a new sandbox from ``make_sandbox``; ``checked``: its sandboxes
    passed :func:`health_check` already (a factory from :func:`prepared`), so it is not run again. A sandbox that
    holds the task's base already (:attr:`Sandbox.snapshot_key`, as :func:`prepared` makes them) is not loaded again.

    Never raises but for a bug of ours in strict mode: a bug (an exception neither the agent's patch nor the
    infrastructure explains) is :func:`report_bug`'d and graded ``internal_error`` (excluded), never a 0."""
    runner = runner_name(task.setup)  # an unknown runner is the task's error, before any sandbox starts
    start = time.monotonic()
    protected = protected_paths(task, runner)
    kept, dropped = filter_patch(patch, protected)
    reach = harness_reach(patch)
    last: InfraError | None = None
    for attempt in range(1, retries + 2):
        sandbox = None
        try:
            sandbox = make_sandbox()
            if not checked:
                health_check(sandbox, runner)
            snap = snapshot(task)
            if sandbox.snapshot_key != snap.key:
                sandbox.load(snap)
        except InternalError:  # a bug below, already reported (strict mode): not infrastructure
            if sandbox is not None:
                sandbox.close()
            raise
        except (RepogymError, OSError) as exc:
            # Nothing of the agent's has run yet: a failure here is the infrastructure's (a backend or its daemon,
            # the host, the task's source repository), and only here.
            last = exc if isinstance(exc, InfraError) else InfraError("rewards.health_check", f"{type(exc).__name__}: {exc}")
            if sandbox is not None:
                sandbox.close()
            continue
        except Exception as exc:  # a bug of ours while setting up: excluded, never a 0
            if sandbox is not None:
                sandbox.close()
            return _internal_error(task, report_bug("rewards.grade", exc), dropped, attempt, start, reach)
        try:
            record = _grade_once(task, kept, list(dropped), sandbox, timeout, runner, protected)
        except SandboxError as exc:  # lost from outside: an inside kill is SandboxKilledByAgent, a hang TestRunTimeout
            last = exc
            continue
        except InternalError:  # a bug below, already reported (strict mode)
            raise
        except (LocatedError, SandboxRequestError, FileNotFoundError, IsADirectoryError) as exc:
            # The sandbox was healthy: what fails now, the patch's code caused (the runner killed from inside, a
            # hang, a refused request, a file the patch replaced), so it is graded unresolved, never excluded.
            error = exc.record() if isinstance(exc, LocatedError) else {
                "where": "rewards.grade", "message": f"{type(exc).__name__}: {exc}"}
            record = _record(task, Status.UNRESOLVED, dropped, {}, error, runner=runner)
        except Exception as exc:  # a bug of ours, not the patch's: excluded, never a 0 that is trained on
            return _internal_error(task, report_bug("rewards.grade", exc), dropped, attempt, start, reach)
        finally:
            close_later(sandbox)  # the record does not wait for the container's removal
        record.attempts, record.duration_s, record.harness_reach = attempt, time.monotonic() - start, reach
        return record
    return EvalRecord(task.instance_id, Status.INFRA_ERROR, dropped=dropped, error=last.record(),
                      attempts=retries + 1, duration_s=time.monotonic() - start, harness_reach=reach)


def _internal_error(task: Task, error: InternalError, dropped: list[str], attempt: int, start: float,
                    reach: list[str]) -> EvalRecord:
    """The record of a grading a bug of ours ended (``internal_error``: excluded from training)."""
    return EvalRecord(task.instance_id, Status.INTERNAL_ERROR, dropped=list(dropped), error=error.record(),
                      attempts=attempt, duration_s=time.monotonic() - start, harness_reach=reach)


# An exception or pytest usage error line of a run's output (pytest's INTERNALERROR and assertion prefixes kept off).
_ERROR_LINE = re.compile(r"^(?:INTERNALERROR> |E +)?((?:[\w.]+(?:Error|Exception)\b|ERROR: |\S[^:\n]*: error: ).*)$", re.MULTILINE)


def _last_error(log: str) -> str:
    """`` (its last error: ...)`` for a run that left no report: the last exception or usage error line of its
    output (a plugin that does not import, an unknown option), so the verdict says why; empty when none shows."""
    found = _ERROR_LINE.findall(log or "")
    return f" (its last error: {found[-1].strip()[:300]})" if found else ""


def _record(task: Task, status: Status, dropped: list[str], outcomes: dict[str, str],
            error: dict[str, str] | None = None, log: str = "", guards: dict[str, str] | None = None,
            plan: TwinPlan | None = None, docs: dict[str, str] | None = None, *, runner: str) -> EvalRecord:
    """The evaluation record of ``outcomes``: a graded test absent from them is ``missing``."""
    tests = outcomes_of(task.FAIL_TO_PASS + task.PASS_TO_PASS, outcomes, runner=runner, docs=docs)
    f2p = sum(tests[t] == "passed" for t in task.FAIL_TO_PASS)
    p2p = sum(tests[t] == "passed" for t in task.PASS_TO_PASS)
    return EvalRecord(task.instance_id, status, tests=tests, fail_to_pass={"passed": f2p, "total": len(task.FAIL_TO_PASS)},
                      pass_to_pass={"passed": p2p, "total": len(task.PASS_TO_PASS)}, dropped=dropped, error=error,
                      log_tail=log, guards=dict(guards or {}), twins=[t.test_id for t in plan.twins] if plan else [],
                      unprotected=list(plan.unprotected) if plan else [])


def _grade_once(task: Task, kept: str, dropped: list[str], sandbox: Sandbox, timeout: float, runner: str,
                protected: list[str]) -> EvalRecord:
    if kept.strip():
        sandbox.write_file(".repogym-agent.patch", kept.encode())
        # One command: the patch applied (exit 97 if it does not), then what it really changed listed.
        applied = sandbox.run("{ git apply --whitespace=nowarn .repogym-agent.patch && rm .repogym-agent.patch; } "
                              f"|| exit {APPLY_FAILED}; {LIST_CHANGED}", timeout=120, output_limit=16 << 20)
        if applied.exit_code == APPLY_FAILED or applied.timed_out:
            why = "applying and listing the patch timed out" if applied.timed_out else applied.stderr.strip()[-2000:]
            return EvalRecord(task.instance_id, Status.PATCH_FAILED, dropped=dropped,
                              error={"where": "rewards.apply_patch", "message": why})
        _revert_tampering(protected, sandbox, dropped, applied)
    if task.test_patch.strip():
        sandbox.write_file(".repogym-test.patch", task.test_patch.encode())
        added = sandbox.run("git apply --whitespace=nowarn .repogym-test.patch && rm .repogym-test.patch", timeout=120)
        if not added.ok:
            return _record(task, Status.UNRESOLVED, dropped, {}, {"where": "rewards.test_patch", "message":
                               f"the task's test_patch does not apply: {added.stderr.strip()[-800:]}"}, runner=runner)
    wanted = list(dict.fromkeys(task.FAIL_TO_PASS + task.PASS_TO_PASS))
    targets = run_targets(task, runner)
    near = targets if runner == "sympy" else [p for p in touched_paths(task.test_patch) if p.endswith(".py")]
    plan = plant_twins(sandbox, task.FAIL_TO_PASS, task.PASS_TO_PASS, runner=runner, test_files=near)
    # --maxfail=0: the twins fail by design, and must not stop a run the task's command limits (-x).
    run = run_test_command(sandbox, task.test_command, targets + plan.files, timeout=timeout, runner=runner,
                           extra_args=["--maxfail=0"] if runner == "pytest" else None)
    guards = check_run(run, plan)
    # Graded under the task's own ids: the twins' runs left out, the renamed real tests under their names.
    outcomes, docs, log = plan.restore(run.outcomes), plan.restore(run.docs), run.log
    graded = outcomes_of(wanted, outcomes, runner=runner, docs=docs)
    missing = sum(outcome == MISSING for outcome in graded.values())
    error = None
    if not outcomes:
        error = {"where": "rewards.report", "message": "the test run left no report" + _last_error(log)}
    elif tripped(guards):
        name, why = next(iter(tripped(guards).items()))
        error = {"where": f"rewards.guard.{name}", "message": why}
    elif task.FAIL_TO_PASS and all(outcome == PASSED for outcome in graded.values()):  # a task must be able to fail
        return _record(task, Status.RESOLVED, dropped, outcomes, log=log, guards=guards, plan=plan, docs=docs,
                       runner=runner)
    elif missing:
        error = {"where": "rewards.report", "message": f"{missing} of {len(wanted)} graded tests have no result"}
    return _record(task, Status.UNRESOLVED, dropped, outcomes, error, log, guards=guards, plan=plan, docs=docs,
                   runner=runner)


APPLY_FAILED = 97
"""The exit status of the apply-and-list command when the patch did not apply."""
# One name a line (NUL-separated output would read as binary); git C-quotes names with odd characters.
# -f: a file .gitignore hides (``__pycache__/``, ``*.egg-info``) is still something the patch changed.
LIST_CHANGED = ("git add -A -f && git -c core.quotePath=false diff --cached --no-renames --name-only repogym-base"
                " && git reset -q")


def _revert_tampering(protected: list[str], sandbox: Sandbox, dropped: list[str], listed: CommandResult) -> None:
    """Put back, from the base, every tamper path the applied patch changed (whatever the patch text looked like);
    ``protected``: the task's :func:`protected_paths`; ``listed``: :data:`LIST_CHANGED`'s result."""
    # After the patch applied, what fails here is the patch's doing (unresolved, never infra_error), and a list
    # cut at the output limit would leave the files past the cut unchecked: both fail closed.
    if not listed.ok or listed.truncated:
        why = "the list is over 16 MiB" if listed.ok else listed.stderr.strip()[-400:]
        raise SandboxRefused("rewards.tamper", f"could not list the changed files: {why}")
    keep = set(protected)
    for name in sorted(_unquote(p) for p in listed.stdout.splitlines() if p):
        quoted = shlex.quote(name)
        if is_tamper_path(name, keep):
            _put_back(sandbox, quoted, "rm -rf")
            if name not in dropped:
                dropped.append(name)
        elif name.rsplit("/", 1)[-1] in CONFIG_WITH_PYTEST_SECTION and _pytest_section_changed(sandbox, name):
            _put_back(sandbox, quoted, "rm -f")
            dropped.append(name + " [pytest section]")


def _put_back(sandbox: Sandbox, quoted: str, remove: str) -> None:
    """The base's version of a file (or none, when the base has none); a tamper left in place fails closed."""
    done = sandbox.run(f"git checkout repogym-base -- {quoted} 2>/dev/null || {remove} -- {quoted}", timeout=60)
    if not done.ok:
        raise SandboxRefused("rewards.tamper", f"could not put {quoted} back from the base: {done.stderr.strip()[-400:]}")


def _unquote(name: str) -> str:
    if len(name) > 1 and name.startswith('"') and name.endswith('"'):
        return codecs.escape_decode(name[1:-1].encode())[0].decode("utf-8", errors="replace")
    return name


MAX_CONFIG_BYTES = 8 << 20
"""The largest setup.cfg / pyproject.toml whose pytest section is compared; a larger one counts as changed."""


def _pytest_section_changed(sandbox: Sandbox, name: str) -> bool:
    """Whether the patch changed the pytest section of ``name``, read whole on both sides (pytest reads all of
    it): a file too large to read whole, or not UTF-8, counts as changed, so it is put back from the base."""
    before = sandbox.run(f"git show repogym-base:{shlex.quote(name)}", timeout=60, output_limit=MAX_CONFIG_BYTES)
    if before.truncated:
        return True
    try:
        data = sandbox.read_file(name, limit=MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        data = b""
    if len(data) > MAX_CONFIG_BYTES:
        return True
    try:
        after = data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return pytest_section(name, before.stdout if before.ok else "") != pytest_section(name, after)
