"""Tests that fail for a cause outside the patch: classified from pytest's own output (needs_network,
missing_dependency), dropped from PASS_TO_PASS by ``tasks import --drop-broken-tests`` with a note, FAIL_TO_PASS
never; and on docker, a task validated, pruned and validated again."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from repogym.cli import main
from repogym.envs.core.errors import ConfigError
from repogym.envs.rewards.causes import causes_in_output, classify, head_line
from repogym.envs.rewards.validate import DROPPED_FIELD, NOTE_FIELD, prune_task
from repogym.envs.tasks.schema import Task, load_tasks

# Tests as a real suite has them: each fails for its own reason.
SUITE = '''\
import socket

import pytest

import mypkg


def test_dns():
    raise socket.gaierror(-3, "Temporary failure in name resolution")


class TestTimeout:
    def test_connect(self):
        try:
            raise OSError(101, "Network is unreachable")
        except OSError as exc:
            raise ConnectionError("HTTPConnectionPool(host='10.255.255.1'): Max retries exceeded") from exc


@pytest.mark.parametrize("x", [1])
def test_conda_only(x):
    import cftime  # noqa: F401


def test_repo_module_broken():
    import mypkg.gone  # noqa: F401  the repository's own module: its problem, not the environment's


def test_plain_bug():
    assert mypkg.VALUE == 2


def test_fine():
    assert mypkg.VALUE == 1
'''
COLLECTION_ERROR = "import netCDF4_not_installed  # noqa: F401\n\n\ndef test_reads():\n    pass\n"


def test_causes_are_read_from_each_tests_own_failure_in_real_pytest_output(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_suite.py").write_text(SUITE)
    (tmp_path / "tests" / "test_nc.py").write_text(COLLECTION_ERROR)
    ids = ["tests/test_suite.py::test_dns", "tests/test_suite.py::TestTimeout::test_connect",
           "tests/test_suite.py::test_conda_only[1]", "tests/test_suite.py::test_repo_module_broken",
           "tests/test_suite.py::test_plain_bug", "tests/test_nc.py::test_reads"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tb=long", "-rfE",
                           "--continue-on-collection-errors", "tests/test_suite.py", "tests/test_nc.py"], cwd=tmp_path,
                          capture_output=True, text=True,
                          env={"COLUMNS": "400", "PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert done.returncode == 1, done.stdout[-2000:]
    found = causes_in_output(done.stdout, ids + ["tests/test_suite.py::test_fine"], {"mypkg", "tests", "test_suite"})
    assert found == {"tests/test_suite.py::test_dns": "needs_network",
                     "tests/test_suite.py::TestTimeout::test_connect": "needs_network",
                     "tests/test_suite.py::test_conda_only[1]": "missing_dependency",
                     "tests/test_nc.py::test_reads": "missing_dependency"}


def test_classify_names_no_cause_for_the_repositorys_own_modules_or_plain_failures():
    assert classify("ModuleNotFoundError: No module named 'xarray.core.missing'", {"xarray"}) is None
    assert classify("ModuleNotFoundError: No module named 'cftime'", {"xarray"}) == "missing_dependency"
    assert classify("E   ConnectionRefusedError: [Errno 111] Connection refused", set()) is None  # a local server
    assert classify("urllib3.exceptions.NameResolutionError: Failed to resolve 'httpbin.org'", set()) == "needs_network"
    assert classify("AssertionError: assert 1 == 2", set()) is None
    assert head_line("tests/t.py::Case::test_x[a-b]") == "Case.test_x[a-b]"


TASK = Task(instance_id="o__r-1", repo="o/r", base_commit="0" * 40, problem_statement="p", patch="x",
            FAIL_TO_PASS=["t.py::test_fix", "t.py::test_fix_net"],
            PASS_TO_PASS=["t.py::test_dns", "t.py::test_conda", "t.py::test_bug", "t.py::test_ok"],
            setup={"python": "3.9"}, extra={"dataset": "swe-bench"})


def test_prune_drops_only_pass_to_pass_tests_with_a_cause_and_notes_it():
    verdict = {"causes": {"t.py::test_dns": "needs_network", "t.py::test_conda": "missing_dependency",
                          "t.py::test_fix_net": "needs_network"},
               "remedies": {"hide_vendored": ["requests"]}}
    pruned, counts = prune_task(TASK, verdict)
    assert pruned.PASS_TO_PASS == ["t.py::test_bug", "t.py::test_ok"]
    assert pruned.FAIL_TO_PASS == TASK.FAIL_TO_PASS  # never dropped, even with a cause
    assert counts == {"dropped": 2, "remedied": 1, "f2p_broken": 1}
    assert pruned.extra[DROPPED_FIELD] == {"t.py::test_dns": "needs_network", "t.py::test_conda": "missing_dependency"}
    assert "needs_network 1, missing_dependency 1" in pruned.extra[NOTE_FIELD]
    assert pruned.setup == {"python": "3.9", "hide_vendored": ["requests"]}
    assert TASK.PASS_TO_PASS[0] == "t.py::test_dns" and "hide_vendored" not in TASK.setup  # the input is untouched
    again, counts = prune_task(pruned, verdict)  # applied twice: nothing more changes
    assert again is pruned and counts["dropped"] == 0
    unchanged, _ = prune_task(TASK, {"causes": {}, "remedies": {}})
    assert unchanged is TASK
    with pytest.raises(ConfigError, match="expected causes and remedies as objects"):
        prune_task(TASK, {"causes": ["t.py::test_dns"]})


def test_tasks_import_drop_broken_tests_writes_the_pruned_rows(tmp_path, capsys):
    row = {**{k: v for k, v in TASK.to_dict().items() if k != "setup"}, "FAIL_TO_PASS": json.dumps(TASK.FAIL_TO_PASS),
           "PASS_TO_PASS": json.dumps(TASK.PASS_TO_PASS), "version": "1.0"}
    other = {**row, "instance_id": "o__r-2"}
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps(row) + "\n" + json.dumps(other) + "\n")
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({"instance_id": "o__r-1", "ok": False, "reasons": ["p2p_fails_at_base"],
                                   "causes": {"t.py::test_dns": "needs_network",
                                              "t.py::test_fix_net": "needs_network"}}) + "\n")
    out = tmp_path / "tasks.jsonl"
    assert main(["tasks", "import", str(dataset), "--out", str(out), "--drop-broken-tests", str(results)]) == 0
    printed = capsys.readouterr().out
    assert "1 of 2 tasks have a verdict" in printed and "1 PASS_TO_PASS test(s) dropped (needs_network 1)" in printed
    assert "keep a FAIL_TO_PASS test that fails for a cause outside the patch" in printed and "o__r-1" in printed
    first, second = load_tasks(out)
    assert "t.py::test_dns" not in first.PASS_TO_PASS and first.extra[DROPPED_FIELD] == {"t.py::test_dns": "needs_network"}
    assert second.PASS_TO_PASS == TASK.PASS_TO_PASS and DROPPED_FIELD not in second.extra
    assert main(["tasks", "import", str(dataset), "--out", str(out), "--drop-broken-tests",
                 str(tmp_path / "none.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


# --- on docker: a task with such tests, validated, pruned, validated again -----------------------------------

NETWORK_TESTS = '''\
import socket

import pytest


def test_fetches_the_index():
    socket.getaddrinfo("pypi.org", 443)


def test_reads_netcdf():
    import netCDF4_conda_only  # noqa: F401


@pytest.mark.xfail(reason="a known bug")
def test_known_bug():
    assert False
'''


@pytest.mark.docker
@pytest.mark.slow
def test_validate_names_the_causes_and_the_pruned_task_validates(tiny_task, tmp_path):
    from tests.conftest import require_backend
    require_backend("docker")
    from repogym.envs.rewards.validate import validate_task
    from repogym.envs.sandbox import SandboxConfig, sandbox_factory
    # The network, missing module and known-bug (xfail) tests come with the hidden tests' patch, as PASS_TO_PASS.
    lines = NETWORK_TESTS.splitlines()
    extra = ("diff --git a/tests/test_world.py b/tests/test_world.py\nnew file mode 100644\n--- /dev/null\n"
             f"+++ b/tests/test_world.py\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines))
    task = replace(tiny_task, test_patch=tiny_task.test_patch + extra,
                   PASS_TO_PASS=tiny_task.PASS_TO_PASS + ["tests/test_world.py::test_fetches_the_index",
                                                          "tests/test_world.py::test_reads_netcdf",
                                                          "tests/test_world.py::test_known_bug"])
    factory = sandbox_factory("docker", {}, SandboxConfig(run_id="pytest"))
    verdict = validate_task(task, factory, runs=1, leaks=False)
    assert not verdict.ok and "p2p_fails_at_base" in verdict.reasons
    assert verdict.causes == {"tests/test_world.py::test_fetches_the_index": "needs_network",
                              "tests/test_world.py::test_reads_netcdf": "missing_dependency",
                              "tests/test_world.py::test_known_bug": "expected_failure"}
    assert {"needs_network", "missing_dependency", "expected_failure"} <= set(verdict.reasons)
    assert "needs_network: 1 (tests/test_world.py::test_fetches_the_index)" in verdict.problems[0]
    pruned, counts = prune_task(task, {"causes": verdict.causes, "remedies": verdict.remedies})
    assert counts["dropped"] == 3 and pruned.PASS_TO_PASS == tiny_task.PASS_TO_PASS
    again = validate_task(pruned, factory, runs=1, leaks=False)
    assert again.ok, again.problems
