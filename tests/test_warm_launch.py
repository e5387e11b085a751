"""The launcher's warm inner process (``inside/repogym_launch.py``, ``--serve``), run as the sandbox runs it, on this
machine: pytest imported ahead serves exactly one run, that run is the run a fresh inner process would have made,
and what the tests can do to it (kill it, reach its socket again) fails closed.

Red team first: each attack is code the tests run (the agent's, in a grading), and must end in a frame the host
does not trust or in a run no different from one without the warm process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from repogym.envs.sandbox.testrun import WARM_ENV, _read_stream

INSIDE = Path(__file__).resolve().parents[1] / "envs" / "sandbox" / "inside"

# The tests of the tiny repository: the parent's command line tells a warm run from a fresh one.
TESTS = '''
import os


def parent():
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
        return fh.read().replace(b"\\0", b" ").decode()


def test_passes():
    with open("parent.txt", "w") as fh:
        fh.write(parent())


def test_fails():
    assert 1 == 2
'''

KILL_PARENT = '''
import os
import signal


def test_kills_its_parent():
    os.kill(os.getppid(), signal.SIGKILL)
'''

# Every abstract unix socket of this network namespace, tried: the warm process's must take no second run.
KNOCK = '''
import socket


def test_knocks():
    names = [line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:]
             if line.split()[-1].startswith("@repogymtest")]
    reached = []
    for name in names:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect("\\0" + name[1:])
            reached.append(name)
        except OSError:
            pass
    with open("knocked.txt", "w") as fh:
        fh.write(f"{len(names)} {len(reached)}")
'''


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_a.py").write_text(TESTS)
    return root


def stage(tmp_path: Path, files: dict[str, str], key: str = "") -> Path:
    folder = tmp_path / f"stage-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    for name, source in files.items():
        shutil.copy(INSIDE / source, folder / name)
    if key:
        (folder / "key").write_text(key)
    return folder


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    prefix = tmp_path / "bytecode"
    prefix.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "REPOGYM", "PYTHON"))}
    return {**env, "REPOGYM_BYTECODE": str(prefix), **extra}


def serve(repo: Path, tmp_path: Path, name: str, **extra: str) -> subprocess.CompletedProcess:
    folder = stage(tmp_path, {"launch_s.py": "repogym_launch.py"})
    return subprocess.run([sys.executable, "-I", str(folder / "launch_s.py"), "--serve", name, "--module"],
                          cwd=repo, env=environment(tmp_path, **extra), capture_output=True, text=True, timeout=120)


def run(repo: Path, tmp_path: Path, files: list[str], warm: str = "", **extra: str):
    key = uuid.uuid4().hex
    folder = stage(tmp_path, {"launch_r.py": "repogym_launch.py", "repogym_report_r.py": "repogym_report.py"}, key)
    env = environment(tmp_path, **extra)
    if warm:
        env[WARM_ENV] = warm
    argv = [sys.executable, "-I", str(folder / "launch_r.py"), "--module", "-q", "-p", "no:cacheprovider",
            "-p", "repogym_report_r", *files]
    done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert not folder.exists()  # the launcher removed its folder
    return _read_stream(done.stdout, done.stderr, key)


def name() -> str:
    return "repogymtest" + uuid.uuid4().hex[:16]


def test_a_warm_run_is_the_run_a_fresh_interpreter_makes(repo, tmp_path):
    fresh = run(repo, tmp_path, ["tests/test_a.py"])
    assert "--warm" not in (repo / "parent.txt").read_text()
    warm = name()
    started = serve(repo, tmp_path, warm)
    assert started.returncode == 0, started.stderr
    served = run(repo, tmp_path, ["tests/test_a.py"], warm=warm)
    assert f"--warm {warm}" in (repo / "parent.txt").read_text()  # the warm process forked this run
    assert served.warm and not fresh.warm  # and the frame says so
    assert served.outcomes == fresh.outcomes == {"tests/test_a.py::test_passes": "passed",
                                                 "tests/test_a.py::test_fails": "failed"}
    assert served.exit_status == fresh.exit_status == 1 and served.finish_status == 1
    assert served.summary.startswith("1 failed, 1 passed") and not served.problems


def test_the_warm_process_serves_one_run_and_then_none(repo, tmp_path):
    warm = name()
    assert serve(repo, tmp_path, warm).returncode == 0
    run(repo, tmp_path, ["tests/test_a.py"], warm=warm)
    again = run(repo, tmp_path, ["tests/test_a.py"], warm=warm)  # nobody listens: a fresh inner process
    assert "--warm" not in (repo / "parent.txt").read_text() and not again.warm
    assert again.exit_status == 1 and again.outcomes["tests/test_a.py::test_passes"] == "passed"


def test_a_run_in_another_environment_is_refused_and_runs_fresh(repo, tmp_path):
    warm = name()
    assert serve(repo, tmp_path, warm).returncode == 0
    other = run(repo, tmp_path, ["tests/test_a.py"], warm=warm, PYTHONHASHSEED="7")
    assert "--warm" not in (repo / "parent.txt").read_text()
    assert other.exit_status == 1 and other.outcomes["tests/test_a.py::test_passes"] == "passed"


def test_tests_that_kill_the_warm_process_leave_no_frame_the_host_trusts(repo, tmp_path):
    (repo / "tests" / "test_kill.py").write_text(KILL_PARENT)
    warm = name()
    assert serve(repo, tmp_path, warm).returncode == 0
    killed = run(repo, tmp_path, ["tests/test_a.py", "tests/test_kill.py"], warm=warm)
    # The run's real status died with the warm process: no frame, no outcomes, whatever the stream said.
    assert killed.outcomes == {} and killed.exit_status is None
    assert any("no frame" in p for p in killed.problems), killed.problems


def test_tests_cannot_reach_the_warm_process_again(repo, tmp_path):
    (repo / "tests" / "test_knock.py").write_text(KNOCK)
    warm = name()
    assert serve(repo, tmp_path, warm).returncode == 0
    with open("/proc/net/unix") as fh:
        assert f"@{warm}" in fh.read()  # listening, before the run
    knocked = run(repo, tmp_path, ["tests/test_knock.py"], warm=warm)
    assert knocked.outcomes == {"tests/test_knock.py::test_knocks": "passed"}
    found, reached = (repo / "knocked.txt").read_text().split()
    assert int(found) >= 1 and int(reached) == 0  # its name is still listed (the run's connection), and dead


def test_a_warm_process_that_takes_the_pipes_and_never_answers_gets_no_second_run(repo, tmp_path):
    # Once the pipes went over the run may be under way (the tests can kill the warm process before it says so):
    # the launcher never starts a second run on the same pipes, and the run's status is unknown, so the host
    # trusts no frame.
    import socket
    import threading

    warm = name()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + warm)
    listener.listen(1)

    def take_and_vanish():
        conn, _ = listener.accept()
        _, fds, _, _ = socket.recv_fds(conn, 8, 2)
        for fd in fds:
            os.close(fd)
        conn.close()

    thread = threading.Thread(target=take_and_vanish)
    thread.start()
    silent = run(repo, tmp_path, ["tests/test_a.py"], warm=warm)
    thread.join(10)
    listener.close()
    assert not (repo / "parent.txt").exists()  # no run was made behind it
    assert silent.outcomes == {} and silent.exit_status is None
    assert any("no frame" in p for p in silent.problems), silent.problems
