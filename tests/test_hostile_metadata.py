"""A hostile agent using what a reset did not put back: file metadata as a channel between episodes of one
sandbox (both backends), and the local backend's limits where no cgroup can be made.

Metadata: an episode sets modes, extended attributes, an ACL and timestamps on files and folders, replaces a
file with a link or a folder, makes folders; after ``reset`` (and after ``load``, a switch to another task and
back) every path of the tree must read back exactly as the base's, so the next episode learns nothing.
"""

import json
import os
import re
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.sandbox import SandboxConfig

LIMITS = SandboxConfig(run_id="pytest-hostile-metadata", pids=96, memory="768m")


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def bash(env, command, timeout=None):
    args = {"command": command} if timeout is None else {"command": command, "timeout": timeout}
    obs, reward, term, trunc, info = env.step(call("bash", **args))
    assert isinstance(obs, str) and "infra_error" not in info, obs
    return obs, info


# Every path of the tree but .git (put back whole from load's copy) with all it shows: type, mode, owner,
# times, size, link target, extended attributes (ACLs among them). Only lstat and listxattr: nothing that
# would itself change an access time.
SNAPSHOT = r'''
import json, os, stat
def entry(path):
    st = os.lstat(path)
    try:
        xattrs = sorted(os.listxattr(path, follow_symlinks=False))
    except OSError:
        xattrs = ["?"]
    return [stat.filemode(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, st.st_atime_ns,
            st.st_size if stat.S_ISREG(st.st_mode) else 0,
            os.readlink(path) if stat.S_ISLNK(st.st_mode) else "", xattrs]
out = {".": entry(".")}
for top, dirs, files in os.walk("."):
    dirs[:] = sorted(d for d in dirs if not (top == "." and d == ".git"))
    for name in dirs + sorted(files):
        out[os.path.join(top, name)[2:]] = entry(os.path.join(top, name))
print("SNAPSHOT" + json.dumps(out, sort_keys=True))
'''


def snapshot(env):
    obs, _ = bash(env, f"python3 -c {_quote(SNAPSHOT)}")
    match = re.search(r"SNAPSHOT(\{.*\})", obs)
    assert match, obs
    return json.loads(match.group(1))


def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def _acl(uid):
    """A ``system.posix_acl_access`` value granting ``uid`` read (the kernel's binary ACL format, version 2)."""
    undefined = 0xFFFFFFFF
    entries = [(0x01, 6, undefined), (0x02, 4, uid), (0x04, 4, undefined), (0x10, 4, undefined), (0x20, 4, undefined)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


# Each line one attack, run separately so one refused (no ACLs on this file system) does not stop the rest;
# each says "did <name>" when it took.
ATTACKS = {
    "file mode": "chmod 600 calc/ops.py",
    "file mtime": "touch -d '2011-11-11 11:11:11' calc/ops.py",
    "file atime": "touch -a -d '2012-12-12 12:12:12' tests/test_ops.py",
    "file xattr": "python3 -c \"import os; os.setxattr('calc/ops.py', 'user.x', b'episode-1')\"",
    "folder xattr": "python3 -c \"import os; os.setxattr('calc', 'user.x', b'episode-1')\"",
    "root xattr": "python3 -c \"import os; os.setxattr('.', 'user.x', b'episode-1')\"",
    "file acl": f"python3 -c \"import os; os.setxattr('pyproject.toml', 'system.posix_acl_access', {_acl(0)!r})\"",
    "folder mode": "chmod 700 calc && chmod 1777 tests",
    "root mode": "chmod 711 .",
    "folder mtime": "touch -d '2011-11-11 11:11:11' tests",
    "file read": "cat calc/__init__.py tests/test_ops.py > /dev/null && ls -R > /dev/null",
    "file becomes a link": "rm calc/__init__.py && ln -s ops.py calc/__init__.py",
    "file becomes a folder": "rm pyproject.toml.bak 2>/dev/null; mv pyproject.toml /tmp/p && mkdir pyproject.toml "
                             "&& chmod 700 pyproject.toml && touch pyproject.toml/x",
    "new folders": "mkdir -p made/deep && chmod 700 made && python3 -c \"import os; os.setxattr('made', 'user.x', b'1')\"",
}


def attack(env):
    """Run every attack; the names of those that took."""
    script = "; ".join(f"({command}) >/dev/null 2>&1 && echo 'did {name}'" for name, command in ATTACKS.items())
    obs, _ = bash(env, script)
    took = set(re.findall(r"did (.+)", obs))
    assert {"file mode", "file mtime", "folder mode", "file becomes a link", "new folders"} <= took, obs
    return took


def assert_same_tree(before, after):
    changed = {path: (before.get(path), after.get(path)) for path in set(before) | set(after)
               if before.get(path) != after.get(path)}
    assert not changed, "\n".join(f"{p}: base {b} / now {a}" for p, (b, a) in sorted(changed.items()))


@pytest.fixture
def env(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=200,
                              config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0))
    yield environment
    environment.close()


def test_reset_puts_back_every_mode_xattr_acl_and_timestamp(env):
    env.reset()
    base = snapshot(env)
    for _ in range(2):
        took = attack(env)
        assert snapshot(env) != base, took  # the attacks did show within the episode
        env.reset()
        assert_same_tree(base, snapshot(env))
    # Deterministic: one modification time for the whole tree, nothing that shows when it was loaded.
    assert len({entry[3] for entry in base.values()}) == 1, base


def test_load_of_another_task_and_back_puts_back_the_base_metadata(backend, tiny_task):
    other = replace(tiny_task, instance_id="tiny__calc-other", base_commit=tiny_task.base_commit + "~1")
    env = RepoTaskEnv(tasks=[tiny_task, other], sandbox=backend, max_turns=200,
                      config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0))
    try:
        env.reset(options={"task_id": tiny_task.instance_id})
        base = snapshot(env)
        attack(env)
        env.reset(options={"task_id": other.instance_id})
        attack(env)
        env.reset(options={"task_id": tiny_task.instance_id})
        assert_same_tree(base, snapshot(env))
    finally:
        env.close()


def test_a_reset_that_must_rebuild_everything_still_puts_back_the_metadata(env):
    """``chmod 000`` on folders makes the runner's git fail: reset starts from an empty folder instead."""
    env.reset()
    base = snapshot(env)
    bash(env, "python3 -c \"import os; os.setxattr('calc/ops.py', 'user.x', b'1')\"; chmod 600 calc/ops.py; "
              "chmod 000 calc tests .")
    env.reset()
    assert_same_tree(base, snapshot(env))


# -- the local backend without a cgroup: rlimits --------------------------------------------------------------

def _limits(text):
    """``/proc/self/limits`` as {name: (soft, hard)}."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"(Max [a-z ]+?)\s{2,}(\S+)\s+(\S+)", line)
        if match:
            found[match.group(1)] = (match.group(2), match.group(3))
    return found


@pytest.fixture
def uncgrouped(monkeypatch, tiny_task):
    """A local env whose sandbox could make no cgroup (as for a user who is not root)."""
    from repogym.envs.sandbox import local
    from tests.conftest import require_backend

    require_backend("local")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied (test: no cgroup)")

    monkeypatch.setattr(local, "Cgroup", refuse)
    environment = RepoTaskEnv(task=tiny_task, sandbox="local", max_turns=60,
                              config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0))
    environment.reset()
    yield environment
    environment.close()


def test_without_a_cgroup_the_local_sandbox_has_rlimits_and_says_so(uncgrouped):
    box = uncgrouped._sandbox
    assert box.cgroup is None
    assert box.limits["via"] == "rlimit", box.limits
    nproc = box.limits["nproc"]
    assert LIMITS.pids < nproc <= LIMITS.pids + 100_000
    obs, _ = bash(uncgrouped, "cat /proc/self/limits")
    limits = _limits(obs)
    assert limits["Max processes"] == (str(nproc), str(nproc)), obs
    assert limits["Max address space"] == (str(768 << 20),) * 2, obs
    assert limits["Max file size"] == (str(1 << 30),) * 2, obs
    assert int(limits["Max open files"][1]) <= 4096, obs


def test_without_a_cgroup_a_memory_hog_gets_memory_error_and_a_fork_bomb_stops(uncgrouped):
    obs, info = bash(uncgrouped, "python3 -c 'b = []\nwhile True: b.append(bytearray(64 << 20))'", timeout=60)
    assert "MemoryError" in obs and info["exit_code"] != 0, obs
    obs, info = bash(uncgrouped, "python3 -c 'import os, time\nn = 0\ntry:\n    while n < 100000:\n"
                                 "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
                                 "        n += 1\nexcept OSError as e:\n    print(\"stopped at\", n, e)'", timeout=30)
    # Stopped by the limit: the uid's count at the start plus the sandbox's pids (other sandboxes of the same
    # uid, run beside this test, share the count, so only the absolute bound is certain).
    assert "stopped at" in obs and int(obs.split()[2]) < uncgrouped._sandbox.limits["nproc"], obs
    obs, _ = bash(uncgrouped, "echo alive")
    assert obs.splitlines()[0] == "alive"


LAUNCHER = Path(__file__).resolve().parents[1] / "envs" / "sandbox" / "local_launch.py"
UNUSED_UID = 61_234  # no process runs as this uid but the test's own


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another, unprivileged user")
def test_the_launcher_run_by_a_user_who_is_not_root_sets_nproc_to_that_users_count_plus_the_limit():
    """The launcher itself (stdlib only) as a user who runs nothing else, the case of repogym run by a normal
    user: its RLIMIT_NPROC counts every task of that user, so it is their number now (the launcher itself) plus
    the sandbox's own limit, and a fork loop stops there."""
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    spec = json.dumps({"rlimits": {"pids": 20, "memory": 256 << 20, "file_size": 1 << 20, "open_files": 256}})
    probe = ("import os, time\nprint(open('/proc/self/limits').read())\nn = 0\ntry:\n    while n < 1000:\n"
             "        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n        n += 1\n"
             "except OSError as e:\n    print('stopped at', n)\n")
    done = subprocess.run(["setpriv", "--reuid", str(UNUSED_UID), "--regid", str(UNUSED_UID), "--clear-groups", python, "-I",
                           str(LAUNCHER), spec, "--", python, "-I", "-c", probe],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    limits = _limits(done.stdout)
    assert limits["Max address space"] == (str(256 << 20),) * 2
    assert limits["Max file size"] == (str(1 << 20),) * 2 and limits["Max open files"] == ("256", "256")
    assert limits["Max processes"] == ("21", "21"), done.stdout  # the launcher itself, then 20 more
    assert re.search(r"stopped at 20\b", done.stdout), done.stdout  # the probe (once the launcher) forks 20
