"""Issue 25: whatever a process started is gone when it ends, before any `repogym gc`.

Each test runs a child Python that starts sandboxes (the agent's, a grading pool and a fork pool still filling),
then ends: normally, by an exception, by SIGTERM or SIGINT, or after its containers were killed at random mid-run.
Then no container, bubblewrap process or cgroup of its run may remain.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import require_backend

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent('''
    import json, random, sys, threading, time
    from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
    from repogym.envs.sandbox import SandboxConfig

    backend, run_id, how = sys.argv[1:4]
    config = EnvConfig(sandbox=backend, sandbox_config=SandboxConfig(run_id=run_id), eval_pool_size=2,
                       fork_pool_size=3)
    if how == "kills":  # a bench while a killer kills the run's sandboxes at random; then a normal exit
        import os, signal, tempfile
        from repogym.bench.runner import BenchConfig, run_bench
        def victims():
            if backend == "docker":
                import docker
                return [("container", c) for c in docker.from_env().containers.list(
                    filters={"label": f"repogym.run={run_id}"})]
            from tests.test_cleanup import bwrap_children  # the launcher execs bubblewrap: this process's child
            return [("process", pid) for pid in bwrap_children(os.getpid())]
        kills = []
        def killer():
            for _ in range(6):
                time.sleep(random.uniform(0.5, 1.5))
                found = victims()
                if found:
                    kind, victim = random.choice(found)
                    try:
                        victim.kill() if kind == "container" else os.kill(victim, signal.SIGKILL)
                        kills.append(victim)
                    except Exception:
                        pass
        thread = threading.Thread(target=killer)
        thread.start()
        db = tempfile.mkdtemp() + "/bench.db"
        run_bench(BenchConfig(agent="oracle", suite="builtin", db=db, concurrency=2, sandbox=backend,
                                       limit=6, progress=False, run_id=run_id))
        thread.join()
        print(f"kills {len(kills)}", file=sys.stderr)
        sys.exit(0)  # the bench closed what it knows of; the exit must take the rest
    envs = [RepoTaskEnv(suite="builtin", config=config) for _ in range(2)]
    for env in envs:
        env.reset(seed=0)
        env.step(json.dumps({"name": "bash", "arguments": {"command": "echo hi > /tmp/x"}}))
    forks = envs[0].fork(2)
    print("ready", flush=True)
    if how == "exception":
        raise RuntimeError("the agent's code blew up")
    if how in ("sigterm", "sigint"):
        time.sleep(120)  # killed from the test meanwhile
''')


def leftovers(run_id: str) -> list[str]:
    """Containers, bubblewrap processes and cgroups of ``run_id`` still on this host."""
    found = []
    try:
        import docker
        client = docker.from_env()
        found += [f"container {c.name}" for c in client.containers.list(all=True,
                                                                        filters={"label": f"repogym.run={run_id}"})]
    except Exception:
        pass
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline, cgroup = Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        if run_id in cgroup or (run_id.encode() in cmdline and b"bwrap" in cmdline):
            found.append(f"process {pid}")
    cgroups = Path("/sys/fs/cgroup")
    if cgroups.is_dir():
        found += [f"cgroup {p.name}" for p in cgroups.glob(f"repogym-{run_id}*")]
    return found


def bwrap_children(pid: int) -> list[int]:
    """bubblewrap processes whose parent is ``pid`` (local sandboxes, wherever no cgroup names their run)."""
    found = []
    for other in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{other}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("Name", "").strip() == "bwrap" and fields.get("PPid", "").strip() == str(pid):
            found.append(int(other))
    return found


def run_child(backend: str, how: str) -> tuple[str, subprocess.CompletedProcess | subprocess.Popen]:
    run_id = f"exit-{how}-{uuid.uuid4().hex[:6]}"
    args = [sys.executable, "-c", CHILD, backend, run_id, how]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if how in ("sigterm", "sigint"):
        # SIGINT back to its default in the child: a parent that ignores it (an xdist worker does) would pass the
        # ignoring on, and Python would then never raise KeyboardInterrupt: the child would sleep its 120 s out.
        child = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        line = child.stdout.readline()
        assert line.strip() == "ready", child.stderr.read()
        assert leftovers(run_id) or bwrap_children(child.pid), "the child should hold sandboxes now"
        child.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
        child.wait(timeout=300)  # a loaded machine starts (and removes) containers slowly
        return run_id, child
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return run_id, done


@pytest.mark.slow
@pytest.mark.parametrize("how", ["normal", "exception", "sigterm", "sigint"])
def test_every_sandbox_of_a_process_is_gone_when_it_ends(backend, how):
    require_backend(backend)
    run_id, child = run_child(backend, how)
    stderr = child.stderr if isinstance(child.stderr, str) else child.stderr.read()
    if how == "exception":
        assert child.returncode == 1 and "the agent's code blew up" in stderr
    elif how == "sigterm":
        assert child.returncode == 128 + signal.SIGTERM, stderr
    elif how == "sigint":  # Ctrl-C ended it (not the end of its sleep)
        assert child.returncode != 0 and "KeyboardInterrupt" in stderr, (child.returncode, stderr[-2000:])
    elif how == "normal":
        assert child.returncode == 0, stderr
    deadline = time.monotonic() + 10  # the kernel reaps a dead bubblewrap a moment after its parent exits
    while leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(run_id) == []


@pytest.mark.slow
def test_a_bench_whose_sandboxes_were_killed_at_random_leaves_nothing(backend):
    require_backend(backend)
    run_id, done = run_child(backend, "kills")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kills 0" not in done.stderr  # sandboxes really died mid-run
    assert leftovers(run_id) == []


@pytest.mark.ray
@pytest.mark.docker
@pytest.mark.slow
def test_a_killed_ray_workers_sandboxes_are_reaped_by_the_driver_and_close_leaves_nothing(tiny_task):
    import ray

    from repogym.envs.repo_env import EnvConfig
    from repogym.envs.sandbox import SandboxConfig
    from repogym.envs.sandbox.owner import owner_alive
    from repogym.trainer.fleet import EpisodeRequest, RayFleet, WorkerSpec

    require_backend("docker")
    run_id = f"ray-{uuid.uuid4().hex[:6]}"
    spec = WorkerSpec(tasks=[tiny_task], agent="null",
                      env=EnvConfig(sandbox="docker", sandbox_config=SandboxConfig(run_id=run_id), max_turns=2))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        fleet = RayFleet(spec, workers=2, worker_cpus=0.5)
        fleet.submit([EpisodeRequest(tiny_task.instance_id, seed) for seed in range(2)])
        done = []
        while len(done) < 2:
            done += fleet.wait(timeout=300)
        owners = ray.get([worker.owner.remote() for worker in fleet.workers])
        import docker
        client = docker.from_env()

        def of(owner):
            return client.containers.list(all=True, filters={"label": [f"repogym.run={run_id}",
                                                                         f"repogym.owner={owner}"]})
        assert of(owners[0]) and of(owners[1])  # each worker holds its env's sandbox (and a grading pool)
        ray.kill(fleet.workers[0])  # SIGKILL: the worker runs no clean-up of its own
        deadline = time.monotonic() + 30
        while owner_alive(owners[0], 1e9) and time.monotonic() < deadline:
            time.sleep(0.2)
        fleet._replace(0)  # what the driver does when it sees the worker dead
        assert of(owners[0]) == [] and of(owners[1])  # the dead worker's sandboxes went; the live one's stay
        fleet.close()
        assert leftovers(run_id) == []
    finally:
        ray.shutdown()


def test_closing_while_the_interpreter_shuts_its_executors_down_does_not_raise(monkeypatch):
    """A worker thread that closes its env as the process exits (bench's, after the main thread returned) finds the
    closing thread's executor shut down: what it hands over is closed on the spot, and the wait returns."""
    from concurrent.futures import ThreadPoolExecutor

    from repogym.envs.sandbox import cleanup

    stopped = ThreadPoolExecutor(max_workers=1)
    stopped.shutdown()
    monkeypatch.setitem(cleanup._state, "closer", stopped)

    class Box:
        closed = 0

        def close(self, **kwargs):
            self.closed += 1

    box = Box()
    cleanup.close_later(box)
    assert box.closed == 1
    cleanup.wait_closed(timeout=1)


def test_a_container_already_being_removed_at_exit_is_no_warning(monkeypatch, caplog):
    import docker.errors
    import requests

    from repogym.envs.sandbox import cleanup, docker_client

    def refusal(status: int, text: str) -> docker.errors.APIError:
        response = requests.Response()
        response.status_code = status
        return docker.errors.APIError("refused", response=response, explanation=text)

    class Container:
        def __init__(self, name, error):
            self.name, self.error = name, error

        def remove(self, force):
            raise self.error

    going = Container("going", refusal(409, "removal of container going is already in progress"))
    stuck = Container("stuck", refusal(500, "driver failed"))

    class Client:
        class containers:
            @staticmethod
            def list(**kwargs):
                return [going, stuck]

    monkeypatch.setattr(docker_client, "docker_client", lambda: Client())
    with caplog.at_level("WARNING", logger=cleanup.log.name):
        cleanup._sweep_containers()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "stuck" in warned[0] and "driver failed" in warned[0], warned
