"""Red team: the harness's own staging and reading, broken on purpose by the agent, never excludes an episode
nor lets a change through, on both backends.

- **Excluded on demand.** The agent breaks the scratch folders the harness stages a test run in (``/tmp``
  read-only or full, every scratch folder read-only), then calls ``run_tests``: the run still happens
  (docker: staged where the agent cannot write; local: a fallback folder) or the agent gets an error
  observation (``sandbox_refused``), never an ``infra_error``, a NaN reward or an exclusion; its gold patch
  still resolves at submit.
- **Files are read whole or refused.** A ``pyproject.toml`` whose pytest section is the base's within its
  first MiB (a comment line longer than that), then an ``addopts`` loading the agent's plugin: the section
  check reads the file whole, or drops it as tampering when it is too large to read.
"""

from __future__ import annotations

import json
import math

import pytest

from repogym.envs.core.errors import InfraError, SandboxRefused
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.rewards import grade
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.sandbox.testrun import run_test_command
from repogym.envs.core.status import Status
from repogym.envs.tasks.repos import snapshot
from tests.test_integrity import CHEAT, F2P, fixed_ops, patch_of


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


@pytest.fixture
def env(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=20,
                              config=EnvConfig(sandbox_config=SandboxConfig(run_id="pytest-staging"),
                                               eval_pool_size=0))
    environment.reset()
    yield environment
    environment.close()


def step(env, name, **arguments):
    obs, reward, terminated, truncated, info = env.step(call(name, **arguments))
    assert "infra_error" not in info and not info.get("exclude") and not math.isnan(reward), (obs, info)
    return obs, reward, terminated, truncated, info


# Each breaks where a test run is staged today; the last breaks every scratch folder the agent may write.
BREAK_SCRATCH = {
    "read-only-tmp": "chmod 555 /tmp",
    "full-tmp": "head -c 600M /dev/zero > /tmp/fill; df -k /tmp | tail -1",
    "every-scratch-read-only": "for d in /tmp /dev/shm /var/tmp /home/agent; do [ -d $d ] && chmod 555 $d; done; true",
}


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(BREAK_SCRATCH))
def test_breaking_the_staging_place_is_an_observation_never_an_exclusion(env, attack):
    step(env, "bash", command=BREAK_SCRATCH[attack], timeout=120)
    obs, reward, terminated, truncated, info = step(env, "run_tests", tests=["tests/test_ops.py"])
    assert not terminated and not truncated and reward == 0.0
    if info.get("error"):  # only when every place the agent can write is broken, and only on local
        assert attack == "every-scratch-read-only" and env.backend == "local", obs
        assert info["error"] == "sandbox_refused" and "run_tests" in obs, obs
    else:
        assert info["counts"] == {"passed": 2}, obs
    # The episode goes on, and the gold patch still resolves (grading stages in a fresh sandbox).
    step(env, "apply_patch", patch=env.task.patch)
    obs, reward, terminated, _, info = step(env, "submit")
    assert terminated and reward == 1.0 and info["eval"]["status"] == Status.RESOLVED, obs


def test_a_run_the_sandbox_refuses_to_stage_is_the_agents_typed_error(backend, tiny_task):
    """Below the tool: run_test_command raises SandboxRefused, never an InfraError, when nothing can be staged."""
    box = sandbox_factory(backend, {}, SandboxConfig(run_id="pytest-staging"))()
    try:
        box.load(snapshot(tiny_task))
        box.run("for d in /tmp /dev/shm /var/tmp /home/agent; do [ -d $d ] && chmod 555 $d; done; true")
        try:
            run = run_test_command(box, tiny_task.test_command, ["tests/test_ops.py"], timeout=120)
        except SandboxRefused as exc:
            assert backend == "local" and exc.where.startswith("sandbox.run_tests")
            assert not isinstance(exc, InfraError)
        else:
            assert backend == "docker" and run.outcomes == {"tests/test_ops.py::test_add_zero": "passed",
                                                            "tests/test_ops.py::test_clamp_inside": "passed"}
    finally:
        box.close()


# -- files are read whole or refused -------------------------------------------------------------------------

BASE_PYPROJECT = '[project]\nname = "calc"\nversion = "0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
# Read through a 1 MiB window, this is the base's pytest section; read whole, it loads calc.cheat.
LONG_PYPROJECT = BASE_PYPROJECT + "# " + "x" * (1 << 20) + '\naddopts = "-p calc.cheat"\n'


@pytest.fixture
def factory(backend):
    return sandbox_factory(backend, {}, SandboxConfig(run_id="pytest-staging"))


def test_a_pytest_section_past_the_first_mib_is_dropped(factory, tiny_task, tmp_path):
    record = grade(tiny_task, patch_of(tiny_task, {"calc/cheat.py": CHEAT, "pyproject.toml": LONG_PYPROJECT},
                                       tmp_path), factory)
    assert "pyproject.toml [pytest section]" in record.dropped, record.dropped
    assert record.status == Status.UNRESOLVED and record.tests[F2P] == "failed"


def test_the_gold_patch_resolves_beside_a_long_pyproject(factory, tiny_task, tmp_path):
    changes = {"calc/cheat.py": CHEAT, "pyproject.toml": LONG_PYPROJECT, "calc/ops.py": fixed_ops()}
    record = grade(tiny_task, patch_of(tiny_task, changes, tmp_path), factory)
    assert record.status == Status.RESOLVED
    assert "pyproject.toml [pytest section]" in record.dropped


def test_a_long_pyproject_that_keeps_the_pytest_section_is_still_the_agents(factory, tiny_task, tmp_path):
    # Read whole, a long file whose pytest section is unchanged is not tampering: it stays.
    long_but_honest = BASE_PYPROJECT + "# " + "x" * (1 << 20) + "\n"
    changes = {"pyproject.toml": long_but_honest, "calc/ops.py": fixed_ops()}
    record = grade(tiny_task, patch_of(tiny_task, changes, tmp_path), factory)
    assert record.status == Status.RESOLVED and not record.dropped
