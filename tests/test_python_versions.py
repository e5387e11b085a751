"""Tasks that ask for another Python (``setup.python``): an image of that Python on docker, a clear refusal on local."""

from dataclasses import replace

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.rewards import grade
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.sandbox.images import DEBIAN_FOR_PYTHON, base_image_name, env_dockerfile, python_of
from repogym.envs.core.status import Status
from repogym.envs.tasks.repos import snapshot
from tests.conftest import require_backend


def test_a_python_version_maps_to_the_debian_release_that_ships_it():
    assert python_of({}) == "3.11" and base_image_name() == "repogym/base:bookworm"
    assert base_image_name("3.9") == "repogym/base:bullseye"
    assert env_dockerfile({"python": "3.9"}).startswith("FROM repogym/base:bullseye\n")
    with pytest.raises(ConfigError, match=r"no image for Python '2.7'.*3\.9, 3\.11, 3\.13"):
        python_of({"python": "2.7"})
    assert set(DEBIAN_FOR_PYTHON) >= {"3.9", "3.11"}


def test_the_local_backend_refuses_a_task_for_another_python():
    with pytest.raises(ConfigError, match="needs Python 3.9.*docker"):
        sandbox_factory("local", {"python": "3.9"})


def test_the_local_backend_refuses_a_task_that_hides_pips_vendored_copy():
    # A leak the image would remove stays in reach on the local sandbox (the host's /usr): refused, never run.
    with pytest.raises(ConfigError, match=r"hides pip's vendored \['requests'\].*--sandbox docker"):
        sandbox_factory("local", {"hide_vendored": ["requests"]})


@pytest.mark.docker
@pytest.mark.slow
def test_a_python_39_task_runs_and_grades_in_its_own_image(tiny_task):
    # A bullseye base is built on first use (debootstrap, about a minute), then shared by every 3.9 task.
    require_backend("docker")
    task = replace(tiny_task, setup={**tiny_task.setup, "python": "3.9", "pip": ["six==1.16.0"]})
    factory = sandbox_factory("docker", task.setup, SandboxConfig(run_id="pytest"))
    sandbox = factory()
    try:
        sandbox.load(snapshot(task))
        version = sandbox.run("python --version && python -c 'import six; print(six.__version__)'")
        words = version.stdout.split()
        assert version.ok and words[0] == "Python" and words[1].startswith("3.9.") and words[2] == "1.16.0"
    finally:
        sandbox.close()
    gold = grade(task, task.patch, factory)
    assert gold.status == Status.RESOLVED, gold.error
    empty = grade(task, "", factory)
    assert empty.status == Status.UNRESOLVED
    assert empty.tests["tests/test_hidden.py::test_clamp_above"] == "failed"
