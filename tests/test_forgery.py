"""Red team: forged passes from inside the test process earn nothing, on both backends.

Each attack is a patch an agent could submit *without* the fix, built to make the hidden tests pass in the
old harness: rewrite pytest from code the tests import, shadow what the harness imports, load a plugin by
itself, carry code in bytecode, or return objects equal to anything. Each is graded for real and must be
``unresolved`` with reward 0 (never ``infra_error``), with the guard that stopped it named. Controls show
that the attacks are real (with the guards switched off they resolve, or the report they forge is what
grading reads) and that the gold patch still resolves beside each.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import py_compile
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

import repogym.envs.rewards.evaluate as evaluate
from repogym.envs.repo_env import RepoTaskEnv
from repogym.envs.rewards import grade
from repogym.envs.rewards.twins import Twin, TwinPlan
from repogym.envs.rewards.guards import check_run, harness_reach, tripped
from repogym.envs.sandbox import SandboxConfig, bytecode, sandbox_factory
from repogym.envs.sandbox.testrun import (TestRun, _read_stream, aggregate_stream, launch_command, run_test_command,
                                          start_warm)
from repogym.envs.core.status import Status
from tests.conftest import CORRECT
from tests.test_integrity import F2P, patch_of

SLOW = pytest.mark.slow
BROKEN = CORRECT.replace("min(x, high)", "min(x, high - 1)")  # calc/ops.py at the base commit

# -- the attacks: calc/ops.py keeps the bug and adds a forgery, run when the tests import it ---------------

RUNTEST = BROKEN + '''
import _pytest.python
_pytest.python.Function.runtest = lambda self: None
'''

TEST_REPORT = BROKEN + '''
import _pytest.reports
_init = _pytest.reports.TestReport.__init__


def _passing(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.outcome, self.longrepr = "passed", None


_pytest.reports.TestReport.__init__ = _passing
'''

HOOKWRAPPER = BROKEN + '''
import gc
import pytest


class _Pass:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        report.outcome, report.longrepr = "passed", None


for _obj in gc.get_objects():
    if type(_obj).__name__ == "PytestPluginManager":
        _obj.register(_Pass(), "always-pass")
        break
'''

OUTCOME_TABLE = BROKEN + '''
import sys


class _AllPassed(dict):
    def __setitem__(self, key, value):
        dict.__setitem__(self, key, "passed")


for _name, _mod in list(sys.modules.items()):
    if _name.startswith("repogym_report"):
        _mod._OUTCOMES = _AllPassed()
        _send = _mod._send
        _mod._send = lambda rec, _send=_send: _send({**rec, "outcome": "passed"} if "outcome" in rec else rec)
'''

ATEXIT = BROKEN + '''
import atexit
import glob
import json
import os


def _forge():
    ids = ["tests/test_hidden.py::test_clamp_above", "tests/test_hidden.py::test_clamp_below",
           "tests/test_ops.py::test_add_zero", "tests/test_ops.py::test_clamp_inside"]
    lines = "".join(json.dumps({"id": i, "when": "call", "outcome": "passed"}) + "\\n" for i in ids)
    for fd in os.listdir("/proc/self/fd"):  # the report stream, wherever it is: forged passes and a clean exit
        try:
            if int(fd) > 2:
                os.write(int(fd), (lines + json.dumps({"finish": 0}) + "\\n").encode())
        except OSError:
            pass
    for folder in glob.glob("/tmp/.repogym-*"):  # and the report files, rewritten
        try:
            with open(os.path.join(folder, "report.jsonl"), "w") as fh:
                fh.write(lines + json.dumps({"finish": 0}) + "\\n")
        except OSError:
            pass
    os._exit(0)


atexit.register(_forge)
'''

ALWAYS_EQUAL = BROKEN.replace("    return max(low, min(x, high - 1))\n", "    return _Anything()\n") + '''

class _Anything(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__
'''

# Failed call reports flipped to passed, only for tests that name the package's code (a must-fail test that
# expects 123 == 124 names none of it, so it still fails).
REPORT_FLIP = BROKEN + '''
import _pytest.reports

_make = _pytest.reports.TestReport.from_item_and_call.__func__


def _flip(cls, item, call):
    report = _make(cls, item, call)
    code = getattr(getattr(item, "function", None), "__code__", None)
    if report.when == "call" and report.failed and code is not None and "clamp" in code.co_names:
        report.outcome, report.longrepr = "passed", None
    return report


_pytest.reports.TestReport.from_item_and_call = classmethod(_flip)
'''

# The same, sparing any test that names a global whose class answers NotImplemented to == (the old perturbed
# canary's sentinel): it beat the canaries, since they could be told apart from the real tests.
CANARY_AWARE = REPORT_FLIP.replace('''    if report.when == "call"''', '''    spared = code is not None and any(_sentinel(item.function.__globals__.get(n)) for n in code.co_names)
    if not spared and report.when == "call"''').replace("def _flip(", '''def _sentinel(obj):
    try:
        return type(obj).__module__ != "builtins" and type(obj).__eq__(obj, obj) is NotImplemented
    except Exception:
        return False


def _flip(''')

IN_PROCESS = {"runtest": RUNTEST, "test-report": TEST_REPORT, "hookwrapper": HOOKWRAPPER,
              "outcome-table": OUTCOME_TABLE, "always-equal": ALWAYS_EQUAL, "report-flip": REPORT_FLIP,
              "canary-aware": CANARY_AWARE}
FAST = ("runtest", "always-equal", "canary-aware")

# -- files that stand in for what the harness imports -------------------------------------------------------

# A json.py at the root: the stdlib's json under another name, with dump/dumps that turn every outcome into a pass.
FAKE_JSON = '''\
import importlib.util as _u
import os as _os
import sys as _sys

_dir = _os.path.join(_os.path.dirname(_os.__file__), "json")
_spec = _u.spec_from_file_location("json", _os.path.join(_dir, "__init__.py"), submodule_search_locations=[_dir])
_real = _u.module_from_spec(_spec)
_me, _sys.modules["json"] = _sys.modules["json"], _real
_spec.loader.exec_module(_real)
_sys.modules["json"] = _me
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})


def _forge(obj):
    if isinstance(obj, dict) and "tests" in obj:
        return {**obj, "tests": {k: "passed" for k in obj["tests"]}}
    if isinstance(obj, dict) and "outcome" in obj:
        return {**obj, "outcome": "passed"}
    return obj


def dump(obj, fh, **kwargs):
    return _real.dump(_forge(obj), fh, **kwargs)


def dumps(obj, **kwargs):
    return _real.dumps(_forge(obj), **kwargs)
'''

# A pytest.py at the root: `python -m pytest` would run it; it writes a report of passes and never runs a test.
FAKE_PYTEST = '''\
import json
import os
import re
import sys

tests = {}
for arg in sys.argv[1:]:
    if arg.endswith(".py") and os.path.exists(arg):
        for name in re.findall(r"^def (test\\w+)", open(arg).read(), re.M):
            tests[f"{arg}::{name}"] = "passed"
if os.environ.get("REPOGYM_REPORT"):
    with open(os.environ["REPOGYM_REPORT"], "w") as fh:
        json.dump({"nonce": os.environ.get("REPOGYM_REPORT_NONCE"), "exitstatus": 1, "tests": tests}, fh)
print(f"{len(tests)} passed in 0.01s")
'''

CHEAT_PLUGIN = '''\
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    item.runtest = lambda: None
'''

DIST_INFO = {"calc/cheat.py": CHEAT_PLUGIN,
             "fake-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fake\nVersion: 1.0\n",
             "fake-1.0.dist-info/entry_points.txt": "[pytest11]\ncheat = calc.cheat\n"}


def unchecked_pyc(tmp_path: Path) -> bytes:
    """The fixed ``calc/ops.py`` compiled to an unchecked-hash pyc: Python loads it whatever the .py says."""
    source = tmp_path / "ops.py"
    source.write_text(CORRECT)
    target = tmp_path / "ops.pyc"
    py_compile.compile(str(source), cfile=str(target), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return target.read_bytes()


def pyc_patch(task, tmp_path: Path) -> str:
    tag = importlib.util.cache_from_source("ops.py").split("/")[-1]  # ops.cpython-311.pyc
    return binary_patch(task, {f"calc/__pycache__/{tag}": unchecked_pyc(tmp_path)}, tmp_path)


def binary_patch(task, files: dict[str, bytes], tmp_path: Path) -> str:
    work = tmp_path / "bin-work"
    patch_of(task, {}, work)  # a checkout of the base in work/work
    repo = work / "work"
    for path, data in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    return subprocess.run(["git", "-C", str(repo), "diff", "--cached", "--binary"], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def factory(backend):
    return sandbox_factory(backend, {}, SandboxConfig(run_id="pytest-forgery"))


@pytest.fixture
def task(tiny_task):
    # As generated tasks run their tests: the repository root on PYTHONPATH too.
    return replace(tiny_task, test_command="PYTHONPATH=.:$PYTHONPATH python -m pytest -q -p no:cacheprovider")


def no_guards(monkeypatch):
    """Grading with every guard reporting ok: what each attack would earn without them."""
    monkeypatch.setattr(evaluate, "check_run", lambda run, plan: {"twin": "ok"})


def no_tamper_filter(monkeypatch):
    monkeypatch.setattr(evaluate, "filter_patch", lambda patch, protected=(): (patch, []))
    monkeypatch.setattr(evaluate, "_revert_tampering", lambda protected, sandbox, dropped, listed: None)


def assert_forgery_stopped(record, guard: str | None = None):
    assert record.status == Status.UNRESOLVED, (record.status, record.error, record.tests)
    assert record.tests[F2P] != "passed" or record.error["where"].startswith("rewards.guard"), record.error
    if guard:
        assert record.error["where"] == f"rewards.guard.{guard}", (record.error, record.guards)
        assert guard in tripped(record.guards)


# -- in-process forgeries -----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("attack", [a if a in FAST else pytest.param(a, marks=SLOW) for a in IN_PROCESS])
def test_an_in_process_forgery_trips_a_twin(factory, task, tmp_path, attack):
    record = grade(task, patch_of(task, {"calc/ops.py": IN_PROCESS[attack]}, tmp_path), factory)
    assert_forgery_stopped(record, "twin")
    if attack == "always-equal":  # only a twin expecting another literal passes an object equal to anything
        assert "(literal)" in record.guards["twin"]
    if attack in ("runtest", "test-report", "hookwrapper", "outcome-table"):  # forcing every test leaves a second
        # trace: pytest's exit status, or its own summary
        assert len(tripped(record.guards)) >= 2, record.guards
    assert record.harness_reach or attack == "always-equal"


@SLOW
@pytest.mark.parametrize("attack", IN_PROCESS)
def test_control_each_in_process_forgery_resolves_without_the_guards(factory, task, tmp_path, attack, monkeypatch):
    no_guards(monkeypatch)
    record = grade(task, patch_of(task, {"calc/ops.py": IN_PROCESS[attack]}, tmp_path), factory)
    assert record.status == Status.RESOLVED, (record.error, record.tests)


def test_an_atexit_rewrite_of_the_stream_and_the_report_earns_nothing(factory, task, tmp_path):
    record = grade(task, patch_of(task, {"calc/ops.py": ATEXIT}, tmp_path), factory)
    assert_forgery_stopped(record)
    assert record.tests[F2P] == "failed"  # the real result was recorded before the handler ran
    assert "exit_status" in tripped(record.guards)  # a second session end, and an exit of 0 with twins failing
    assert "tests/test_hidden.py::test_clamp_above" not in record.error["message"]
    assert any(r.endswith("atexit") for r in record.harness_reach)


@SLOW
def test_the_gold_patch_resolves_beside_every_attack_s_harmless_neighbours(factory, task, tmp_path):
    # The gold fix with code that touches the same corners honestly (atexit, gc, an int subclass): still 1.
    honest = CORRECT + "\nimport atexit\nimport gc\n\natexit.register(gc.collect)\n\n\nclass Count(int):\n    pass\n"
    record = grade(task, patch_of(task, {"calc/ops.py": honest}, tmp_path), factory)
    assert record.status == Status.RESOLVED, (record.error, record.guards)
    assert set(record.guards.values()) == {"ok"} and len(record.twins) >= 2 and not record.unprotected
    assert "calc/ops.py: atexit" in record.harness_reach  # flagged, not judged


def test_the_gold_patch_resolves_with_every_guard_ok(factory, task):
    record = grade(task, task.patch, factory)
    assert record.status == Status.RESOLVED and set(record.guards.values()) == {"ok"}, (record.error, record.guards)
    assert record.harness_reach == []


# -- shadowing, plugin autoload, bytecode: dropped, and harmless even when not dropped ----------------------

SHADOWS = {"json.py": {"json.py": FAKE_JSON}, "pytest.py": {"pytest.py": FAKE_PYTEST}, "dist-info": DIST_INFO}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["json.py", pytest.param("pytest.py", marks=SLOW),
                                  pytest.param("dist-info", marks=SLOW), "pyc"])
def test_a_shadowing_file_is_dropped_and_earns_nothing(factory, task, tmp_path, kind):
    patch = pyc_patch(task, tmp_path) if kind == "pyc" else patch_of(task, SHADOWS[kind], tmp_path)
    record = grade(task, patch, factory)
    assert_forgery_stopped(record)
    assert record.tests[F2P] == "failed"
    shadow = [p for p in record.dropped if p.endswith((".pyc", "json.py", "pytest.py")) or ".dist-info/" in p]
    assert shadow, record.dropped
    assert "calc/cheat.py" not in record.dropped


@pytest.mark.parametrize("kind", [pytest.param(k, marks=SLOW) for k in ("json.py", "pytest.py", "dist-info", "pyc")])
def test_a_shadowing_file_that_gets_through_is_never_loaded(factory, task, tmp_path, kind, monkeypatch):
    # The second line of defence alone: the launcher (-P, repository last, autoload off, private bytecode).
    no_tamper_filter(monkeypatch)
    patch = pyc_patch(task, tmp_path) if kind == "pyc" else patch_of(task, SHADOWS[kind], tmp_path)
    record = grade(task, patch, factory)
    assert record.status == Status.UNRESOLVED and record.tests[F2P] == "failed", (record.error, record.tests)
    assert record.dropped == []


@SLOW
@pytest.mark.parametrize("hook", [{"conftest.py": CHEAT_PLUGIN},
                                  {"sitecustomize.py": "import os\nos.environ['PYTEST_PLUGINS'] = 'calc.cheat'\n"}],
                         ids=["conftest", "sitecustomize"])
def test_test_tampering_that_gets_past_the_filter_still_trips_a_twin(factory, task, tmp_path, hook, monkeypatch):
    # The tamper filter's cases, with the filter off: the plugin they load passes every test, twins too.
    no_tamper_filter(monkeypatch)
    record = grade(task, patch_of(task, {"calc/cheat.py": CHEAT_PLUGIN, **hook}, tmp_path), factory)
    assert_forgery_stopped(record, "twin")


class OldHarness:
    """A sandbox whose test runs miss the launcher's environment guards (autoload off, private bytecode)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def run(self, command, **kwargs):
        env = {k: v for k, v in (kwargs.pop("env", None) or {}).items()
               if k not in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPYCACHEPREFIX")}
        return self._inner.run(command, env=env, **kwargs)


@SLOW
@pytest.mark.parametrize("kind", ["json.py", "pytest.py", "dist-info", "pyc"])
def test_control_a_shadowing_file_forges_the_report_of_the_old_harness(factory, task, tmp_path, kind, monkeypatch):
    # Without the filter, the launcher and its environment, each attack reaches the report grading reads.
    no_tamper_filter(monkeypatch)
    no_guards(monkeypatch)
    old = replace(task, test_command="true && " + task.test_command)  # a command the launcher does not wrap
    patch = pyc_patch(task, tmp_path) if kind == "pyc" else patch_of(task, SHADOWS[kind], tmp_path)
    record = grade(old, patch, lambda: OldHarness(factory()))
    assert record.tests[F2P] == "passed", (record.error, record.tests, record.log_tail[-1500:])


# -- a warm test interpreter (a grading sandbox prepared ahead): the same grading, the same attacks' fate --------

KILL_PARENT = CORRECT + '''
import os
import signal

os.kill(os.getppid(), signal.SIGKILL)  # whatever started the tests: the launcher, or the warm interpreter
'''


@pytest.fixture
def docker_factory():
    return sandbox_factory("docker", {}, SandboxConfig(run_id="pytest-forgery"))


def warm_sandbox(factory, task):
    """A grading sandbox as the env's pool makes it: checked, holding the base, a warm interpreter waiting."""
    box = evaluate.prepared(factory, task)()
    assert box.warm_interpreter is not None and box.warm_interpreter[0] == task.test_command
    return box


@pytest.mark.docker
def test_a_warm_grading_grades_as_a_fresh_one(docker_factory, task, monkeypatch):
    box = warm_sandbox(docker_factory, task)
    runs = []

    def recorded(*args, **kwargs):
        runs.append(run_test_command(*args, **kwargs))
        return runs[-1]
    monkeypatch.setattr(evaluate, "run_test_command", recorded)
    warm = grade(task, task.patch, lambda: box, checked=True)
    assert box.warm_interpreter is None and runs[-1].warm  # the run took it, and was forked from it
    fresh = grade(task, task.patch, docker_factory)
    assert warm.status == fresh.status == Status.RESOLVED, (warm.error, warm.log_tail[-1500:])
    assert warm.tests == fresh.tests and set(warm.guards.values()) == {"ok"}


def test_where_a_command_s_processes_end_with_it_no_warm_interpreter_is_kept(task):
    # The local backend runs each command in a PID namespace of its own: the warm process would die with its
    # command, so none is kept, and grading starts its own interpreter as before.
    factory = sandbox_factory("local", {}, SandboxConfig(run_id="pytest-forgery"))
    box = evaluate.prepared(factory, task)()
    if box.bytecode_prefix is None:  # (a new local environment's bytecode is still being compiled)
        box.close()
        bytecode.wait()
        box = evaluate.prepared(factory, task)()
    if not box.nested_commands:
        box.close()
        pytest.skip("bubblewrap cannot nest here: the local backend's commands share the sandbox's PID namespace")
    assert box.bytecode_prefix is not None and box.warm_interpreter is None
    # Asked to start one anyway, it does not keep one: the process ended with its command, and that is checked.
    box.nested_commands = False
    assert not start_warm(box, task.test_command) and box.warm_interpreter is None
    record = grade(task, task.patch, lambda: box, checked=True)
    assert record.status == Status.RESOLVED, record.error


@pytest.mark.docker
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "fresh"])
def test_the_fix_that_kills_what_started_its_tests_earns_0(docker_factory, task, tmp_path, warm):
    patch = patch_of(task, {"calc/ops.py": KILL_PARENT}, tmp_path)
    make = (lambda box=warm_sandbox(docker_factory, task): box) if warm else docker_factory
    record = grade(task, patch, make, checked=warm)
    assert record.status == Status.UNRESOLVED, (record.status, record.error)
    assert record.error["where"] == "rewards.report", record.error


@SLOW
@pytest.mark.docker
@pytest.mark.parametrize("attack", ["atexit", "outcome-table"])
def test_forgeries_through_a_warm_interpreter_earn_nothing(docker_factory, task, tmp_path, attack):
    box = warm_sandbox(docker_factory, task)
    source = ATEXIT if attack == "atexit" else IN_PROCESS[attack]
    record = grade(task, patch_of(task, {"calc/ops.py": source}, tmp_path), lambda: box, checked=True)
    assert_forgery_stopped(record)
    assert record.tests[F2P] == "failed" or tripped(record.guards), (record.tests, record.guards)


# -- through an episode -------------------------------------------------------------------------------------

@SLOW
def test_a_forged_episode_scores_0_and_says_which_guard(backend, tiny_task):
    env = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=10)
    try:
        env.reset()
        forged = RUNTEST.replace(BROKEN, "")
        _, _, _, _, info = env.step(json.dumps({"name": "bash", "arguments": {
            "command": f"cat >> calc/ops.py <<'EOF'\n{forged}EOF"}}))
        _, reward, terminated, _, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
        assert terminated and reward == 0.0
        assert info["eval"]["status"] == Status.UNRESOLVED and info["eval"]["error"]["where"] == "rewards.guard.twin"
        assert "calc/ops.py: _pytest" in info["eval"]["harness_reach"]
        env.reset()
        env.step(json.dumps({"name": "apply_patch", "arguments": {"patch": tiny_task.patch}}))
        _, reward, _, _, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
        assert reward == 1.0 and info["eval"]["guards"]["twin"] == "ok"
    finally:
        env.close()


# -- the pieces, without a sandbox (the twins themselves: tests/test_twins.py) ---------------------------------

@pytest.mark.parametrize("command, launched", [
    ("python -m pytest -q -p no:cacheprovider", ("", "python", "--module", "-q -p no:cacheprovider")),
    ("python3 -m pytest", ("", "python3", "--module", "")),
    ("pytest -x tests", ("", "python", "--script", "-x tests")),
    ("PYTHONPATH=src:.:$PYTHONPATH python -m pytest -q -o addopts='' -W ignore::DeprecationWarning",
     ("PYTHONPATH=src:.:$PYTHONPATH ", "python", "--module", "-q -o addopts='' -W ignore::DeprecationWarning")),
    ("trap 'exit 3' EXIT; python -m pytest -q", None),
    ("python -m pytest -q; rm -rf /", None),
    ("python -m pytest -q && echo", None),
    ("python -m pytest $(cat args)", None),
    ("python -m pytest_cov", None),
    ("tox -e py", None),
])
def test_which_commands_run_under_the_launcher(command, launched):
    assert launch_command(command) == launched


def stream(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_the_stream_fails_closed_and_a_second_session_end_shows():
    raw = stream({"id": "a", "when": "call", "outcome": "failed"}, {"id": "a", "when": "call", "outcome": "passed"},
                 {"id": "b", "when": "call", "outcome": "passed", "kind": "SubtestReport"},
                 {"id": "c", "when": "setup", "outcome": "passed"}, {"id": "c", "when": "call", "outcome": "passed"},
                 {"id": "c", "when": "teardown", "outcome": "failed"}, {"finish": 1}, {"finish": 0})
    outcomes, passes, finish, unreadable = aggregate_stream(raw + "junk\n")
    assert outcomes == {"a": "failed", "c": "error"} and passes == 2 and finish == -1 and unreadable == 1


def test_a_report_stream_changed_or_cut_after_the_frame_is_not_trusted():
    raw = stream({"id": "a", "when": "call", "outcome": "failed"}, {"finish": 1})
    frame = {"exit": 1, "sha256": hashlib.sha256(raw.encode()).hexdigest(), "summary": "1 failed in 0.1s"}
    # What the tests printed may hold a frame of their own (they cannot know the key): the launcher's comes last.
    printed = f"F\nOTHER {json.dumps({**frame, 'exit': 0})}\n{raw}1 failed in 0.1s\n"
    stdout = f"{printed}\nKEY {json.dumps(frame)}\n{raw}"
    good = _read_stream(stdout, "", "KEY")
    assert good.outcomes == {"a": "failed"} and not good.problems and good.exit_status == 1
    assert good.log.startswith("F\nOTHER") and "KEY" not in good.log
    forged = _read_stream(stdout.replace('"failed"}\n{"finish', '"passed"}\n{"finish'), "", "KEY")
    assert forged.outcomes == {} and "hash" in forged.problems[0]
    cut = _read_stream(stdout[:-5], "", "KEY")  # the runner's output limit reached inside the stream
    assert cut.outcomes == {} and "hash" in cut.problems[0]
    unkeyed = _read_stream(stdout.replace("KEY", "OTHER"), "", "KEY")
    assert unkeyed.outcomes == {} and "no frame" in unkeyed.problems[0]


def test_guards_catch_a_zero_exit_a_short_summary_and_a_passing_twin():
    plan = TwinPlan("pytest", [Twin("t.py::test_x", "t.py", "test_x", "a", "negated")])
    honest = TestRun({"t.py::a": "passed", "t.py::test_x": "failed"}, launched=True, exit_status=1, finish_status=1,
                     summary="1 failed, 1 passed in 0.1s", reported_passes=1)
    assert tripped(check_run(honest, plan)) == {}
    forced = replace(honest, outcomes={"t.py::a": "passed", "t.py::test_x": "passed"}, exit_status=0, finish_status=0,
                     reported_passes=2)
    assert set(tripped(check_run(forced, plan))) == {"twin", "exit_status", "summary"}
    killed = replace(honest, finish_status=None)
    assert "never ended" in tripped(check_run(killed, plan))["exit_status"]
    missing = replace(honest, outcomes={"t.py::a": "passed"})
    assert "missing" in tripped(check_run(missing, plan))["twin"]
    no_summary = replace(honest, summary="")
    assert "summary" in tripped(check_run(no_summary, plan))


def test_harness_reach_is_flagged_from_added_lines_only():
    patch = ("diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,3 @@\n"
             "-import atexit\n import gc\n+import _pytest.python, pluggy\n"
             "+x = gc.get_objects()  # PYTEST_CURRENT_TEST\n")
    assert harness_reach(patch) == ["calc/ops.py: PYTEST_CURRENT_TEST", "calc/ops.py: _pytest",
                                    "calc/ops.py: gc.get_objects", "calc/ops.py: pluggy"]
    assert harness_reach("") == []
