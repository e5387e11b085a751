"""Infrastructure faults: the episode ends as ``infra_error`` with its cause, the env recovers on the next
reset, and nothing already finished is lost. (A fault the agent causes is not one: tests/test_hostile.py.)"""

import json
import math
import os
import shutil
import subprocess
import threading
import time

import pytest

from repogym.agents import make_agent
from repogym.agents.rollout import run_episode
from repogym.envs.core.errors import InfraError, SandboxError
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.sandbox import SandboxConfig
from repogym.envs.core.status import Status


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def make_env(backend, task, **sandbox):
    config = EnvConfig(sandbox_config=SandboxConfig(run_id="pytest-faults", **sandbox), eval_pool_size=0)
    return RepoTaskEnv(task=task, sandbox=backend, max_turns=30, config=config)


@pytest.fixture
def docker_env(tiny_task):
    from tests.conftest import require_backend
    require_backend("docker")
    env = make_env("docker", tiny_task, answer_slack=3.0)
    env.reset()
    yield env
    env.close()


def assert_infra_error(step, where_prefix):
    obs, reward, term, trunc, info = step
    assert trunc and not term and math.isnan(reward) and info["exclude"]
    assert info["eval"]["status"] == Status.INFRA_ERROR and info["infra_error"]["where"].startswith(where_prefix)
    assert "infrastructure error" in obs
    return info["infra_error"]["message"]


def assert_recovers(env, tiny_task):
    env.reset()
    env.step(call("apply_patch", patch=tiny_task.patch))
    obs, reward, term, *_ = env.step(call("submit"))
    assert term and reward == 1.0, obs


def container_gone(name):
    from repogym.envs.sandbox.docker_client import docker_client
    return not docker_client().containers.list(all=True, filters={"name": name})


@pytest.mark.docker
def test_container_killed_during_a_command(docker_env, tiny_task):
    box = docker_env._sandbox
    threading.Timer(1.0, box.container.kill).start()
    message = assert_infra_error(docker_env.step(call("bash", command="sleep 20")), "sandbox.docker")
    assert "exited" in message and "container" in message  # the cause: the runner's container died
    assert_recovers(docker_env, tiny_task)
    assert container_gone(box.name)  # the dead one was removed, not leaked


@pytest.mark.docker
def test_container_killed_between_steps(docker_env, tiny_task):
    docker_env.step(call("bash", command="echo before"))
    docker_env._sandbox.container.kill()
    assert_infra_error(docker_env.step(call("view", path="calc/ops.py")), "sandbox.docker")
    assert_recovers(docker_env, tiny_task)


@pytest.mark.docker
def test_a_hanging_exec_is_an_infra_error_after_the_slack(docker_env, tiny_task):
    box = docker_env._sandbox
    box.container.pause()  # every process frozen: the runner can never answer
    start = time.monotonic()
    message = assert_infra_error(docker_env.step(call("bash", command="echo hi", timeout=1)), "sandbox.docker")
    assert "did not answer" in message and time.monotonic() - start < 20
    assert_recovers(docker_env, tiny_task)
    assert container_gone(box.name)


@pytest.mark.docker
def test_a_missing_image_fails_reset_with_the_image_named(tiny_task):
    from tests.conftest import require_backend
    require_backend("docker")
    env = make_env("docker", tiny_task, image="repogym/no-such-image:gone")
    try:
        with pytest.raises(SandboxError, match="no-such-image"):
            env.reset()
        # Through the rollout (as bench and the fleet run it): the episode is data, an infra_error.
        from repogym.bench.runner import EpisodeSpec, _episode
        result = _episode(env, make_agent("null"), "null", EpisodeSpec(tiny_task, 0, 0, None))
        assert result.status == Status.INFRA_ERROR and "no-such-image" in result.eval["error"]["message"]
    finally:
        env.close()
    good = make_env("docker", tiny_task)
    try:
        assert_recovers(good, tiny_task)
    finally:
        good.close()


@pytest.mark.slow
def test_a_full_host_disk_is_an_infra_error_and_the_env_goes_on(backend, tiny_task, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem to fill needs root")
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.decode().strip()}")
    env = make_env(backend, tiny_task)
    try:
        with open(full / "filler", "wb", buffering=0) as fh:  # fill it to the last byte
            try:
                while True:
                    fh.write(b"x" * 512)
            except OSError:
                pass
        with pytest.raises(InfraError, match="No space left") as caught:
            run_episode(env, make_agent("oracle", tasks=[tiny_task]), task_id=tiny_task.instance_id, trajectory=full / "t.jsonl")
        assert caught.value.where == "repogym.agents.trajectory"
        (full / "filler").unlink()
        result = run_episode(env, make_agent("oracle", tasks=[tiny_task]), task_id=tiny_task.instance_id, trajectory=full / "t.jsonl")
        assert result.status == Status.RESOLVED and (full / "t.jsonl").read_text().count("\n") >= 3
    finally:
        env.close()
        subprocess.run(["umount", str(full)], check=False)


def _dockerd_restartable():
    """The pid and command line of a dockerd this test may restart (root, not under systemd), else None."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        return None
    pids = subprocess.run(["pidof", "dockerd"], capture_output=True, text=True).stdout.split()
    if len(pids) != 1 or os.path.exists("/run/systemd/system"):
        return None
    with open(f"/proc/{pids[0]}/cmdline", "rb") as fh:
        return int(pids[0]), [a.decode() for a in fh.read().split(b"\0") if a]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.alone  # it restarts the machine's dockerd: every other Docker test would lose its daemon meanwhile
def test_dockerd_restart_mid_episode(tiny_task):
    from tests.conftest import require_backend
    require_backend("docker")
    found = _dockerd_restartable()
    if found is None:
        pytest.skip("dockerd here is not one this test may restart (needs root and no systemd)")
    pid, cmdline = found
    env = make_env("docker", tiny_task)
    try:
        env.reset()
        env.step(call("bash", command="echo before"))
        os.kill(pid, 15)
        for _ in range(200):
            if not os.path.exists(f"/proc/{pid}"):
                break
            time.sleep(0.1)
        log = open("/var/log/dockerd.log", "ab")
        subprocess.Popen(cmdline, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        assert_infra_error(env.step(call("bash", command="echo after")), "sandbox.docker")
        from repogym.envs.sandbox.docker_client import docker_client
        for _ in range(120):
            try:
                docker_client().ping()
                break
            except Exception:
                time.sleep(0.5)
        assert_recovers(env, tiny_task)
    finally:
        env.close()
        if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:  # never leave CI without one
            subprocess.Popen(cmdline, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
            time.sleep(5)


@pytest.mark.slow
def test_a_sandbox_that_fails_to_start_is_infrastructure_replaced_and_counted(tiny_task, tmp_path, monkeypatch):
    """A runner that exits at its first ping, before any command of the agent, is never blamed on the agent."""
    from tests.conftest import require_backend
    require_backend("local")
    import repogym.envs.sandbox.local as local
    failures = tmp_path / "failures"
    failures.write_text("2")
    flaky = tmp_path / "flaky_launch.py"
    flaky.write_text(  # the first two starts die at once, as a runner starved on a loaded machine does
        "import os, sys\n"
        f"count = int(open({str(failures)!r}).read())\n"
        "if count > 0:\n"
        f"    open({str(failures)!r}, 'w').write(str(count - 1))\n"
        "    sys.exit(1)\n"
        f"os.execv(sys.executable, [sys.executable, '-I', {str(local.LAUNCHER)!r}, *sys.argv[1:]])\n")
    monkeypatch.setattr(local, "LAUNCHER", flaky)
    env = make_env("local", tiny_task)
    try:
        obs, info = env.reset()
        assert info["sandbox_restarts"] == 2 and failures.read_text() == "0"
        env.step(call("apply_patch", patch=tiny_task.patch))
        obs, reward, term, *_ = env.step(call("submit"))
        assert term and reward == 1.0, obs
        failures.write_text("9")  # never starts: reset raises the infrastructure error, typed, with its cause
        env._sandbox.dirty_reason = "replace it"
        with pytest.raises(SandboxError, match="before any command"):
            env.reset()
    finally:
        env.close()


def test_a_rollout_worker_turns_an_outside_failure_into_infra_error_and_a_bug_into_internal_error(tiny_task,
                                                                                                 monkeypatch):
    from repogym.trainer.fleet import EpisodeRequest, RolloutWorker, WorkerSpec
    from repogym.envs.core.errors import InternalError, SandboxKilledByAgent
    monkeypatch.setenv("REPOGYM_STRICT", "0")  # counted, not raised: what a training run does
    worker = RolloutWorker(WorkerSpec(tasks=[tiny_task], env=EnvConfig(sandbox="local"), agent="null"))
    # reset never lets SandboxKilledByAgent out (it replaces the sandbox), so one escaping is a bug of ours too.
    for error, status in ((SandboxError("sandbox.local.start", "no bwrap"), Status.INFRA_ERROR),
                          (RuntimeError("a bug"), Status.INTERNAL_ERROR),
                          (SandboxKilledByAgent("sandbox.local.ping", "runner exited"), Status.INTERNAL_ERROR)):
        def broken_reset(self, *, seed=None, options=None, error=error):
            raise error
        monkeypatch.setattr(RepoTaskEnv, "reset", broken_reset)
        outcome = worker.run(EpisodeRequest(task_id=tiny_task.instance_id, seed=0))
        assert outcome.status == status and math.isnan(outcome.reward) and outcome.excluded
        assert outcome.error["message"].endswith(error.message if status == Status.INFRA_ERROR else str(error))
    monkeypatch.setenv("REPOGYM_STRICT", "1")
    with pytest.raises(InternalError):  # the test suite's strict mode: a bug fails the test
        worker.run(EpisodeRequest(task_id=tiny_task.instance_id, seed=0))
