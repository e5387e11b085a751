"""pytest plugins the environment's ``setup.pip`` installs load under the harness (plugin autoload off) as they
do under a plain pytest; a plugin the agent plants (a ``.dist-info`` in the tree) still does not, the list of
plugins is out of the agent's reach, and a command's ``-p no:NAME`` still blocks one."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.sandbox.install import LIST_PLUGINS, PLUGIN_LIST
from repogym.envs.sandbox.testrun import environment_plugin_args, run_test_command
from repogym.envs.tasks.repos import snapshot

MOCKER_TEST = '''\
import os


def test_uses_the_mocker_fixture(mocker):
    mocker.patch("os.getcwd", return_value="/nowhere")
    assert os.getcwd() == "/nowhere"
'''
# An agent's plugin: a distribution in the tree (on sys.path) whose pytest11 entry point would pass every test.
PLANTED = {"evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
           "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = evilplugin\n",
           "evilplugin.py": "import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n"
                            "    item.runtest = lambda: None\n",
           "tests/test_fails.py": "def test_fails():\n    assert False\n"}


def test_the_plugin_list_names_entry_point_modules_and_is_refused_where_the_tests_can_write_it(tmp_path):
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*")) / "site-packages"
    (site / "demo_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "demo_plugin-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugin\nVersion: 1.0\n")
    (site / "demo_plugin-1.0.dist-info" / "entry_points.txt").write_text(
        "[pytest11]\ndemo = demo_plugin.hooks\nobject = demo_plugin:PLUGIN\n[console_scripts]\ndemo = demo_plugin:main\n")
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-I", "-c", LIST_PLUGINS], check=True)
    assert (venv / PLUGIN_LIST).read_text() == "demo demo_plugin.hooks\n"  # -p loads modules: not module:object
    # This test runs where it can write the list (as root, or its owner): an agent could too, so it is not read.
    expanded = subprocess.run(f"echo {environment_plugin_args(python)}", shell=True, capture_output=True, text=True)
    assert expanded.stdout.strip() == ""


def _run(sandbox, command: str, files: list[str]):
    run = run_test_command(sandbox, command, files)
    return run.outcomes, run.log


def test_the_environments_plugins_load_and_the_agents_do_not(tiny_task, backend):
    task = replace(tiny_task, setup={**tiny_task.setup, "pip": ["pytest-mock==3.14.0"]})
    sandbox = sandbox_factory(backend, task.setup, SandboxConfig(run_id="pytest-plugins"))()
    try:
        sandbox.load(snapshot(task))
        sandbox.write_file("tests/test_mocker.py", MOCKER_TEST.encode())
        for path, text in PLANTED.items():
            sandbox.write_file(path, text.encode())
        mocker = "tests/test_mocker.py::test_uses_the_mocker_fixture"
        outcomes, log = _run(sandbox, "python -m pytest -q", ["tests/test_mocker.py", "tests/test_fails.py"])
        assert outcomes == {mocker: "passed", "tests/test_fails.py::test_fails": "failed"}, log
        # Blocked by the command, by entry point name: the fixture is gone again.
        outcomes, log = _run(sandbox, "python -m pytest -q -p no:pytest_mock", ["tests/test_mocker.py"])
        assert outcomes == {mocker: "error"} and "fixture 'mocker' not found" in log, log
        # The commands the launcher does not run get the same plugins (shell syntax in the command).
        outcomes, log = _run(sandbox, "true && python -m pytest -q", ["tests/test_mocker.py"])
        assert outcomes == {mocker: "passed"}, log
        prefix = sandbox.run("python -c 'import sys; print(sys.prefix)'").stdout.strip()
        listed = f"{prefix}/{PLUGIN_LIST}"
        assert sandbox.run(f"cat {listed}").stdout == "pytest_mock pytest_mock\n"
        tamper = sandbox.run(f"echo 'evil evilplugin' >> {listed} || mv {listed} /tmp/x")
        assert sandbox.run(f"cat {listed}").stdout == "pytest_mock pytest_mock\n", tamper.stderr
    finally:
        sandbox.close()
