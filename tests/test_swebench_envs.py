"""The built-in SWE-bench environment table is well-formed data that repogym can build."""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from repogym.envs.sandbox.images import DEBIAN_FOR_PYTHON
from repogym.envs.sandbox.testrun import launch_command, runner_name
from repogym.envs.sandbox.install import install_steps
from repogym.envs.tasks.swebench_envs import ENVIRONMENTS, UNSUPPORTED, swebench_setup

SETUP_KEYS = {"python", "pip", "pre_install", "install", "runner", "cpus", "test_command"}
ENTRIES = [(repo, version) for repo, versions in ENVIRONMENTS.items() for version in versions]


@pytest.mark.parametrize("repo,version", ENTRIES)
def test_each_entry_is_a_setup_repogym_can_build(repo, version):
    setup = swebench_setup(repo, version)
    assert set(setup) <= SETUP_KEYS and setup["python"] in DEBIAN_FOR_PYTHON
    assert all(Requirement(p).specifier for p in setup["pip"])  # every requirement pinned or bounded
    assert install_steps(setup) and runner_name(setup) in ("pytest", "django", "sympy")
    command = setup.pop("test_command")
    assert runner_name(setup) != "pytest" or launch_command(command) is not None  # runs under the launcher


def test_lookups_copy_and_miss_cleanly():
    first = swebench_setup("django/django", "4.2")
    first["pip"].append("changed")
    assert "changed" not in swebench_setup("django/django", "4.2")["pip"]
    assert swebench_setup("django/django", "0.1") is None and swebench_setup("nobody/nothing", "1.0") is None
    assert not set(UNSUPPORTED) & set(ENVIRONMENTS)
