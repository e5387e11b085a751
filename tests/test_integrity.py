"""Reward integrity, on both backends: grading fails closed, tampering is dropped and listed, and a fresh
sandbox holds no way to the fix (one commit, no line of the gold patch or hidden tests anywhere it can read).

Every sabotage below carries the gold fix too, so the only thing that can make it fail is the sabotage.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

import repogym.envs.rewards.evaluate as evaluate
from repogym.envs.core.errors import SandboxError, SandboxKilledByAgent
from repogym.envs.repo_env import RepoTaskEnv
from repogym.envs.rewards import grade
from repogym.envs.rewards.leaks import added_lines, find_leaks, inspect_sandbox
from repogym.envs.rewards.validate import validate_task
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.sandbox.local import PROJECT_ROOT, SYSTEM_DIRS
from repogym.envs.core.status import Status
from repogym.envs.taskgen.sources import extract_tar
from repogym.envs.tasks.repos import snapshot
from tests.conftest import CORRECT, _git

F2P = "tests/test_hidden.py::test_clamp_above"
FIXED_CLAMP = "    return max(low, min(x, high))\n"
# A plugin that passes every test without running it: what each kind of tampering tries to load.
CHEAT = '''\
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    item.runtest = lambda: None
'''
CHEAT_CONFTEST = CHEAT
# Walks up from the test process to the sandbox's runner and kills it.
KILL_RUNNER = """\
    import os, signal
    pid = os.getpid()
    try:
        while pid > 1:
            pid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])
            if b'runner.py' in open(f'/proc/{pid}/cmdline', 'rb').read():
                os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""
# Cases beyond the first of a kind run with the slow ones (CI runs them all), keeping the default run short.
SLOW = pytest.mark.slow
IDENTITY = "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a; "


@pytest.fixture
def factory(backend):
    return sandbox_factory(backend, {}, SandboxConfig(run_id="pytest-integrity"))


@pytest.fixture
def agent_factory(backend, tiny_task):
    """Sandboxes as an episode gets them (the local backend also hides the task's source repository)."""
    return sandbox_factory(backend, {}, SandboxConfig(run_id="pytest-integrity",
                                                      hidden_paths=(tiny_task.setup["source"][5:],)))


@pytest.fixture
def task(tiny_task):
    # As generated tasks run their tests: the repository root on PYTHONPATH, so start-up hooks there would run.
    return replace(tiny_task, test_command="PYTHONPATH=.:$PYTHONPATH python -m pytest -q -p no:cacheprovider")


def patch_of(task, changes: dict[str, str], tmp_path: Path) -> str:
    """A git patch from the task's base tree to the tree with ``changes`` (path -> new text)."""
    work = tmp_path / "work"
    work.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(snapshot(task).tar)) as tar:
        extract_tar(tar, work)
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "base")
    for path, text in changes.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    _git(work, "add", "-A")
    return _git(work, "diff", "--cached", "--binary")


def fixed_ops(extra_in_clamp: str = "", at_import: str = "") -> str:
    """``calc/ops.py`` with the gold fix, plus sabotage in ``clamp`` or at import."""
    text = CORRECT.replace('    """x limited to [low, high]."""\n',
                           '    """x limited to [low, high]."""\n' + extra_in_clamp)
    return at_import + text


class Proxy:
    """A sandbox that behaves like the real one except where a test says otherwise."""

    def __init__(self, inner, run=None, load=None):
        self._inner, self._run, self._load = inner, run, load

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def run(self, command, **kwargs):
        return self._run(self._inner, command, **kwargs) if self._run else self._inner.run(command, **kwargs)

    def load(self, snap):
        self._inner.load(snap)
        if self._load:
            self._load(self._inner)


# -- grading fails closed -----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("sabotage", [
    pytest.param({"calc/ops.py": fixed_ops(at_import="raise RuntimeError('no collection')\n")}, id="stops-collection"),
    pytest.param({"calc/ops.py": fixed_ops("    import pytest\n    pytest.skip('not today')\n")}, id="skips-in-function",
                 marks=SLOW),
    pytest.param({"calc/ops.py": fixed_ops(at_import="import pytest\npytest.skip('nope', allow_module_level=True)\n")},
                 id="skips-at-import", marks=SLOW),
    pytest.param({"calc/ops.py": fixed_ops("    import os\n    os._exit(0)\n")}, id="exit-in-function"),
    pytest.param({"calc/ops.py": fixed_ops(at_import="import os\nos._exit(0)\n")}, id="exit-at-import", marks=SLOW),
])
def test_sabotage_beside_the_fix_is_unresolved_with_reward_0(factory, task, tmp_path, sabotage):
    record = grade(task, patch_of(task, sabotage, tmp_path), factory)
    assert record.status == Status.UNRESOLVED
    assert record.tests[F2P] != "passed" and record.attempts == 1
    assert not (record.error or {}).get("where", "").startswith("rewards.health_check")


@SLOW
def test_code_under_test_cannot_kill_the_grading_runner(factory, task, tmp_path):
    # It finds the runner among its ancestors and signals it: refused (docker: the runner's real uid is root;
    # local: the tests run in a nested PID namespace where that pid is not the runner). Grading is unaffected.
    record = grade(task, patch_of(task, {"calc/ops.py": fixed_ops(KILL_RUNNER)}, tmp_path), factory)
    assert record.status == "resolved" and record.error is None, (record.error, record.tests, record.log_tail[-1500:])


@pytest.mark.slow
def test_the_same_fix_without_sabotage_resolves(factory, task, tmp_path):
    # The control of the sabotage cases: the fix they all carry is enough on its own.
    record = grade(task, patch_of(task, {"calc/ops.py": fixed_ops()}, tmp_path), factory)
    assert record.status == Status.RESOLVED


@pytest.mark.slow
def test_a_skipped_test_is_recorded_as_skipped_and_fails(factory, task, tmp_path):
    patch = patch_of(task, {"calc/ops.py": fixed_ops("    import pytest\n    pytest.skip('not today')\n")}, tmp_path)
    record = grade(task, patch, factory)
    assert record.tests[F2P] == "skipped" and record.tests["tests/test_ops.py::test_add_zero"] == "passed"
    assert record.fail_to_pass == {"passed": 0, "total": 1}


@pytest.mark.slow
def test_a_hang_past_the_timeout_is_unresolved_not_an_infra_error(factory, task, tmp_path):
    patch = patch_of(task, {"calc/ops.py": fixed_ops("    while True:\n        pass\n")}, tmp_path)
    record = grade(task, patch, factory, timeout=8)
    assert record.status == Status.UNRESOLVED
    assert record.error["where"] == "sandbox.run_tests"


@pytest.mark.slow
def test_a_forged_report_plugin_in_the_repository_is_never_loaded(factory, task, tmp_path):
    # `python -m pytest` puts the repository first on sys.path: a `-p repogym_report` would import this file.
    forged = ("import json, os\n\n\ndef pytest_sessionfinish(session, exitstatus):\n"
              "    json.dump({'nonce': os.environ.get('REPOGYM_REPORT_NONCE'), 'tests': {i.nodeid: 'passed' "
              "for i in session.items}}, open(os.environ['REPOGYM_REPORT'], 'w'))\n")
    record = grade(task, patch_of(task, {"repogym_report.py": forged, "calc/cheat.py": CHEAT}, tmp_path), factory)
    assert record.status == Status.UNRESOLVED and record.tests[F2P] == "failed"


@pytest.mark.slow
def test_the_report_path_and_nonce_are_not_in_the_environment_of_the_code_under_test(factory, task, tmp_path):
    # Code under test that writes a report of its own and exits early finds nothing to forge it with.
    every = {t: "passed" for t in task.FAIL_TO_PASS + task.PASS_TO_PASS}
    forger = ("    import json, os\n    path = os.environ.get('REPOGYM_REPORT')\n    if path:\n"
              f"        json.dump({{'nonce': os.environ.get('REPOGYM_REPORT_NONCE'), 'tests': {every!r}}}, open(path, 'w'))\n"
              "    os._exit(0)\n")
    record = grade(task, patch_of(task, {"calc/ops.py": fixed_ops(forger)}, tmp_path), factory)
    assert record.status == Status.UNRESOLVED and record.tests[F2P] == "missing"


@pytest.mark.slow
def test_infra_errors_are_the_health_check_and_a_sandbox_lost_from_outside(tiny_task, factory):
    def broken_python(inner, command, **kwargs):
        return inner.run("exit 1" if command.startswith("python -c") else command, **kwargs)

    record = grade(tiny_task, tiny_task.patch, lambda: Proxy(factory(), run=broken_python))
    assert record.status == Status.INFRA_ERROR and record.attempts == 2
    assert record.error["where"] == "rewards.health_check.interpreter"

    def killed_from_inside(inner, command, **kwargs):
        if "-p repogym_report_" in command:
            raise SandboxKilledByAgent("sandbox.test", "runner died during the tests")
        return inner.run(command, **kwargs)

    record = grade(tiny_task, tiny_task.patch, lambda: Proxy(factory(), run=killed_from_inside))
    assert record.status == Status.UNRESOLVED and record.attempts == 1
    assert record.error == {"where": "sandbox.test", "message": "runner died during the tests"}
    assert set(record.tests.values()) == {"missing"}

    def lost_from_outside(inner, command, **kwargs):
        if "-p repogym_report_" in command:
            raise SandboxError("sandbox.test", "container exited")
        return inner.run(command, **kwargs)

    record = grade(tiny_task, tiny_task.patch, lambda: Proxy(factory(), run=lost_from_outside))
    assert record.status == Status.INFRA_ERROR and record.attempts == 2
    assert record.error == {"where": "sandbox.test", "message": "container exited"}


@pytest.mark.slow
def test_the_exit_code_of_the_test_command_decides_nothing(tiny_task, factory):
    # pytest passes every test but the command reports failure: the report, not the exit code, decides.
    failing = replace(tiny_task, test_command="trap 'exit 3' EXIT; python -m pytest -q -p no:cacheprovider")
    assert grade(failing, failing.patch, factory).status == Status.RESOLVED


# -- tampering is dropped, and said -------------------------------------------------------------------------

TAMPERING = {
    "conftest": {"conftest.py": CHEAT_CONFTEST},
    "nested-conftest": {"tests/conftest.py": CHEAT_CONFTEST},
    "test-file": {"tests/test_ops.py": "def test_add_zero():\n    pass\n\n\ndef test_clamp_inside():\n    pass\n"},
    "pytest.ini": {"pytest.ini": "[pytest]\naddopts = -p calc.cheat\n"},
    "pytest.toml": {"pytest.toml": '[pytest]\naddopts = ["-p", "calc.cheat"]\n'},
    "tox.ini": {"tox.ini": "[pytest]\naddopts = -p calc.cheat\n"},
    "setup.cfg": {"setup.cfg": "[tool:pytest]\naddopts = -p calc.cheat\n"},
    "pyproject": {"pyproject.toml": '[project]\nname = "calc"\nversion = "0"\n\n[tool.pytest.ini_options]\n'
                                    'testpaths = ["tests"]\naddopts = "-p calc.cheat"\n'},
    "sitecustomize": {"sitecustomize.py": "import os\nos.environ['PYTEST_PLUGINS'] = 'calc.cheat'\n"},
    "usercustomize": {"usercustomize.py": "import os\nos.environ['PYTEST_PLUGINS'] = 'calc.cheat'\n"},
    "pth": {"calc.pth": "import os; os.environ['PYTEST_PLUGINS'] = 'calc.cheat'\n"},
}
# The kinds that do make the hidden test pass when nothing drops them (see the control test).
EFFECTIVE = ["conftest", "nested-conftest", "pytest.ini", "pyproject", "sitecustomize"]


def dropped_paths(record) -> set[str]:
    return {p.removesuffix(" [pytest section]") for p in record.dropped}


@pytest.mark.slow
@pytest.mark.parametrize("kind", [k if k in ("conftest", "sitecustomize") else pytest.param(k, marks=SLOW)
                                  for k in sorted(TAMPERING)])
def test_each_kind_of_tampering_earns_nothing_and_is_listed(factory, task, tmp_path, kind):
    record = grade(task, patch_of(task, {"calc/cheat.py": CHEAT, **TAMPERING[kind]}, tmp_path), factory)
    assert record.status == Status.UNRESOLVED and record.tests[F2P] == "failed"
    assert set(TAMPERING[kind]) <= dropped_paths(record) and "calc/cheat.py" not in dropped_paths(record)
    assert record.to_dict()["dropped"] == record.dropped  # what info["eval"] carries


@pytest.mark.slow
@pytest.mark.parametrize("kind", EFFECTIVE)
def test_control_the_tampering_would_earn_a_pass_if_nothing_dropped_it(factory, task, tmp_path, kind, monkeypatch):
    monkeypatch.setattr(evaluate, "filter_patch", lambda patch, protected=(): (patch, []))
    monkeypatch.setattr(evaluate, "_revert_tampering", lambda protected, sandbox, dropped, listed: None)
    # The test-process guards are a second line behind the filter (they catch this cheat too): off here.
    monkeypatch.setattr(evaluate, "check_run", lambda run, plan: {})
    record = grade(task, patch_of(task, {"calc/cheat.py": CHEAT, **TAMPERING[kind]}, tmp_path), factory)
    assert record.status == Status.RESOLVED


@pytest.mark.slow
def test_the_gold_patch_still_resolves_beside_every_dropped_tampering(factory, task, tmp_path):
    changes = {"calc/cheat.py": CHEAT, "calc/ops.py": fixed_ops()}
    for kind in TAMPERING:
        changes.update(TAMPERING[kind])
    record = grade(task, patch_of(task, changes, tmp_path), factory)
    assert record.status == Status.RESOLVED
    assert {p for kind in TAMPERING for p in TAMPERING[kind]} <= dropped_paths(record)


@pytest.mark.slow
def test_tampering_the_patch_splitter_misses_is_still_reverted_in_the_sandbox(factory, task, tmp_path):
    # git reads quoted names in headers; the splitter does not see `"a/conftest.py"` as a file of its own,
    # so the text filter keeps it inside the part before. The check of what git changed catches it.
    cheat = patch_of(task, {"calc/cheat.py": CHEAT}, tmp_path)
    conftest = patch_of(task, {"conftest.py": CHEAT_CONFTEST}, tmp_path / "second")
    quoted = conftest.replace("diff --git a/conftest.py b/conftest.py", 'diff --git "a/conftest.py" "b/conftest.py"')
    quoted = quoted.replace("+++ b/conftest.py", '+++ "b/conftest.py"')
    record = grade(task, cheat + quoted, factory)
    assert record.status == Status.UNRESOLVED and "conftest.py" in record.dropped


@pytest.mark.slow
def test_tampering_through_the_env_is_listed_in_info_eval(backend, tiny_task):
    env = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=10)
    try:
        env.reset()
        script = ("printf 'import os\\n' > sitecustomize.py && printf 'import os\\n' > calc/x.pth && "
                  "printf 'import pytest\\n' > pytest.toml")
        env.step(json.dumps({"name": "bash", "arguments": {"command": script}}))
        env.step(json.dumps({"name": "apply_patch", "arguments": {"patch": tiny_task.patch}}))
        _, reward, _, _, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
        assert reward == 1.0 and {"sitecustomize.py", "calc/x.pth", "pytest.toml"} <= set(info["eval"]["dropped"])
    finally:
        env.close()


# -- no way to the fix --------------------------------------------------------------------------------------

def test_added_lines_skip_short_lines_and_lines_of_the_base(tiny_task):
    base = CORRECT.replace("min(x, high)", "min(x, high - 1)")
    assert added_lines(tiny_task.patch, base) == ["return max(low, min(x, high))"]
    assert "assert clamp(15, 0, 10) == 10" in added_lines(tiny_task.test_patch, base)
    assert added_lines("+x = 1\n+    return max(low, min(x, high - 1))\n", base) == []


def test_a_fresh_sandbox_has_one_parentless_commit_and_no_fix_in_git_or_tmp(agent_factory, tiny_task):
    assert find_leaks(tiny_task, agent_factory, roots=["/tmp", "/repo/.git"]) == []


@pytest.mark.slow
def test_nothing_the_fresh_sandbox_can_read_holds_a_line_of_the_fix_or_hidden_tests(agent_factory, tiny_task):
    assert find_leaks(tiny_task, agent_factory) == []


def test_the_leak_check_finds_a_planted_fix_on_disk_and_in_git(factory, tiny_task):
    def plant_file(inner):
        inner.run(f"printf '%s\\n' '{FIXED_CLAMP.strip()}' 'x' > /tmp/notes.txt")

    found = find_leaks(tiny_task, lambda: Proxy(factory(), load=plant_file), roots=["/tmp"])
    assert found == ["/tmp/notes.txt holds 1 line(s) of the gold patch: ['return max(low, min(x, high))']"]

    def plant_history(inner):
        inner.write_file(".fix.patch", tiny_task.patch.encode())
        inner.run(IDENTITY + "git apply .fix.patch && rm .fix.patch && git stash -q && git stash apply -q && "
                  "git commit -qam fix && git branch fixed && git reset -q --hard HEAD~1")

    found = find_leaks(tiny_task, lambda: Proxy(factory(), load=plant_history), roots=["/tmp"])
    text = " | ".join(found)
    assert "commits (expected 1)" in text and "extra refs" in text and "line(s) of the gold patch" in text


def test_a_few_short_common_lines_in_a_library_are_not_a_leak(factory, tiny_task):
    # A real fix adds many short lines; a big library holds a couple of them by chance (pandas has
    # ``return self.copy()``), a copy of the fix holds most of them.
    short = ["result = values.copy()", "return self.copy()", "name = self.name", "index = other.index",
             "data = self.data", "key = str(key)"]
    task = replace(tiny_task, patch=tiny_task.patch + "".join(f"+    {line}\n" for line in short))

    def plant(count):
        def load(inner):
            inner.run("printf '%s\\n' " + " ".join(f"'{line}'" for line in short[:count]) + " > /tmp/library.py")
        return lambda: Proxy(factory(), load=load)

    assert find_leaks(task, plant(2), roots=["/tmp"]) == []
    found = find_leaks(task, plant(4), roots=["/tmp"])
    assert len(found) == 1 and found[0].startswith("/tmp/library.py holds 4 line(s) of the gold patch")


def test_a_reset_leaves_none_of_the_last_episode_in_git(agent_factory, tiny_task):
    box = agent_factory()
    try:
        box.load(snapshot(tiny_task))
        box.write_file(".fix.patch", tiny_task.patch.encode())
        made = box.run(IDENTITY + "git apply .fix.patch && rm .fix.patch && git stash -q && git stash apply -q && "
                       "git commit -qam fix && git branch fixed && git tag v1 && git notes add -m note && "
                       "git tag -f repogym-base HEAD && git checkout -q fixed && git pack-refs --all && git repack -adq")
        assert made.ok, made.stderr
        assert int(box.run("git rev-list --all | wc -l").stdout) > 1
        box.reset()
        assert inspect_sandbox(box, tiny_task, roots=["/tmp"]) == []
        assert box.run("git symbolic-ref HEAD").stdout.strip() == "refs/heads/main"
        assert box.read_file("calc/ops.py") == CORRECT.replace("min(x, high)", "min(x, high - 1)").encode()
        assert box.diff() == ""
    finally:
        box.close()


def test_local_sandbox_shows_no_host_path_beyond_what_it_needs(tiny_task):
    from tests.conftest import require_backend
    import sys
    require_backend("local")
    box = sandbox_factory("local", {}, SandboxConfig(run_id="pytest-integrity"))()
    try:
        from repogym.envs.sandbox.local_env import BASE_MOUNT, base_mounted
        top = set(box.run("ls -A /").stdout.split())
        # The base interpreter (at a fixed place when it is outside the system folders: no host path of it shows),
        # and the task's own virtualenv at /.repogym-python: not repogym's environment.
        prefixes = [] if base_mounted() else [Path(sys.base_prefix).resolve()]
        # and the warm bytecode of both, read-only, at /.repogym-bytecode (envs/sandbox/bytecode.py).
        allowed = set(SYSTEM_DIRS) | {"dev", "proc", "tmp", "repo", ".repogym", ".repogym-python", ".repogym-bytecode"} | {
            p.parts[1] for p in prefixes} | ({BASE_MOUNT.strip("/")} if base_mounted() else set())
        assert top <= allowed, top - allowed
        if base_mounted():
            assert box.run(f"test -e {Path(sys.base_prefix).resolve()}").exit_code != 0
        home = Path.home()
        shown = set(box.run(f"ls -A {home} 2>/dev/null").stdout.split())
        assert shown <= {p.relative_to(home).parts[0] for p in prefixes if p.is_relative_to(home)}
        assert set(box.run(f"ls -A {PROJECT_ROOT} 2>/dev/null").stdout.split()) <= {
            p.relative_to(PROJECT_ROOT).parts[0] for p in prefixes if p.is_relative_to(PROJECT_ROOT)}
        own_env = Path(sys.prefix) / "pyvenv.cfg"
        for host_path in (PROJECT_ROOT / "task_repos" / "builtin.jsonl", PROJECT_ROOT / "envs", Path(tiny_task.setup["source"][5:]),
                          *([own_env] if own_env.exists() else [])):
            assert host_path.exists() and box.run(f"test -e {host_path}").exit_code != 0
    finally:
        box.close()


@pytest.mark.slow
def test_a_generated_task_has_a_parentless_base_commit(tmp_path):
    from repogym.envs.taskgen.generate import GenerateConfig, generate
    from tests.conftest import require_backend
    require_backend("local")
    (tmp_path / "mini").mkdir()
    (tmp_path / "mini" / "__init__.py").write_text("")
    (tmp_path / "mini" / "core.py").write_text("def double(x):\n    return x * 2\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_core.py").write_text(
        "from mini.core import double\n\n\ndef test_double():\n    assert double(3) == 6\n")
    tasks, _ = generate(str(tmp_path), GenerateConfig(max_tasks=1, baseline_runs=1, sandbox="local"))
    assert tasks
    repo = tasks[0].setup["source"][5:]
    parents = subprocess.run(["git", "-C", repo, "rev-list", "--parents", "-n", "1", tasks[0].base_commit],
                             capture_output=True, text=True, check=True).stdout.split()
    assert parents == [tasks[0].base_commit]


# -- validation proves it -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_validate_runs_the_no_leak_check_on_every_task(factory, tiny_task):
    assert validate_task(tiny_task, factory, runs=1).ok

    def plant(inner):
        inner.run(f"printf '%s\\n' '{FIXED_CLAMP.strip()}' > /tmp/gold.txt")

    verdict = validate_task(tiny_task, factory, runs=1, make_agent_sandbox=lambda: Proxy(factory(), load=plant))
    assert not verdict.ok and any(p.startswith("leak: /tmp/gold.txt") for p in verdict.problems)


@pytest.mark.slow
def test_validate_cli_reports_a_leak(tmp_path, capsys, tiny_task, backend, monkeypatch):
    import repogym.envs.rewards.validate as validate
    from repogym.cli import main
    path = tmp_path / "tiny.jsonl"
    path.write_text(json.dumps(tiny_task.to_dict()) + "\n")
    assert main(["validate", "--tasks", str(path), "--sandbox", backend]) == 0
    monkeypatch.setattr(validate, "find_leaks", lambda task, make: ["planted"])
    assert main(["validate", "--tasks", str(path), "--sandbox", backend]) == 1
    assert "leak: planted" in capsys.readouterr().out


def test_imports_are_not_searched_for():
    patch = "+from babel.messages.catalog import Catalog\n+import os.path as osp\n+    catalog = Catalog()\n+important = 3\n"
    assert added_lines(patch, "") == ["catalog = Catalog()", "important = 3"]
