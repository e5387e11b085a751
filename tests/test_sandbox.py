"""Both sandbox backends: commands, timeouts, limits, confinement, reset, diff, what the agent cannot see."""

import io
import tarfile
import time

import pytest

from repogym.envs.core.errors import SandboxError
from repogym.envs.sandbox import Sandbox, SandboxConfig, SandboxRequestError, make_sandbox
from repogym.envs.sandbox.snapshot import RepoSnapshot
from repogym.envs.tasks.repos import snapshot


def running(box, pattern: str) -> int:
    """How many processes in the sandbox have a command line matching ``pattern`` (a regex)."""
    script = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
    lines = box.run(script).stdout.splitlines()
    import re
    return sum(bool(re.search(pattern, line)) for line in lines if "/proc/" not in line)


def tar_of(files: dict[str, bytes]) -> RepoSnapshot:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return RepoSnapshot(key="test", tar=buf.getvalue())


@pytest.fixture
def sandbox(backend):
    box = make_sandbox(backend, SandboxConfig(run_id="pytest"))
    box.load(tar_of({"a.py": b"x = 1\n", "pkg/b.txt": b"hello\n"}))
    yield box
    box.close()


def _protocol_members() -> set[str]:
    return set(Sandbox.__annotations__) | {n for n, v in vars(Sandbox).items() if callable(v) and not n.startswith("_")}


def test_a_backend_has_every_member_the_protocol_declares(sandbox):
    # What the env, grading and the tools use of a sandbox is declared on the protocol (nothing is probed).
    assert {"repo_dir", "inside_dir", "snapshot_key", "base_tree", "dirty_reason", "load", "run", "read_file",
            "write_file", "reset", "diff", "tree_id", "export_state", "import_state", "staging_folder",
            "close"} <= _protocol_members()
    assert isinstance(sandbox, Sandbox)
    missing = [name for name in _protocol_members() if not hasattr(sandbox, name)]
    assert not missing, missing
    assert sandbox.snapshot_key == "test" and sandbox.dirty_reason is None
    assert sandbox.base_tree == sandbox.tree_id()
    sandbox.write_file("a.py", b"x = 2\n")
    assert sandbox.tree_id() != sandbox.base_tree
    assert sandbox.run(f"test -f {sandbox.inside_dir}/runner.py").ok
    folder = sandbox.staging_folder("0123abcd")
    assert folder is None or sandbox.run(f"test -d {folder}").ok


def test_a_staging_folder_comes_filled_with_the_harness_files_and_a_key_only_the_agent_reads(sandbox):
    """The runner stages a test run itself (no command): the harness files copied from beside it, the key mode 0600
    and the agent's, nothing else; a name that is not a plain file name stages nothing."""
    folder = sandbox.staging_folder("0123abcd", {"launch_x.py": "repogym_launch.py", "rep.py": "repogym_report.py"},
                                    key="k3y")
    if sandbox.backend == "local":  # the agent's uid is the runner's: no place out of its reach (tests stage in /tmp)
        assert folder is None
        return
    listed = sandbox.run(f"cd {folder} && stat -c '%n %a %u' * && cat key && cmp launch_x.py "
                         f"{sandbox.inside_dir}/repogym_launch.py && cmp rep.py {sandbox.inside_dir}/repogym_report.py")
    assert listed.ok, listed.stderr
    assert listed.stdout.splitlines() == ["key 600 1000", "launch_x.py 600 1000", "rep.py 600 1000", "k3y"]
    assert not sandbox.run(f"touch {folder.rsplit('/', 1)[0]}/planted").ok  # its parent is root's
    assert sandbox.staging_folder("0123abce", {"../escape.py": "repogym_launch.py"}, key="k3y") is None
    assert not sandbox.run("ls /run/escape.py /run/repogym/escape.py").ok


def test_a_sandboxs_cpu_weight_reaches_its_backend(backend):
    """``cpu_shares``: docker's container setting; the local backend's cgroup (``cpu.shares``, or ``cpu.weight`` scaled
    from 1024 to 100 under cgroup v2)."""
    box = make_sandbox(backend, SandboxConfig(run_id="pytest-shares", cpu_shares=256))
    try:
        if backend == "docker":
            assert box.container.attrs["HostConfig"]["CpuShares"] == 256
            return
        if box.cgroup is None:
            pytest.skip(f"no cgroup for the local sandbox here: {box.limits}")
        written = {}
        for folder in box.cgroup.dirs:
            for name in ("cpu.shares", "cpu.weight"):
                if (folder / name).exists():
                    written[name] = (folder / name).read_text().strip()
        assert written in ({"cpu.shares": "256"}, {"cpu.weight": "25"}), written
    finally:
        box.close()


def test_run_returns_output_exit_code_and_duration(sandbox):
    result = sandbox.run("cat pkg/b.txt; echo oops >&2; exit 3")
    assert result.stdout == "hello\n" and result.stderr == "oops\n"
    assert result.exit_code == 3 and not result.timed_out and result.duration_s > 0
    assert sandbox.run("pwd").stdout.strip() == "/repo"
    assert sandbox.run("pwd", cwd="pkg").stdout.strip() == "/repo/pkg"


def test_a_command_asked_for_the_tree_tells_what_tree_id_would_in_the_same_round_trip(sandbox):
    assert sandbox.run("true").tree is None  # only when asked
    unchanged = sandbox.run("cat a.py", tree=True)
    assert unchanged.stdout == "x = 1\n" and unchanged.tree == sandbox.base_tree
    edited = sandbox.run("echo y >> a.py && echo new > c.txt", tree=True)
    assert edited.ok and edited.tree == sandbox.tree_id() != sandbox.base_tree
    # A .git the command broke: the runner puts back what it needs, as for tree_id, and the answer still stands.
    broken = sandbox.run("rm -rf .git && echo gone", tree=True)
    assert broken.stdout == "gone\n" and broken.tree == sandbox.tree_id() == edited.tree
    # A write, likewise (the file tools' round trip); only when asked.
    assert sandbox.write_file("d.txt", b"d\n") is None
    written = sandbox.write_file("d.txt", b"dd\n", tree=True)
    assert written == sandbox.tree_id() not in (edited.tree, sandbox.base_tree)
    sandbox.run("rm -rf .git")
    assert sandbox.write_file("d.txt", b"d\n", tree=True) == sandbox.tree_id()


def test_the_tree_id_stands_for_the_content_whatever_happens_to_gits_object_store(sandbox):
    """The tree id is reused while nothing changed and its look leaves the index and the object store out (the
    runner's own git writes them): emptied or filled, they move neither a cached id nor a computed one."""
    assert sandbox.run("echo y >> a.py").ok
    edited = sandbox.tree_id()
    time.sleep(0.2)  # settled: the next look may reuse it
    assert sandbox.tree_id() == edited
    emptied = sandbox.run("find .git/objects -type f -delete && echo junk > .git/objects/junk", tree=True)
    assert emptied.ok and emptied.tree == edited == sandbox.tree_id()
    assert "+y" in sandbox.diff()  # the diff's own git puts the base back
    assert sandbox.run("echo z >> a.py").ok
    assert sandbox.tree_id() not in (edited, sandbox.base_tree)


@pytest.mark.slow  # 4-6 s: the files staged must outlast the slack on an idle machine
def test_a_slow_tree_id_after_a_command_is_not_taken_for_a_hung_runner(backend):
    # The answer may come later than the command's timeout and the slack: the runner says when the command is done,
    # and the tree id (here: staging 120,000 new files, well over the 0.7 s on an idle machine) gets what a tree_id
    # request gets from then on.
    box = make_sandbox(backend, SandboxConfig(run_id="pytest", answer_slack=0.2))
    try:
        box.load(tar_of({"a.py": b"x = 1\n"}))
        assert box.run("mkdir many && cd many && seq 1 120000 | xargs touch", timeout=120).ok
        start = time.monotonic()
        result = box.run("true", timeout=0.5, tree=True)
        assert time.monotonic() - start > 0.7, "the tree id came too fast to show anything"
        assert result.ok and result.tree == box.tree_id() != box.base_tree and box.dirty_reason is None
    finally:
        box.close()


def test_timeout_kills_the_whole_process_group(sandbox):
    start = time.monotonic()
    result = sandbox.run("(sleep 30; touch /repo/late) & sleep 30", timeout=1)
    assert result.timed_out and result.exit_code == -9
    assert time.monotonic() - start < 10
    time.sleep(0.2)
    assert running(sandbox, r"sleep 30\b") == 0
    assert sandbox.run("test -e late").exit_code == 1


def test_background_children_do_not_hang_the_command(sandbox):
    start = time.monotonic()
    result = sandbox.run("sleep 20 & echo started", timeout=30)
    assert result.stdout == "started\n" and time.monotonic() - start < 5


def test_output_limit_and_binary_output(sandbox):
    big = sandbox.run("yes | head -c 1000000", output_limit=1000)
    assert big.truncated and len(big.stdout) == 1000
    binary = sandbox.run("head -c 5000 /dev/zero")
    assert binary.stdout.startswith("[binary output: 5000 bytes")


def test_files_are_confined_to_the_repository(sandbox):
    sandbox.write_file("new/dir/c.py", b"y = 2\n")
    assert sandbox.read_file("new/dir/c.py") == b"y = 2\n"
    for bad in ("../etc/passwd", "/etc/passwd"):
        with pytest.raises(SandboxRequestError, match="outside"):
            sandbox.read_file(bad)
        with pytest.raises(SandboxRequestError, match="outside"):
            sandbox.write_file(bad, b"x")
    sandbox.run("ln -s /etc/passwd link")
    with pytest.raises(SandboxRequestError, match="outside"):
        sandbox.read_file("link")
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("missing.py")


def test_reset_restores_the_base_and_kills_strays(sandbox):
    sandbox.run("nohup setsid sleep 300 >/dev/null 2>&1 & sleep 0.5")
    # docker: an escaped background process lives until reset; local: each command has its own PID
    # namespace, so it ends with the command.
    assert running(sandbox, r"sleep 300") == (1 if sandbox.backend == "docker" else 0)
    sandbox.run("echo changed > a.py; echo new > new.py; rm pkg/b.txt; echo t > /tmp/scratch; "
                "git commit -qam 'agent commit' --allow-empty; (sleep 300 &)")
    assert sandbox.diff()
    sandbox.reset()
    assert sandbox.read_file("a.py") == b"x = 1\n" and sandbox.read_file("pkg/b.txt") == b"hello\n"
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("new.py")
    assert "scratch" not in sandbox.run("ls /tmp").stdout
    assert sandbox.diff() == ""
    assert running(sandbox, r"sleep 300") == 0
    assert sandbox.dirty_reason is None


def test_diff_includes_new_files(sandbox):
    sandbox.write_file("a.py", b"x = 2\n")
    sandbox.write_file("fresh.py", b"z = 3\n")
    diff = sandbox.diff()
    assert "+x = 2" in diff and "new file mode" in diff and "fresh.py" in diff


def test_no_network(sandbox):
    result = sandbox.run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\"")
    assert result.exit_code != 0


def test_agent_sees_one_commit_and_no_hidden_tests(backend, tiny_task):
    box = make_sandbox(backend, SandboxConfig(run_id="pytest",
                                              hidden_paths=(tiny_task.setup["source"][5:],)))
    try:
        box.load(snapshot(tiny_task))
        assert box.run("git log --oneline | wc -l").stdout.strip() == "1"
        assert box.run("git rev-list --all | wc -l").stdout.strip() == "1"
        assert box.run("ls tests").stdout.split() == ["test_ops.py"]
        found = box.run("find / -path /proc -prune -o -path /sys -prune -o -path /usr -prune -o "
                        "-name test_hidden.py -print 2>/dev/null", timeout=120)
        assert found.stdout == ""
        assert box.run("grep -rl test_clamp_above /tmp /home /repo /opt 2>/dev/null").stdout == ""
        assert box.run(f"ls {tiny_task.setup['source'][5:]}/.git 2>&1").exit_code != 0
    finally:
        box.close()


def kill_runner_from_outside(box) -> None:
    """What a crashed host or daemon looks like: the container killed, or bubblewrap killed by the host."""
    if box.backend == "docker":
        box.container.kill()
    else:
        box._proc.kill()


def test_a_runner_killed_from_outside_is_an_infra_error(sandbox):
    kill_runner_from_outside(sandbox)
    # The request may meet the dead runner on its write (a broken pipe) or on its read (the stream ended): either
    # way an infrastructure error that blames the outside.
    with pytest.raises(SandboxError, match="exited|killed from outside"):
        sandbox.run("true")
    assert sandbox.dirty_reason
    with pytest.raises(SandboxError):
        sandbox.run("true")


def test_the_agent_cannot_signal_the_runner(sandbox):
    for attack in ("kill -9 $PPID", "kill -9 -1", "pkill -9 -f runner.py", "kill -STOP $PPID"):
        sandbox.run(attack + "; true", timeout=10)
        assert sandbox.run("echo alive", timeout=10).stdout == "alive\n", attack


def test_test_runs_read_warm_bytecode_that_nothing_in_the_sandbox_can_write(backend):
    from repogym.envs.sandbox import bytecode
    make_sandbox(backend, SandboxConfig(run_id="pytest")).close()  # the first start fills it in the background
    bytecode.wait()
    box = make_sandbox(backend, SandboxConfig(run_id="pytest"))
    try:
        prefix = box.bytecode_prefix
        assert prefix, "a sandbox started after the fill has the warm prefix"
        # Warm: pytest's own modules are there, compiled for the interpreter the tests use...
        found = box.run(f"python -c \"import importlib.util as u, sys, _pytest.main as m; sys.pycache_prefix = '{prefix}';"
                        f" import os; print(os.path.isfile(u.cache_from_source(m.__file__)))\"")
        assert found.stdout.strip() == "True", found.stdout + found.stderr
        # ...and read by a run: a module of pytest's comes from there, not from source.
        verbose = box.run(f"PYTHONPYCACHEPREFIX={prefix} python -v -c 'import _pytest.main' 2>&1 | grep -c 'code object from .{prefix}'")
        assert int(verbose.stdout.strip() or 0) > 10
        # Nothing of the repository's is in it, and nothing the agent runs can put anything there.
        assert box.run(f"find {prefix} -path '*{box.repo_dir}/*' | head -1").stdout.strip() == ""
        for attack in (f"touch {prefix}/x", f"mkdir -p {prefix}{box.repo_dir}/pkg",
                       f"cp /dev/null {prefix}/usr/x.pyc", f"chmod 777 {prefix}"):
            assert not box.run(attack).ok, attack
    finally:
        box.close()
