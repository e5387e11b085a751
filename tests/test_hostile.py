"""A hostile agent, through the env, on both backends: every attack is contained, the agent gets a clear
observation, other episodes carry on, and the next reset gives a clean sandbox.

Already covered elsewhere and not repeated here: hidden tests and the gold patch are never in the agent's
sandbox (tests/test_integrity.py, tests/test_sandbox.py); editing tests, conftest.py or pytest config earns
nothing (tests/test_integrity.py, tests/test_tamper.py); malformed calls (tests/test_fuzz.py).
"""

import json
import math
import os
import re
import threading
import time

import pytest

from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.sandbox import SandboxConfig
from repogym.envs.sandbox.local import LocalSandbox


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


LIMITS = SandboxConfig(run_id="pytest-hostile", pids=96, memory="768m")


@pytest.fixture
def env(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=60,
                              config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0))
    environment.reset()
    yield environment
    environment.close()


def bash(env, command, timeout=None):
    args = {"command": command} if timeout is None else {"command": command, "timeout": timeout}
    obs, reward, term, trunc, info = env.step(call("bash", **args))
    assert isinstance(obs, str) and obs and not math.isnan(reward) and "infra_error" not in info, obs
    return obs, info


def assert_healthy(env):
    """The episode goes on: the sandbox answers, and the repository is as the agent left it."""
    obs, _ = bash(env, "echo ok")
    assert obs.splitlines()[0] == "ok"  # (a full disk adds a note that git could not record the state)


def assert_clean_after_reset(env, tiny_task):
    env.reset()
    box = env._sandbox
    assert box.diff() == ""
    assert b"min(x, high - 1)" in box.read_file("calc/ops.py")  # the base's (broken) code
    assert bash(env, "ls /tmp | wc -l; git log --oneline | wc -l")[0].split() == ["0", "1"]


def require_limits(env):
    box = env._sandbox
    if isinstance(box, LocalSandbox) and box.cgroup is None:
        pytest.skip(f"no cgroup for the local sandbox here: {box.limits}")


@pytest.mark.slow
def test_fork_bomb_hits_the_process_limit_and_ends_with_its_timeout(env, tiny_task):
    require_limits(env)
    obs, info = bash(env, "python3 -c 'import os, time\nn = 0\ntry:\n    while n < 200:\n        if os.fork() == 0:\n"
                          "            time.sleep(30)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n"
                          "    print(\"stopped at\", n, e)'", timeout=20)
    assert "stopped at" in obs and int(obs.split()[2]) < LIMITS.pids  # the limit held
    obs, info = bash(env, ":(){ :|:& };:", timeout=5)
    # Ends by its timeout (docker), or at once (local: the command's PID namespace dies with it).
    assert info["duration_s"] < 15
    assert_healthy(env)
    assert_clean_after_reset(env, tiny_task)


def test_memory_hog_is_killed_and_the_sandbox_lives(env, tiny_task):
    require_limits(env)
    obs, info = bash(env, "python3 -c 'b = []\nwhile True: b.append(bytearray(64 << 20))'", timeout=60)
    assert info["exit_code"] != 0 and ("MemoryError" in obs or info["exit_code"] in (137, -9))
    assert_healthy(env)
    assert_clean_after_reset(env, tiny_task)


@pytest.mark.slow
def test_disk_filler_fills_the_sandbox_not_the_host(backend, tiny_task):
    # With the default memory limit (2g), the 1 GiB tmpfs of /repo fills first. (Filling every tmpfs of a
    # sandbox with less memory than that gets the sandbox killed: the agent's doing, reward 0.)
    env = RepoTaskEnv(task=tiny_task, sandbox=backend, config=EnvConfig(eval_pool_size=0))
    env.reset()
    try:
        _fill_disk(env)
    finally:
        env.close()


def _fill_disk(env):
    obs, info = bash(env, "head -c 3G /dev/zero > big.bin; echo rc=$?; du -m big.bin | cut -f1", timeout=120)
    assert "No space left on device" in obs and "rc=1" in obs
    assert int(re.search(r"rc=1\s+(\d+)", obs).group(1)) <= 1100  # stopped at the repository's 1 GiB tmpfs
    assert_healthy(env)
    env.reset()
    assert bash(env, "ls big.bin 2>&1")[0].startswith("ls: cannot access")


def test_an_endless_loop_and_endless_output_end_at_the_timeout(env):
    obs, info = bash(env, "while true; do :; done", timeout=2)
    assert info["error"] == "timeout" and "timed out after 2s" in obs
    obs, info = bash(env, "yes hostile", timeout=2)
    assert info["error"] == "timeout" and "characters truncated" in obs and len(obs) <= 20_000
    assert_healthy(env)


def test_rm_rf_root_wipes_only_the_agents_copy_and_reset_restores_it(env, tiny_task, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("host file")
    bash(env, "rm -rf --no-preserve-root / 2>/dev/null; echo done", timeout=120)
    assert canary.read_text() == "host file"  # the host is untouched
    obs, _ = bash(env, "ls /repo | wc -l; test -x /bin/bash && echo shell-ok")
    assert obs.split() == ["0", "shell-ok"]  # the repository is gone (its .git put back), the system is not
    env.reset()
    assert env._sandbox.diff() == "" and b"def clamp" in env._sandbox.read_file("calc/ops.py")
    assert bash(env, "git log --oneline | wc -l")[0].strip() == "1"


def test_killing_pid_1_and_every_process_leaves_the_runner(env, tiny_task):
    for attack in ("kill -9 1", "kill -9 -1", "kill -9 $PPID", "pkill -9 -f runner", "kill -STOP $PPID"):
        bash(env, attack + "; true", timeout=10)
        assert_healthy(env)
    assert_clean_after_reset(env, tiny_task)


def test_a_sandbox_killed_from_inside_ends_the_episode_with_0_not_an_exclusion(env, tiny_task):
    # Simulates what the hardening makes hard for the agent itself: the runner dies while the sandbox is up.
    box = env._sandbox
    if box.backend == "docker":
        pid = box.request("ping")["pid"]
        box.container.exec_run(["kill", "-9", str(pid)], user="root")  # root inside may signal the root runner
    else:
        init = int(open(f"/proc/{box._proc.pid}/task/{box._proc.pid}/children").read().split()[0])
        runner = int(open(f"/proc/{init}/task/{init}/children").read().split()[0])
        os.kill(runner, 9)  # the runner inside dies; bubblewrap itself exits on its own
    obs, reward, term, trunc, info = env.step(call("bash", command="echo hi"))
    assert term and not trunc and reward == 0.0 and not info.get("exclude")
    assert info["error"] == "sandbox_killed" and "killed" in obs
    assert info["eval"]["status"] == "unresolved" and info["eval"]["error"]["where"].startswith("sandbox.")
    assert "infra_error" not in info
    assert_clean_after_reset(env, tiny_task)  # a fresh sandbox replaces the dead one


def test_host_files_are_out_of_reach(env, tmp_path):
    canary = tmp_path / "secret.txt"
    canary.write_text("host secret")
    obs, _ = bash(env, f"cat {canary} 2>&1; cat /etc/shadow 2>&1 | head -c 200; ls /root 2>&1 | head -3")
    assert "host secret" not in obs and "root:" not in obs


def test_symlink_and_dotdot_escapes_are_refused(env, tmp_path):
    bash(env, "ln -s /etc/passwd link; ln -s / rootlink")
    for path in ("../etc/passwd", "/etc/passwd", "link", "rootlink/etc/hostname", "calc/../../etc/passwd"):
        obs, _, _, _, info = env.step(call("view", path=path))
        assert info["error"] in ("path_outside_repo", "not_found"), (path, obs)
        obs, _, _, _, info = env.step(call("create", path=path, content="pwned\n"))
        assert info["error"] == "path_outside_repo", (path, obs)
    assert bash(env, "grep -c pwned /etc/passwd; true")[0].strip() == "0"


def test_no_network(env):
    obs, _ = bash(env, "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\" 2>&1 "
                       "| tail -1; python3 -c \"import socket; socket.getaddrinfo('pypi.org', 443)\" 2>&1 | tail -1",
                  timeout=30)
    assert "unreachable" in obs.lower() or "Errno" in obs
    assert "gaierror" in obs or "Temporary failure" in obs or "Name or service" in obs


def test_writes_outside_the_repository_fail_or_vanish_at_reset(env, tiny_task):
    obs, _ = bash(env, "for d in /etc /usr /opt /bin /; do touch $d/hostile 2>/dev/null && echo wrote-$d; done; "
                       "touch /tmp/hostile ~/hostile && echo scratch-ok")
    assert "wrote-" not in obs and "scratch-ok" in obs
    env.reset()
    assert bash(env, "ls /tmp/hostile ~/hostile 2>&1 | grep -c 'No such file'")[0].strip() == "2"


def test_huge_and_binary_output_are_cut_and_marked(env):
    obs, _ = bash(env, "head -c 50000000 /dev/zero | tr '\\0' a")
    assert "characters truncated" in obs and len(obs) <= 20_000
    obs, _ = bash(env, "head -c 5000000 /dev/urandom")
    assert "binary output" in obs


@pytest.mark.slow
def test_non_utf8_paths_and_bytes_do_not_break_any_tool(env):
    bash(env, "mkdir $'d\\xff'; printf 'x = 1\\n' > $'bad\\xfe\\xff.py'; printf '\\xff\\xfe\\n' > latin.txt; "
              "ln -s $'bad\\xfe\\xff.py' $'link\\xff'")
    for action in (call("bash", command="ls"), call("view", path="."), call("search", pattern="x ="),
                   call("view", path="latin.txt"), call("diff"), call("inspect_diff")):
        obs, reward, term, trunc, info = env.step(action)
        obs.encode("utf-8")  # a valid string: trajectories and tokenizers can take it
        assert obs and not term and not trunc and "infra_error" not in info
    obs, reward, term, trunc, info = env.step(call("submit"))
    assert term and reward == 0.0 and info["eval"]["status"] in ("unresolved", "patch_failed")


@pytest.mark.slow
def test_an_attack_in_one_episode_leaves_another_unaffected(backend, tiny_task):
    attacker, victim = (RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=60,
                                    config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0)) for _ in range(2))
    try:
        attacker.reset()
        victim.reset()
        require_limits(attacker)
        thread = threading.Thread(target=lambda: attacker.step(call(
            "bash", command=":(){ :|:& };: ; python3 -c 'b=[]\nwhile 1: b.append(bytearray(64<<20))'", timeout=8)))
        thread.start()
        victim.step(call("apply_patch", patch=tiny_task.patch))
        obs, reward, term, *_ = victim.step(call("submit"))
        thread.join()
        assert term and reward == 1.0, obs
        assert attacker.step(call("bash", command="echo ok"))[0].strip() == "ok"
    finally:
        attacker.close()
        victim.close()


# -- issue 17: the runner never runs the agent's git configuration, and a sandbox keeps nothing of the host ---------

# A program the agent plants and then names in git's configuration: if anything outside the agent's own commands
# ever runs it, it leaves evidence in /tmp (the sandbox's) and tries to reach beyond the sandbox: back to root
# through the runner's saved uid (docker), a read-write remount of the host's interpreter (local), PID 1.
EVIL = r"""#!/bin/sh
{ echo "ran uid=$(id -u) $(grep CapEff /proc/self/status)"; } >> /tmp/evil-ran 2>&1
python3 - "@PREFIX@" >> /tmp/evil-ran 2>&1 <<'PY'
import os, subprocess, sys
try:
    os.setresuid(0, 0, 0); print("became root")
except OSError as exc:
    print("no root:", exc)
prefix = sys.argv[1] if len(sys.argv) > 1 else ""
if prefix:
    subprocess.run(["mount", "-o", "remount,rw,bind", prefix], capture_output=True)
    try:
        open(os.path.join(prefix, "repogym-hostile-canary"), "w").write("pwned")
        print("wrote host file")
    except OSError as exc:
        print("no host write:", exc)
PY
cat
"""

GIT_ATTACKS = {
    "filter": "git config filter.x.clean /tmp/evil.sh && git config filter.x.smudge /tmp/evil.sh && "
              "echo '* filter=x' > .gitattributes",
    "filter_required": "git config filter.x.clean /tmp/evil.sh && git config filter.x.required true && "
                       "echo '*.py filter=x' > .gitattributes",
    "diff_external": "git config diff.external /tmp/evil.sh",
    "textconv": "git config diff.x.textconv /tmp/evil.sh && echo '*.py diff=x' > .gitattributes",
    "fsmonitor": "git config core.fsmonitor /tmp/evil.sh",
    "hooks": "mkdir -p /tmp/hooks && for h in pre-commit post-checkout post-index-change reference-transaction; "
             "do cp /tmp/evil.sh /tmp/hooks/$h; done && git config core.hooksPath /tmp/hooks",
    "include": "printf '[filter \"x\"]\\n\\tclean = /tmp/evil.sh\\n' > /tmp/inc && git config include.path /tmp/inc "
               "&& echo '* filter=x' > .gitattributes",
    "global_config": "printf '[core]\\n\\tfsmonitor = /tmp/evil.sh\\n[filter \"x\"]\\n\\tclean = /tmp/evil.sh\\n' "
                     "> ~/.gitconfig && echo '* filter=x' > .gitattributes",
    "dot_git_file": "cp -r .git /tmp/g && git --git-dir=/tmp/g config filter.x.clean /tmp/evil.sh && rm -rf .git "
                    "&& echo 'gitdir: /tmp/g' > .git && echo '* filter=x' > .gitattributes",
    "dot_git_link": "cp -r .git /tmp/g && git --git-dir=/tmp/g config core.fsmonitor /tmp/evil.sh && rm -rf .git "
                    "&& ln -s /tmp/g .git",
    "commondir": "mkdir -p /tmp/c && cp .git/config /tmp/c/config && git config -f /tmp/c/config core.fsmonitor "
                 "/tmp/evil.sh && echo /tmp/c > .git/commondir",
}


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(GIT_ATTACKS))
def test_the_runner_never_runs_the_agents_git_configuration(env, tiny_task, attack):
    import sys
    prefix = sys.prefix if env.backend == "local" else ""
    env._sandbox.write_file("evil.sh", EVIL.replace("@PREFIX@", prefix).encode())
    bash(env, f"mv evil.sh /tmp/evil.sh && chmod +x /tmp/evil.sh && {GIT_ATTACKS[attack]}")
    # Every route by which the runner touches git: an edit (tree id), diff, a test run, and grading.
    for action in (call("create", path="calc/extra.py", content="X = 1\n"), call("diff"),
                   call("edit", path="calc/extra.py", old="X = 1", new="X = 2"), call("inspect_diff")):
        obs, reward, term, trunc, info = env.step(action)
        assert not term and not trunc and "infra_error" not in info, obs
    assert_healthy(env)
    evidence = bash(env, "cat /tmp/evil-ran 2>/dev/null; echo end")[0]
    assert evidence.strip() == "end", f"the agent's program ran outside its commands: {evidence}"
    assert not os.path.exists(os.path.join(prefix or "/nonexistent", "repogym-hostile-canary"))
    # The gold patch still resolves beside the attack, and the next episode starts clean.
    env.step(call("apply_patch", patch=tiny_task.patch))
    obs, reward, term, trunc, info = env.step(call("submit"))
    assert term and reward == 1.0 and info["eval"]["status"] == "resolved", obs
    assert bash_after_reset(env, "cat /tmp/evil-ran 2>/dev/null; git config --get filter.x.clean; "
                                 "git config --get core.fsmonitor; echo end").strip() == "end"


def bash_after_reset(env, command):
    env.reset()
    return bash(env, command)[0]


@pytest.mark.slow
def test_a_broken_diff_at_the_turn_limit_is_the_agents_zero_not_an_exception(backend, tiny_task):
    env = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=3,
                      config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0))
    try:
        for attack in ("chmod 000 .git", "rm -rf .git && mkdir .git && chmod 000 .git"):
            env.reset()
            env.step(call("apply_patch", patch=tiny_task.patch))
            env.step(call("bash", command=attack))
            obs, reward, term, trunc, info = env.step(call("bash", command="echo last"))  # the turn limit
            assert trunc and reward in (0.0, 1.0) and not info.get("exclude"), obs
            assert info["eval"]["status"] in ("resolved", "unresolved") and "infra_error" not in info
    finally:
        env.close()


def test_the_hosts_environment_is_not_in_the_sandbox(backend, tiny_task, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_host_secret_123")
    monkeypatch.setenv("REPOGYM_HOST_SECRET", "host-secret-456")
    env = RepoTaskEnv(task=tiny_task, sandbox=backend, config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0))
    try:
        env.reset()
        obs = bash(env, "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; echo end")[0]
        assert "host_secret" not in obs and "host-secret" not in obs and "HF_TOKEN" not in obs, obs
        assert "PATH=" in obs and "HOME=" in obs
    finally:
        env.close()


def test_nothing_survives_a_reset_or_a_switch_to_another_task(backend, tiny_task):
    from dataclasses import replace
    other = replace(tiny_task, instance_id="tiny__calc-other",
                    base_commit=tiny_task.base_commit + "~1")  # another snapshot, same environment
    env = RepoTaskEnv(tasks=[tiny_task, other], sandbox=backend,
                      config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0))
    # /dev/mqueue: POSIX message queues (docker mounts one) are files an episode could leave to the next.
    plant = ("for d in /tmp /dev/shm $HOME /var/tmp /dev/mqueue; do touch $d/planted 2>/dev/null; done; "
             "python3 -c \"import sysv_ipc\" 2>/dev/null; "
             "(sleep 1000 &) ; ls /tmp/planted /dev/shm/planted $HOME/planted")
    check = "ls /tmp /dev/shm $HOME /var/tmp /dev/mqueue 2>/dev/null | grep -c planted; pgrep -c 'sleep 1000'; true"
    try:
        for switch_to in (tiny_task, other, tiny_task):
            env.reset(options={"task_id": tiny_task.instance_id if switch_to is other else other.instance_id})
            obs = bash(env, plant)[0]
            assert "No such file" not in obs, obs  # every scratch place was writable
            env.reset(options={"task_id": switch_to.instance_id})
            assert bash(env, check)[0].split() == ["0", "0"]
        size = bash(env, "df -k /dev/shm | tail -1")[0].split()[1]
        assert int(size) <= 256 * 1024, size  # its own size-limited tmpfs, not half the host's memory
    finally:
        env.close()


def _wait_until_stopped(container, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    container.reload()
    while container.status == "running":
        assert time.monotonic() < deadline, "the container outlived its main process"
        time.sleep(0.05)
        container.reload()


@pytest.mark.docker
def test_a_container_dead_from_inside_is_the_agents_zero_and_one_killed_from_outside_is_infra(tiny_task):
    """Docker's own record decides: a container whose main process died inside (no kill, stop or pause through
    the API) is the agent's doing; `docker kill` is an outside cause."""
    from tests.conftest import require_backend
    require_backend("docker")
    for how in ("inside", "outside"):
        env = RepoTaskEnv(task=tiny_task, sandbox="docker", config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0))
        try:
            env.reset()
            bash(env, "echo started")
            box = env._sandbox
            if how == "inside":  # what a route to root inside could do: end the container's main process
                # 0, or 137 when the container went down with the exec still in it (pkill's 1: nothing matched)
                assert box.container.exec_run(["pkill", "-9", "-x", "sleep"], user="root").exit_code in (0, 137)
                _wait_until_stopped(box.container)  # SIGKILL lands when the kernel gets to it, not when pkill returns
            else:
                box.container.kill()
            obs, reward, term, trunc, info = env.step(call("bash", command="echo hi"))
            if how == "inside":
                assert term and reward == 0.0 and info["error"] == "sandbox_killed" and not info.get("exclude"), obs
            else:
                assert trunc and math.isnan(reward) and info["exclude"] and "from outside" in obs, obs
            assert_clean_after_reset(env, tiny_task)
        finally:
            env.close()


def test_commands_run_as_the_unprivileged_agent_and_die_first_under_memory_pressure(env):
    obs = bash(env, "id -u; grep CapEff /proc/self/status; cat /proc/self/oom_score_adj; grep Uid /proc/self/status; "
                    "cat /proc/$PPID/oom_score_adj")[0].split()
    # Real, effective, saved and filesystem uids all the agent's: nothing to return to root with. The runner (the
    # command's parent) raises its own score only while it spawns a command, and is back to its own after.
    assert obs[:8] == ["1000", "CapEff:", "0000000000000000", "1000", "Uid:", "1000", "1000", "1000"], obs
    assert obs[8:] == ["1000", "0"], obs


def test_fifos_and_sockets_cannot_hang_the_runner(env, tiny_task):
    bash(env, "mkfifo pipe .git/index.fifo && rm .git/index && mkfifo .git/index && "
              "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"")
    for action in (call("view", path="pipe"), call("create", path="pipe", content="x"), call("view", path="sock"),
                   call("edit", path="pipe", old="a", new="b")):
        obs, reward, term, trunc, info = env.step(action)
        assert info["error"] and not term and not trunc and info["duration_s"] < 10, obs
    obs, reward, term, trunc, info = env.step(call("create", path="calc/new.py", content="X = 1\n"))
    assert not info.get("error") and info["duration_s"] < 10, obs  # the tree id: .git put back, no hang
    env.step(call("apply_patch", patch=tiny_task.patch))
    obs, reward, term, trunc, info = env.step(call("submit"))
    assert term and reward == 1.0, obs


# Every .git file with its mode and content hash, and every folder and link: what a reset must give back exactly
# (but the index's stat data and the reflogs' lines, which git's own reset writes with the time of day).
GIT_LISTING = ("cd .git && find . -path ./index -prune -o -printf '%y %m %p %l\\n' | sort && "
               "find . -type f ! -name index ! -path './logs/*' -exec sha256sum {} + | sort -k2")


GIT_TAMPERING = {
    # What reset finds file by file: an object changed in place (same size), config, a hook, a link, a stray folder.
    "in place": ("chmod u+w {obj} && printf 'x' | dd of={obj} bs=1 seek=3 conv=notrunc 2>/dev/null; "
                 "printf '[core]\\n\\tfsmonitor = /tmp/evil\\n' >> .git/config; "
                 "mkdir -p .git/hooks && printf '#!/bin/sh\\n' > .git/hooks/post-checkout; "
                 "ln -sf /etc/passwd .git/description; chmod 777 .git/objects; "
                 "mkdir .git/objects/zz && touch .git/objects/zz/planted"),
    # What makes it start again from an empty folder: a FIFO for HEAD, a folder nobody can read.
    "unreadable": "rm -f .git/HEAD && mkfifo .git/HEAD; chmod 000 .git/refs/tags",
}


@pytest.mark.parametrize("kind", sorted(GIT_TAMPERING))
def test_a_tampered_git_folder_is_the_bases_again_after_a_reset(env, kind):
    # reset writes back only the .git files that differ from the base's: each kind of difference must be found.
    # (Straight on the sandbox: an env step would have its git call clean part of it up first.)
    env.reset()  # what a reset leaves (git's reset writes ORIG_HEAD, say): the state every episode starts from
    box = env._sandbox
    pristine = box.run(GIT_LISTING).stdout
    obj = box.run("find .git/objects -type f | head -1").stdout.strip()
    assert box.run(GIT_TAMPERING[kind].format(obj=obj)).ok
    assert box.run(GIT_LISTING).stdout != pristine
    env.reset()
    assert env._sandbox.run(GIT_LISTING).stdout == pristine
    assert env._sandbox.diff() == ""


# Working-tree changes that sizes and times do not show, and one git's own reset leaves (a hard link), all made by the
# first command after a reset (as close as an agent gets to that reset's last look): the next reset undoes each,
# however it puts the tree back (the runner's own way from the base it holds, or git's).
HIDDEN_CHANGES = ("cp -p pyproject.toml /tmp/keep && printf X | dd of=pyproject.toml bs=1 conv=notrunc 2>/dev/null && "
                  "touch -r /tmp/keep pyproject.toml; "  # same size, same times: only the content (and ctime) differ
                  "ln calc/ops.py calc/twin.py; "  # a hard link (the base file keeps one: nothing to count next time)
                  "cp -p calc/__init__.py /tmp/i && rm calc/__init__.py && cp -p /tmp/i calc/__init__.py && "
                  "chmod 000 calc/__init__.py; "  # same bytes, another inode, unreadable
                  "rm -r tests && ln -s calc tests; "  # a folder becomes a link
                  "mkdir -p sub/.git && echo 'ref: refs/heads/x' > sub/.git/HEAD; "  # a nested repository
                  "mkfifo calc/pipe; printf x > calc/.hidden && touch -d @946684800 calc/.hidden calc")
TREE_PRINT = ("find . -path ./.git -prune -o -printf '%p %y %m %n %s %T@ %U %l\\n' | sort; "
              "find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum 2>&1; "
              "git status --porcelain --ignored")


def test_a_reset_undoes_what_sizes_and_times_do_not_show(env):
    env.reset()
    base = bash(env, TREE_PRINT)[0]
    ways = []
    for _ in range(3):
        bash(env, HIDDEN_CHANGES)
        assert bash(env, TREE_PRINT)[0] != base
        ways.append(sorted(env._sandbox.reset()))
        env.reset()
        assert bash(env, TREE_PRINT)[0] == base
        assert env._sandbox.diff() == ""
    assert all("fast_tree" in phases for phases in ways), ways  # the runner's own way, not git's


def test_an_edit_that_restores_size_and_times_still_counts_as_an_edit(env):
    # The tree id is reused while no file changed: what no process can set back (ctime) must decide, not mtime.
    bash(env, "sleep 0.2")  # every file settled: the next tree id may come from the cache
    before = env.ctx.episode.last_edit_turn
    obs, _ = bash(env, "cp -p calc/ops.py /tmp/keep && sed -i 's/high - 1/high + 1/' calc/ops.py && "
                       "touch -r /tmp/keep calc/ops.py && stat -c %s calc/ops.py /tmp/keep")
    sizes = obs.split()
    assert sizes[0] == sizes[1]  # same size, same mtime: only the content (and ctime) differ
    assert env.ctx.episode.last_edit_turn != before and env.ctx.episode.last_edit_turn == env.turn
    edited = env.ctx.episode.last_edit_turn
    bash(env, "sleep 0.2; cat calc/ops.py > /dev/null")
    assert env.ctx.episode.last_edit_turn == edited  # a read is no edit
