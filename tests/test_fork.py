"""env.fork: branches of a live episode on both backends (issue 24).

A fork has its source's files and git objects byte for byte, then diverges on its own; grading it gives what
grading the source gives for the same diff; what the agent can plant before a fork (git configuration attacks,
setuid bits, unreadable files, sockets, links to root's files, background writers, huge files) neither escapes
nor breaks the fork, and what a fork cannot copy is said.
"""

import json

import pytest

from repogym.envs.core.errors import ConfigError, ForkRefused
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from tests.test_hostile import EVIL, GIT_ATTACKS, LIMITS, call

# What must be equal between a fork and its source: every file's bytes and mode, every git object, HEAD, the
# scratch folder, and the staged index.
FINGERPRINT = ("(find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum; "
               "find . -path ./.git -prune -o -printf '%p %m %y\\n' | sort; "
               "git cat-file --batch-all-objects --batch-check; git rev-parse HEAD; git diff --cached --stat; "
               "git stash list; git tag; ls -la /tmp | tail -n +4 | awk '{print $1, $NF}'; cat /tmp/scratch.txt) 2>&1")


def run(env, command):
    obs, reward, term, trunc, info = env.step(call("bash", command=command))
    assert not term and not trunc and "infra_error" not in info, obs
    return obs


@pytest.fixture
def env(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=60,
                              config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0, fork_pool_size=2))
    environment.reset()
    yield environment
    environment.close()


def test_a_fork_is_its_source_byte_for_byte_then_diverges_alone(env, tiny_task):
    run(env, "echo new > calc/new.py && git add calc/new.py && git commit -qm wip && echo staged >> README && "
             "git add -N README 2>/dev/null; git stash -q -u 2>/dev/null; git stash pop -q 2>/dev/null; "
             "echo extra >> calc/ops.py && echo scratch > /tmp/scratch.txt && git tag mine")
    env.step(call("run_tests", tests=["tests/test_ops.py"]))
    forks = env.fork(3)
    try:
        source_print = run(env, FINGERPRINT)
        for fork in forks:
            assert fork.turn == env.turn - 1 == fork.fork_info["source_turn"]  # the source took one more step
            assert fork.ctx.episode.test_runs == env.ctx.episode.test_runs
            assert fork.ctx.episode is not env.ctx.episode and fork._sandbox is not env._sandbox
            obs = run(fork, FINGERPRINT)
            assert obs == source_print
        # Each branch changes its own copy: nobody else sees it.
        run(forks[0], "echo only-0 > calc/ops.py && git commit -qam zero && echo x > /tmp/scratch.txt")
        run(env, "echo only-source > calc/extra.py")
        for other in (forks[1], forks[2]):
            assert run(other, "cat calc/ops.py | tail -1; git log --oneline | wc -l; cat /tmp/scratch.txt; "
                              "ls calc/extra.py 2>&1 | grep -c 'No such'").split() == ["extra", "2", "scratch", "1"]
        assert "only-0" not in run(env, "cat calc/ops.py")
        # A reset in a fork goes back to the task's base; a fork of a fork works too.
        grandchild = forks[1].fork(1)[0]
        assert "mine" in run(grandchild, "git tag")
        grandchild.reset()
        assert run(grandchild, "git log --oneline | wc -l; git tag | grep -c mine; ls /tmp | wc -l").split() == ["1", "0",
                                                                                                     "0"]
        grandchild.close()
    finally:
        for fork in forks:
            fork.close()


def test_an_episode_after_a_reset_forks_too(env):
    """A reset reads the base's ``.git`` into the runner for itself; a fork copies the base, not that reading (which
    once made the runner's answer unwritable, its exit blamed on the agent)."""
    env.reset()
    run(env, "echo later >> README")
    fork = env.fork(1)[0]
    try:
        assert run(fork, "tail -1 README").strip() == "later"
        fork.reset()
        assert "later" not in run(fork, "cat README")
    finally:
        fork.close()


@pytest.mark.slow
def test_grading_a_fork_gives_what_grading_its_source_gives(env, tiny_task):
    env.step(call("apply_patch", patch=tiny_task.patch))
    gold_forks = env.fork(2)
    half = env.fork(1)[0]
    try:
        run(half, "git checkout -q HEAD -- calc/ops.py")  # this branch undoes the fix
        results = [f.step(call("submit")) for f in (*gold_forks, half)]
        _, source_reward, term, _, source_info = env.step(call("submit"))
        assert term and source_reward == 1.0
        for _, reward, term, _, info in results[:2]:
            assert term and reward == source_reward and info["eval"]["status"] == source_info["eval"]["status"]
        assert results[2][1] == 0.0 and results[2][4]["eval"]["status"] == "unresolved"
        assert results[0][4]["fork"]["source_turn"] == 1  # the first step after a fork says what it copied
    finally:
        for fork in (*gold_forks, half):
            fork.close()


def test_what_a_fork_cannot_copy_is_listed_and_nothing_escalates(env, backend):
    run(env, "touch calc/secret.py && chmod 000 calc/secret.py && cp /bin/true /tmp/suid && chmod 4755 /tmp/suid && "
             "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind(\"/tmp/sock\")' && "
             "mkfifo /tmp/fifo && ln -s /etc/shadow /tmp/shadow; "
             "setsid sh -c 'while true; do date >> /tmp/writer.log; sleep 0.01; done' > /dev/null 2>&1 & sleep 0.2")
    fork = env.fork(1)[0]
    try:
        not_copied = " ".join(fork.fork_info["not_copied"])
        assert "/tmp/sock (a socket)" in not_copied and fork.fork_info["processes"] == "not copied"
        assert "./calc/secret.py (Permission denied)" in not_copied  # not read for the agent by a privileged hand
        obs = run(fork, "stat -c '%A' /tmp/suid; test -p /tmp/fifo && echo fifo; readlink /tmp/shadow; "
                        "cat /tmp/shadow >/dev/null 2>&1 && echo read-shadow; ls /tmp/sock 2>&1 | grep -c 'No such'; "
                        "n=$(wc -l < /tmp/writer.log); sleep 0.3; [ $(wc -l < /tmp/writer.log) = $n ] && echo still")
        lines = obs.split()
        assert lines[0] == "-rwxr-xr-x"  # the setuid bit is not carried over
        assert "fifo" in lines and "/etc/shadow" in lines and "still" in lines  # no writer runs in the fork
        assert "read-shadow" not in lines  # the link came over as a link: root's file stays root's
    finally:
        fork.close()
    run(env, "pkill -f writer.log || true")


def test_an_episode_over_the_fork_limit_is_refused_and_goes_on(backend, tiny_task):
    env = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=60,
                      config=EnvConfig(sandbox_config=LIMITS, eval_pool_size=0, fork_max_bytes=1 << 20))
    try:
        env.reset()
        run(env, "head -c 3000000 /dev/urandom > /tmp/big")
        with pytest.raises(ForkRefused, match="over the fork limit"):
            env.fork(2)
        assert run(env, "echo ok").strip() == "ok"
        run(env, "rm /tmp/big")
        env.fork(1)[0].close()
    finally:
        env.close()


def test_fork_arguments_and_timing_are_checked(tiny_task):
    env = RepoTaskEnv(task=tiny_task, sandbox="local")
    try:
        with pytest.raises(RuntimeError, match="call reset"):
            env.fork(1)
        env.reset()
        for bad in (0, -1, 1.5, True, "2"):
            with pytest.raises(ConfigError, match="n must be"):
                env.fork(bad)
        env.step(call("submit"))
        with pytest.raises(RuntimeError, match="in progress"):
            env.fork(1)
    finally:
        env.close()
    with pytest.raises(ConfigError, match="pool sizes"):
        EnvConfig(fork_pool_size=-1)


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["filter", "fsmonitor", "dot_git_link", "hooks"])
def test_git_attacks_planted_before_a_fork_do_not_run_in_it(env, tiny_task, attack):
    env._sandbox.write_file("evil.sh", EVIL.replace("@PREFIX@", "").encode())
    run(env, f"mv evil.sh /tmp/evil.sh && chmod +x /tmp/evil.sh && {GIT_ATTACKS[attack]}")
    fork = env.fork(1)[0]
    try:
        for action in (call("create", path="calc/extra.py", content="X = 1\n"), call("diff"), call("inspect_diff")):
            obs, reward, term, trunc, info = fork.step(action)
            assert not term and "infra_error" not in info, obs
        assert run(fork, "cat /tmp/evil-ran 2>/dev/null; echo end").strip() == "end"
        fork.step(call("apply_patch", patch=tiny_task.patch))
        obs, reward, term, trunc, info = fork.step(call("submit"))
        assert term and reward == 1.0, obs
    finally:
        fork.close()
    assert json.loads(json.dumps(env.fork_info)) is None  # the source is no fork


def test_a_sync_vector_env_forks_each_of_its_envs(tiny_task):
    import gymnasium

    import repogym.envs  # noqa: F401  (registers the id)
    vec = gymnasium.make_vec("repogym/RepoTask-v0", num_envs=2, vectorization_mode="sync", task=tiny_task,
                             sandbox="local", config=EnvConfig(eval_pool_size=0))
    try:
        vec.reset(seed=0)
        vec.step([call("bash", command="echo a > /tmp/mark"), call("bash", command="echo b > /tmp/mark")])
        groups = vec.call("fork", 2)
        try:
            assert [len(g) for g in groups] == [2, 2]
            marks = [[run(fork, "cat /tmp/mark").strip() for fork in group] for group in groups]
            assert marks == [["a", "a"], ["b", "b"]]
        finally:
            for fork in (f for group in groups for f in group):
                fork.close()
    finally:
        vec.close()
