"""A task naming a dataset's prebuilt image (``setup.image``) runs in the docker backend, at the image's workdir.

The image here is built in the test, offline, in SWE-bench's layout: the project at ``/testbed`` installed
editable (a ``.pth`` file), the environment's interpreter at ``/opt/miniconda3/envs/testbed/bin/python``,
running as root, with no ``agent`` user of its own.
"""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
import uuid

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.rewards.leaks import find_leaks
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.sandbox.prebuilt import ENV_PYTHONS, prebuilt_dockerfile, workdir_of
from repogym.envs.tools.base import ToolError, repo_path
from tests.conftest import CORRECT, IN_CI, require_backend

SWEBENCH_LIKE = "repogym-test/swebench-layout:1"
CONDA_PYTHON = ENV_PYTHONS[0]
DOCKERFILE = f"""FROM repogym/base:bookworm
USER root
COPY testbed/ /testbed/
RUN mkdir -p {CONDA_PYTHON.rsplit('/', 1)[0]} && ln -s /usr/bin/python3 {CONDA_PYTHON} \\
 && echo /testbed > "$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')/testbed.pth" \\
 && echo built in place > /testbed/IMAGE_ONLY
WORKDIR /testbed
"""


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


# -- fast: no docker ----------------------------------------------------------------------------------------
def test_local_backend_refuses_a_task_with_its_own_image():
    with pytest.raises(ConfigError, match="needs the docker backend"):
        sandbox_factory("local", {"image": "swebench/sweb.eval.x86_64.a_1776_b-1", "workdir": "/testbed"})


def test_workdir_is_checked():
    assert workdir_of({}) == "/repo" and workdir_of({"workdir": "/testbed"}) == "/testbed"
    for bad in ("testbed", "/", "/tmp/x", "/home", "/opt", "/proc", "/testbed/../etc"):
        with pytest.raises(ConfigError, match="setup.workdir"):
            workdir_of({"workdir": bad})


def test_tool_paths_take_the_workdir_and_the_repo_alias():
    assert repo_path("/testbed/calc/ops.py", "/testbed") == "calc/ops.py"
    assert repo_path("/repo/calc/ops.py", "/testbed") == "calc/ops.py"
    assert repo_path("/testbed", "/testbed") == "."
    assert repo_path("calc", "/testbed") == "calc"
    with pytest.raises(ToolError, match="relative to /testbed"):
        repo_path("/etc/passwd", "/testbed")
    with pytest.raises(ToolError, match="outside"):
        repo_path("/testbed/calc", "/repo")  # only the sandbox's own workdir


def test_dockerfile_uses_the_datasets_interpreter_and_moves_a_venv_in_the_workdir():
    found = {"env_python": CONDA_PYTHON, "runner_python": "/usr/bin/python3", "useradd": ""}
    text, env_python = prebuilt_dockerfile("img", "/testbed", found)
    assert env_python == CONDA_PYTHON
    assert "ENV PATH=/opt/miniconda3/envs/testbed/bin:$PATH" in text and "agent:x:1000:1000" in text
    assert "ln -s /testbed /repo" in text
    assert 'repogym.python="/usr/bin/python3"' in text
    # R2E-Gym's venv lives in the workdir, which the repository's tmpfs hides: it moves out.
    text, env_python = prebuilt_dockerfile("img", "/testbed", {**found, "env_python": "/testbed/.venv/bin/python",
                                                               "runner_python": "/testbed/.venv/bin/python"})
    assert env_python == "/opt/repogym/venv/bin/python"
    assert "cp -a /testbed/.venv /opt/repogym/venv" in text and 'repogym.python="/opt/repogym/venv/bin/python"' in text


# -- docker ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def swebench_image(tmp_path_factory):
    require_backend("docker")
    from repogym.envs.sandbox.images import _build, base_image_exists
    if not base_image_exists():
        if IN_CI:
            pytest.fail("CI=true but the base image is missing: .ci/run must run `repogym images build`")
        pytest.skip("base image missing: run `repogym images build`")
    from repogym.envs.sandbox.docker_client import docker_client
    files = {"testbed/calc/__init__.py": b"", "testbed/calc/ops.py": CORRECT.encode()}
    _build(docker_client(), DOCKERFILE, files, SWEBENCH_LIKE, network=False)
    return SWEBENCH_LIKE


@pytest.fixture
def prebuilt_task(tiny_task, swebench_image):
    return dataclasses.replace(tiny_task, setup={**tiny_task.setup, "image": swebench_image, "workdir": "/testbed"})


def _containers_of(tag: str) -> list:
    from repogym.envs.sandbox import bytecode
    from repogym.envs.sandbox.docker_client import docker_client
    bytecode.wait()  # the image's bytecode volume is filled by a container of its own, removed when done
    return docker_client().containers.list(all=True, filters={"ancestor": tag})


@pytest.mark.docker
def test_missing_image_is_a_clear_error():
    require_backend("docker")
    name = f"repogym-test/absent-{uuid.uuid4().hex[:8]}:1"
    with pytest.raises(ConfigError, match=f"docker pull {name}"):
        sandbox_factory("docker", {"image": name, "workdir": "/testbed"})


@pytest.mark.docker
def test_episode_in_a_swebench_layout_image(prebuilt_task):
    from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
    from repogym.envs.sandbox.prebuilt import ensure_prebuilt_image
    prebuilt = ensure_prebuilt_image(prebuilt_task.setup)
    assert (prebuilt.workdir, prebuilt.env_python, prebuilt.python) == ("/testbed", CONDA_PYTHON, CONDA_PYTHON)
    assert ensure_prebuilt_image(prebuilt_task.setup) == prebuilt  # built once, found again by its hash
    run_id = f"prebuilt-{uuid.uuid4().hex[:6]}"
    env = RepoTaskEnv(task=prebuilt_task, sandbox="docker",
                      config=EnvConfig(max_turns=20, sandbox_config=SandboxConfig(run_id=run_id)))
    try:
        obs, _ = env.reset()
        assert "checked out at /testbed" in obs
        assert env._sandbox.repo_dir == "/testbed"
        where = env.step(call("bash", command="pwd; command -v python; whoami; ls /repo/calc; cat IMAGE_ONLY; "
                                             "cd /tmp && python -c 'import calc; print(calc.__file__)'"))[0]
        # The image's interpreter and its editable install, the task's tree (not the image's copy), as the agent.
        assert "/testbed\n" in where and CONDA_PYTHON in where and "agent" in where and "ops.py" in where
        assert "/testbed/calc/__init__.py" in where and "built in place" not in where
        assert "def clamp" in env.step(call("view", path="/testbed/calc/ops.py"))[0]
        assert "def clamp" in env.step(call("view", path="/repo/calc/ops.py"))[0]
        assert "clamp" in env.step(call("search", pattern="def clamp", path="/testbed/calc"))[0]
        tests = env.step(call("run_tests", tests=["tests/test_ops.py"]))[0]
        assert "2 passed" in tests
        # Gold resolves.
        assert "applied" in env.step(call("apply_patch", patch=prebuilt_task.patch))[0]
        _, reward, term, _, info = env.step(call("submit"))
        assert (reward, term, info["eval"]["status"]) == (1.0, True, "resolved")
        # The empty patch fails.
        env.reset()
        _, reward, term, _, info = env.step(call("submit"))
        assert (reward, term, info["eval"]["status"]) == (0.0, True, "unresolved")
        assert info["eval"]["fail_to_pass"] == {"passed": 0, "total": 1}
    finally:
        env.close()
    assert find_leaks(prebuilt_task, sandbox_factory("docker", prebuilt_task.setup,
                                                     SandboxConfig(run_id=run_id))) == []
    assert _containers_of(prebuilt.tag) == []


def test_an_interpreter_too_old_for_the_runner_is_a_clear_error():
    from repogym.envs.sandbox.prebuilt import _probe

    class Containers:
        def run(self, *args, **kwargs):
            return f"env_python={CONDA_PYTHON}\nenv_version=3.6\nrunner_python=\ngit=/usr/bin/git\n".encode()

    class Client:
        containers = Containers()

    with pytest.raises(ConfigError, match=r"needs Python >= 3.8.*Python 3.6"):
        _probe(Client(), "old:1")


R2E_LIKE = "repogym-test/r2e-layout:1"
R2E_DOCKERFILE = """FROM repogym/base:bookworm
COPY testbed/ /testbed/
RUN python3 -m venv --without-pip --system-site-packages /testbed/.venv \\
 && echo /testbed > "$(/testbed/.venv/bin/python -c 'import site; print(site.getsitepackages()[0])')/testbed.pth" \\
 && printf '#!/testbed/.venv/bin/python\\nimport sys; print(sys.prefix)\\n' > /testbed/.venv/bin/whereami \\
 && chmod +x /testbed/.venv/bin/whereami
"""


def _calc_snapshot():
    from repogym.envs.sandbox.snapshot import RepoSnapshot
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"calc/__init__.py": b"", "calc/ops.py": CORRECT.encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return RepoSnapshot("calc", buf.getvalue())


@pytest.mark.docker
def test_a_venv_inside_the_workdir_moves_out_of_the_tmpfs(swebench_image):
    from repogym.envs.sandbox.docker_client import docker_client
    from repogym.envs.sandbox.images import _build
    from repogym.envs.sandbox.prebuilt import ensure_prebuilt_image
    _build(docker_client(), R2E_DOCKERFILE, {"testbed/calc/__init__.py": b"", "testbed/calc/ops.py": CORRECT.encode()},
           R2E_LIKE, network=False)
    setup = {"image": R2E_LIKE, "workdir": "/testbed"}
    prebuilt = ensure_prebuilt_image(setup)
    assert (prebuilt.env_python, prebuilt.python) == ("/opt/repogym/venv/bin/python",) * 2
    sandbox = sandbox_factory("docker", setup)()
    try:
        sandbox.load(_calc_snapshot())
        out = sandbox.run("command -v python; whereami; cd /tmp && python -c 'import calc; print(calc.__file__)'")
        assert out.ok, out.stderr
        # The venv's interpreter and scripts, from its new place; its editable install finds the loaded tree.
        assert out.stdout.split() == ["/opt/repogym/venv/bin/python", "/opt/repogym/venv", "/testbed/calc/__init__.py"]
    finally:
        sandbox.close()
    assert _containers_of(prebuilt.tag) == []
