"""The Gymnasium environment end to end on the tiny task, on each backend."""

import json
import math
from dataclasses import replace

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import repogym.envs  # noqa: F401
from repogym.envs import StepInfo, repo_env
from repogym.envs.core import bugs
from repogym.envs.core.episode_state import EpisodeState, TestRunRecord
from repogym.envs.core.errors import ConfigError, InternalError
from repogym.envs.core.status import Status, excluded
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv, truncate
from repogym.envs.rewards import EvalRecord
from repogym.envs.rewards import facts as episode_facts  # its tests_since_last_edit would be collected as a test
from repogym.envs.tools import TOOLS


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


@pytest.fixture
def env(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=20)
    yield environment
    environment.close()


def test_check_env_passes_on_the_registered_id(backend, tiny_task):
    import warnings
    environment = gym.make("repogym/RepoTask-v0", task=tiny_task, sandbox=backend, max_turns=5)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(environment.unwrapped, skip_render_check=True)
        # As Gymnasium's own env tests: no checker warnings. (ResourceWarnings of objects that earlier tests
        # left to the garbage collector may land here; they are not about this env.)
        assert [str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)] == []
    finally:
        environment.close()


@pytest.mark.docker
def test_a_switch_within_one_environment_loads_the_waiting_grading_sandbox_instead_of_starting_one(backend, tiny_task):
    """The grading sandbox waiting for the last task (never acquired: nothing ran in it) takes the next task's base;
    grading in it after two switches still gives the gold patch its pass."""
    from repogym.envs.tasks.repos import snapshot

    other = replace(tiny_task, instance_id="tiny__calc-other", base_commit=tiny_task.base_commit + "~1")
    environment = RepoTaskEnv(tasks=[tiny_task, other], sandbox=backend, max_turns=20)
    try:
        waiting = []
        for task in (tiny_task, other, tiny_task):
            environment.reset(options={"task_id": task.instance_id})
            pool = environment._grading_pool(task)
            box = pool._ready.get(timeout=120)  # filled (by a load of the one before, or a start)
            assert box.snapshot_key == snapshot(task).key
            pool._ready.put(box)
            waiting.append(box)
        assert waiting[0] is waiting[1] is waiting[2]  # one sandbox, loaded twice, never started again
        environment.step(call("apply_patch", patch=tiny_task.patch))
        _, reward, terminated, _, info = environment.step(call("submit"))
        assert terminated and reward == 1.0, info.get("eval")
    finally:
        environment.close()


def test_grading_sandboxes_yield_the_cpu_to_the_agents_sandbox(tiny_task):
    """The warm grading sandbox a reset starts has the grading weight (batch work), the agent's the default."""
    import time
    import uuid

    from repogym.envs.sandbox import SandboxConfig
    from repogym.envs.sandbox.docker import docker_client
    from tests.conftest import require_backend

    require_backend("docker")
    run_id = f"pytest-weights-{uuid.uuid4().hex[:8]}"
    environment = RepoTaskEnv(task=tiny_task, sandbox="docker", max_turns=5, config=EnvConfig(
        sandbox_config=SandboxConfig(run_id=run_id), grading_cpu_shares=64))
    try:
        environment.reset()
        deadline, shares = time.monotonic() + 120, []
        while len(shares) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            containers = docker_client().containers.list(filters={"label": f"repogym.run={run_id}"})
            shares = sorted(c.attrs["HostConfig"]["CpuShares"] for c in containers)
        assert shares == [64, 1024]
        assert environment.step(call("bash", command="echo ok"))[0].strip().endswith("ok")
    finally:
        environment.close()
    with pytest.raises(ConfigError, match="grading_cpu_shares"):
        EnvConfig(grading_cpu_shares=1)


def test_only_docker_grading_sandboxes_get_the_lower_weight(tiny_task, monkeypatch):
    """The local backend's cgroups are siblings of the host's own work: a low weight there starves gradings."""
    made = []
    monkeypatch.setattr(repo_env, "sandbox_factory", lambda backend, setup, config: made.append((backend, config)))
    for backend in ("docker", "local"):
        environment = RepoTaskEnv(task=tiny_task, sandbox=backend, config=EnvConfig(grading_cpu_shares=64))
        environment._factory(tiny_task, grading=True)
        environment._factory(tiny_task)
    assert [(backend, config.cpu_shares) for backend, config in made] == [
        ("docker", 64), ("docker", 1024), ("local", 1024), ("local", 1024)]


def test_reset_gives_problem_statement_tools_and_task_id(env, tiny_task):
    obs, info = env.reset(seed=1)
    assert tiny_task.problem_statement in obs and "submit" in obs
    assert info["task_id"] == tiny_task.instance_id
    names = [t["function"]["name"] for t in info["tools"]]
    assert names == ["bash", "view", "search", "edit", "create", "apply_patch", "run_tests", "diff", "inspect_diff",
                     "submit"]
    assert info["tools"] == env.tools_schema()
    assert env.observation_space.contains(obs)


def test_gold_patch_through_tools_earns_one(env, tiny_task):
    env.reset()
    obs, reward, term, trunc, info = env.step(call("apply_patch", patch=tiny_task.patch))
    assert "applied" in obs and "error" not in info and reward == 0.0
    obs, reward, term, trunc, info = env.step(call("submit"))
    assert (reward, term, trunc) == (1.0, True, False)
    assert info["eval"]["status"] == "resolved" and info["eval"]["status"] is Status.RESOLVED
    assert json.loads(json.dumps(info["eval"]))["status"] == "resolved"  # JSON keeps the plain string
    assert info["eval"]["tests"]["tests/test_hidden.py::test_clamp_above"] == "passed"
    with pytest.raises(RuntimeError, match="reset"):
        env.step(call("diff"))


@pytest.mark.slow
def test_empty_submission_earns_zero(env):
    env.reset()
    obs, reward, term, trunc, info = env.step("<tool_call>" + call("submit") + "</tool_call>")
    assert (reward, term) == (0.0, True)
    assert info["eval"]["status"] == "unresolved"
    assert info["eval"]["fail_to_pass"] == {"passed": 0, "total": 1}
    assert info["eval"]["pass_to_pass"] == {"passed": 3, "total": 3}


@pytest.mark.slow
def test_every_tool_with_good_input(env):
    env.reset()
    obs, *_, info = env.step(call("bash", command="echo hi && ls calc"))
    assert "hi" in obs and "ops.py" in obs and info["exit_code"] == 0 and info["tool"] == "bash"
    assert info["duration_s"] >= 0 and info["turn"] == 1
    obs, *_ = env.step(call("view", path="calc/ops.py", start_line=1, end_line=3))
    assert "1\tdef add(a, b):" in obs and "[lines 1-3 of" in obs
    obs, *_ = env.step(call("view", path="calc"))
    assert "ops.py" in obs
    obs, *_, info = env.step(call("search", pattern="def (add|clamp)"))
    assert "calc/ops.py:1:def add" in obs and info["matches"] == 2
    obs, *_ = env.step(call("edit", path="calc/ops.py", old="high - 1", new="high"))
    assert "edited calc/ops.py" in obs
    obs, *_ = env.step(call("create", path="calc/extra.py", content="X = 1\n"))
    assert "created calc/extra.py" in obs
    obs, *_, info = env.step(call("run_tests"))
    assert "[2 passed]" in obs and info["exit_code"] == 0
    obs, *_, info = env.step(call("run_tests", tests=["tests/test_ops.py::test_add_zero"]))
    assert "[1 passed]" in obs
    obs, *_ = env.step(call("diff"))
    assert "+    return max(low, min(x, high))" in obs and "calc/extra.py" in obs
    obs, reward, term, *_ = env.step(call("submit"))
    assert reward == 1.0 and term


@pytest.mark.parametrize("action, kind", [
    ("not json", "parse_error"),
    (call("rm_rf"), "unknown_tool"),
    (call("bash"), "bad_arguments"),
    (call("bash", command="ls", colour=True), "bad_arguments"),
    (call("bash", command=5), "bad_arguments"),
    (call("bash", command="ls", timeout=10_000), "bad_arguments"),
    (call("view", path="../../etc/passwd"), "path_outside_repo"),
    (call("view", path="/etc/passwd"), "path_outside_repo"),
    (call("view", path=".git/config"), "path_outside_repo"),
    (call("view", path="nope.py"), "not_found"),
    (call("view", path="calc/ops.py", start_line=99), "bad_arguments"),
    (call("edit", path="calc/ops.py", old="no such text", new="x"), "no_match"),
    (call("edit", path="calc/ops.py", old="return", new="x"), "ambiguous_match"),
    (call("create", path="../outside.py", content="x"), "path_outside_repo"),
    (call("apply_patch", patch="this is not a diff"), "patch_failed"),
    (call("apply_patch", patch="--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,1 +1,1 @@\n-nothing like this\n+x\n"),
     "patch_failed"),
    (call("search", pattern="(unclosed"), "bad_arguments"),
    (call("run_tests", tests=["--co"]), "bad_arguments"),
])
def test_bad_input_is_an_error_observation_and_costs_a_turn(env, action, kind):
    env.reset()
    obs, reward, term, trunc, info = env.step(action)
    assert info["error"] == kind and obs.startswith(f"error ({kind})") and "exit_code" not in info
    assert (reward, term, trunc) == (0.0, False, False) and info["turn"] == 1
    obs, *_ = env.step(call("bash", command="git status --short"))
    assert obs.startswith("[no output")  # nothing was changed, the env still works


def test_timeouts_and_huge_and_binary_output(env):
    env.reset()
    obs, *_, info = env.step(call("bash", command="sleep 30", timeout=1))
    assert "timed out after 1s" in obs and info["error"] == "timeout"
    obs, *_ = env.step(call("bash", command="yes x | head -c 3000000"))
    assert "characters truncated" in obs and len(obs) < 20_000
    obs, *_ = env.step(call("bash", command="head -c 100 /dev/zero"))
    assert "binary output" in obs
    env.step(call("bash", command="head -c 100 /dev/urandom > blob.bin"))
    obs, *_, info = env.step(call("view", path="blob.bin"))
    assert info["error"] == "binary_file"


@pytest.mark.slow
def test_turn_limit_truncates_and_grades(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, max_turns=2)
    try:
        environment.reset()
        environment.step(call("edit", path="calc/ops.py", old="high - 1", new="high"))
        obs, reward, term, trunc, info = environment.step(call("diff"))
        assert (term, trunc, reward) == (False, True, 1.0) and "turn limit" in obs
        assert info["eval"]["status"] == "resolved"
    finally:
        environment.close()


def test_turn_limit_without_grading_is_not_submitted(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, config=EnvConfig(max_turns=1, grade_on_truncation=False))
    try:
        environment.reset()
        obs, reward, term, trunc, info = environment.step(call("diff"))
        assert (term, trunc, reward) == (False, True, 0.0) and "exclude" not in info
        assert info["eval"] == {"status": "not_submitted"} and info["eval"]["status"] is Status.NOT_SUBMITTED
    finally:
        environment.close()


def test_reset_restores_the_repository(env):
    env.reset()
    env.step(call("bash", command="rm -rf calc && echo junk > junk.txt"))
    obs, info = env.reset()
    obs, *_ = env.step(call("bash", command="ls; git status --short"))
    assert "calc" in obs and "junk" not in obs


def test_tampering_with_tests_earns_nothing(env):
    env.reset()
    # Make every test "pass" by hooking pytest, and rewrite the visible test: both are dropped.
    env.step(call("create", path="conftest.py", content=(
        "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    report = outcome.get_result()\n    report.outcome = 'passed'\n")))
    env.step(call("create", path="tests/test_hidden.py", content="def test_clamp_above():\n    pass\n"))
    env.step(call("bash", command="printf '[pytest]\\naddopts = -p no:repogym_report\\n' > pytest.ini"))
    obs, reward, term, trunc, info = env.step(call("submit"))
    assert reward == 0.0 and info["eval"]["status"] == "unresolved"
    assert set(info["eval"]["dropped"]) == {"conftest.py", "tests/test_hidden.py", "pytest.ini"}


def test_tampering_with_pyproject_pytest_section_is_reverted(env, tiny_task):
    env.reset()
    env.step(call("bash", command="sed -i 's/testpaths = \\[\"tests\"\\]/addopts = \"-p no:repogym_report\"/' "
                                  "pyproject.toml && cat pyproject.toml"))
    env.step(call("apply_patch", patch=tiny_task.patch))
    obs, reward, term, trunc, info = env.step(call("submit"))
    assert reward == 1.0 and "pyproject.toml [pytest section]" in info["eval"]["dropped"]


def test_a_dead_sandbox_is_an_infra_error_not_a_zero(env):
    from tests.test_sandbox import kill_runner_from_outside
    env.reset()
    kill_runner_from_outside(env._sandbox)
    obs, reward, term, trunc, info = env.step(call("bash", command="echo hi"))
    assert trunc and math.isnan(reward)
    assert info["infra_error"]["where"].startswith("sandbox.") and info["eval"]["status"] == "infra_error"
    obs, info = env.reset()  # a fresh sandbox replaces the dead one
    obs, *_ = env.step(call("bash", command="echo back"))
    assert obs.strip() == "back"


def test_make_vec_runs_two_envs(backend, tiny_task):
    vec = gym.make_vec("repogym/RepoTask-v0", num_envs=2, vectorization_mode="sync", task=tiny_task,
                       sandbox=backend, max_turns=3)
    try:
        obs, info = vec.reset(seed=0)
        assert len(obs) == 2 and all("clamp" in o for o in obs)
        obs, rewards, terms, truncs, infos = vec.step([call("bash", command="echo one"), call("submit")])
        assert obs[0].strip() == "one" and terms[1] and rewards[1] == 0.0
    finally:
        vec.close()


def test_an_env_offers_only_its_configured_tools(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, config=EnvConfig(max_turns=3, tools=["submit", "edit"]))
    try:
        obs, info = environment.reset()
        assert [t["function"]["name"] for t in info["tools"]] == ["edit", "submit"]  # registry order
        assert "- edit(" in obs and "- bash(" not in obs
        obs, reward, term, trunc, info = environment.step(call("bash", command="cat calc/ops.py"))
        assert info["error"] == "unknown_tool" and "expected one of edit, submit" in obs and not (term or trunc)
        environment.step(call("edit", path="calc/ops.py", old="high - 1", new="high"))
        assert environment.step(call("submit"))[1] == 1.0
    finally:
        environment.close()
    with pytest.raises(ConfigError, match="tools: expected a non-empty list"):
        EnvConfig(tools=["edit", "teleport"])


def test_config_errors_are_clear(tiny_task):
    with pytest.raises(ConfigError, match="max_turns"):
        EnvConfig(max_turns=0)
    with pytest.raises(ConfigError, match="sandbox"):
        RepoTaskEnv(task=tiny_task, sandbox="vm")


def test_truncate_marks_what_was_cut():
    text = "a" * 100 + "b" * 100
    cut = truncate(text, 60)
    assert cut.startswith("a" * 40) and cut.endswith("b" * 20) and "140 characters truncated" in cut


def test_inspect_diff_shows_blast_radius_and_tests_run_since_last_edit(env):
    env.reset()
    obs, *_ = env.step(call("inspect_diff"))
    assert "nothing to inspect" in obs
    env.step(call("edit", path="calc/ops.py", old="high - 1", new="high"))
    obs, *_, info = env.step(call("inspect_diff"))
    changed = [c["name"] for c in info["analysis"]["changed"]]
    assert changed == ["calc.ops.clamp"]
    assert "not run  tests/test_ops.py::test_clamp_inside" in obs
    assert info["covering_run"] == 0 and info["covering_total"] == 1
    env.step(call("run_tests", tests=["tests/test_ops.py"]))
    obs, *_, info = env.step(call("inspect_diff"))
    assert "passed   tests/test_ops.py::test_clamp_inside" in obs and info["covering_run"] == 1
    env.step(call("bash", command="echo '# later' >> calc/ops.py"))  # an edit: earlier runs no longer count
    obs, *_, info = env.step(call("inspect_diff"))
    assert info["covering_run"] == 0


def test_episode_state_records_turns_edits_and_test_runs(env):
    env.reset()
    first = env.ctx.episode
    assert first == EpisodeState()
    env.step(call("edit", path="calc/ops.py", old="high - 1", new="high"))
    assert (first.turn, first.last_edit_turn) == (1, 1) and first.tree_id is not None
    env.step(call("run_tests", tests=["tests/test_ops.py"]))
    [run] = first.test_runs
    assert isinstance(run, TestRunRecord) and (run.turn, run.tests) == (2, ["tests/test_ops.py"])
    assert run.outcomes["tests/test_ops.py::test_clamp_inside"] == "passed"
    assert episode_facts.tests_since_last_edit(first) == run.outcomes
    box, ops = env.unwrapped._sandbox, []
    ask = box.request
    box.request = lambda op, **fields: ops.append(op) or ask(op, **fields)
    env.step(call("bash", command="true"))  # an editing tool that changed nothing is no edit
    assert (first.turn, first.last_edit_turn) == (3, 1) and episode_facts.ran_tests_since_last_edit(first)
    env.step(call("bash", command="echo '# later' >> calc/ops.py"))
    assert first.last_edit_turn == 4 and episode_facts.tests_since_last_edit(first) == {}
    assert ops == ["run", "run"]  # the tree id came with each command's answer: one round trip a bash step
    # The file tools too: the tree id comes with the write (edit, create) or the command (apply_patch).
    ops.clear()
    env.step(call("edit", path="calc/ops.py", old="# later", new="# later, edited"))
    assert first.last_edit_turn == 5
    env.step(call("create", path="calc/extra.py", content="x = 1\n"))
    assert first.last_edit_turn == 6
    env.step(call("apply_patch", patch="--- a/calc/extra.py\n+++ b/calc/extra.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"))
    assert first.last_edit_turn == 7
    assert ops == ["read", "write", "read", "write", "write", "run"]
    assert first.tree_id == box.tree_id() != box.base_tree
    del box.request
    env.reset()
    assert env.ctx.episode is not first and env.ctx.episode == EpisodeState()


@pytest.mark.slow
def test_process_reward_and_final_analysis(backend, tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox=backend, config=EnvConfig(reward="process"))
    try:
        environment.reset()
        environment.step(call("edit", path="calc/ops.py", old="high - 1", new="high"))
        environment.step(call("run_tests"))
        environment.step("not a call")
        obs, reward, term, trunc, info = environment.step(call("submit"))
        assert info["reward_components"] == {"tests": 1.0, "dependents_checked": 1.0, "format": 0.75}
        assert reward == pytest.approx(1.0 + 0.3 + 0.075)
        assert [c["name"] for c in info["analysis"]["changed"]] == ["calc.ops.clamp"]
        assert set(info["analysis"]) == {"changed", "dependents", "tests", "syntax_errors", "unresolved"}
    finally:
        environment.close()


def test_default_reward_reports_its_one_component(env, tiny_task):
    env.reset()
    env.step(call("apply_patch", patch=tiny_task.patch))
    obs, reward, *_, info = env.step(call("submit"))
    assert reward == 1.0 and info["reward_components"] == {"tests": 1.0}


# -- bugs of ours: loud in strict mode, else an excluded episode (never a reward of 0) ---------------------------
def _broken_diff_tool(monkeypatch):
    """The ``diff`` tool with a bug: its run raises KeyError."""
    def run(ctx, args):
        raise KeyError("no_such_key")
    monkeypatch.setitem(TOOLS._entries, "diff", replace(TOOLS.resolve("diff"), run=run))


def test_a_bug_in_a_tool_raises_out_of_step_in_strict_mode(env, monkeypatch):
    monkeypatch.setenv(bugs.STRICT_ENV, "1")
    _broken_diff_tool(monkeypatch)
    env.reset()
    with pytest.raises(InternalError, match="KeyError") as caught:
        env.step(call("diff"))
    assert caught.value.where == "env.step" and isinstance(caught.value.__cause__, KeyError)


def test_a_bug_in_a_tool_ends_the_episode_as_an_excluded_internal_error(env, monkeypatch, tiny_task):
    monkeypatch.setenv(bugs.STRICT_ENV, "0")
    _broken_diff_tool(monkeypatch)
    env.reset()
    env.step(call("edit", path="calc/ops.py", old="high - 1", new="high"))
    obs, reward, term, trunc, info = env.step(call("diff"))
    assert (term, trunc) == (False, True) and math.isnan(reward) and info["exclude"] is True
    assert info["internal_error"]["where"] == "env.step" and "KeyError" in info["internal_error"]["message"]
    assert info["eval"] == {"status": "internal_error", "error": info["internal_error"]}
    assert info["error"] == "internal_error" and "reward_components" not in info
    assert "internal error of repogym" in obs and "the episode ends" in obs
    record = EvalRecord.from_dict(info["eval"], instance_id=info["task_id"])
    assert record.status is Status.INTERNAL_ERROR and excluded(record.status, reward)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(call("bash", command="echo hi"))
    env.reset()  # and the environment goes on: a fresh episode from the base
    obs, *_ = env.step(call("bash", command="git status --short"))
    assert obs.startswith("[no output")
    env.step(call("apply_patch", patch=tiny_task.patch))
    assert env.step(call("submit"))[1] == 1.0


def test_a_grading_bug_is_an_internal_error_not_a_zero(env, monkeypatch):
    def grade(*args, **kwargs):
        raise KeyError("fail_to_pass")
    monkeypatch.setattr(repo_env, "grade", grade)
    env.reset()
    with pytest.raises(InternalError, match="KeyError"):  # strict, as the suite runs
        env.step(call("submit"))
    monkeypatch.setenv(bugs.STRICT_ENV, "0")
    env.reset()
    obs, reward, term, trunc, info = env.step(call("submit"))
    assert term and math.isnan(reward) and info["exclude"] is True and "reward_components" not in info
    assert info["eval"]["status"] is Status.INTERNAL_ERROR and info["internal_error"]["where"] == "env.grade"
    assert info["eval"]["error"] == info["internal_error"] and "evaluation: internal_error" in obs


def test_an_analysis_bug_excludes_the_episode_only_when_the_reward_needs_the_analysis(backend, tiny_task, monkeypatch):
    def analyze(*args, **kwargs):
        raise KeyError("changed")
    monkeypatch.setattr(repo_env, "analyze_sandbox", analyze)
    monkeypatch.setenv(bugs.STRICT_ENV, "0")
    for reward_config, needs in (("default", False), ("process", True)):
        environment = RepoTaskEnv(task=tiny_task, sandbox=backend, config=EnvConfig(max_turns=5, reward=reward_config))
        try:
            environment.reset()
            environment.step(call("apply_patch", patch=tiny_task.patch))
            obs, reward, term, trunc, info = environment.step(call("submit"))
            assert info["analysis"] == {"error": "KeyError: 'changed'"}
            if needs:  # a reward computed as if the diff had no analysis would be wrong: none at all
                assert math.isnan(reward) and info["exclude"] and info["eval"]["status"] == "internal_error"
                assert info["internal_error"]["where"] == "env.analysis"
                assert info["eval"]["tests"]["tests/test_hidden.py::test_clamp_above"] == "passed"  # graded all the same
            else:
                assert reward == 1.0 and info["eval"]["status"] == "resolved" and "exclude" not in info
        finally:
            environment.close()


def test_step_info_declares_every_key_reset_and_step_write(env, tiny_task):
    declared = set(StepInfo.__annotations__)
    obs, info = env.reset()
    seen = set(info)
    for action in (call("bash", command="echo hi"), call("view", path="calc/ops.py"), call("search", pattern="def"),
                   call("edit", path="calc/ops.py", old="high - 1", new="high"), call("run_tests"),
                   call("inspect_diff"), call("create", path="x.py", content="X = 1\n"), "not a call",
                   call("submit")):
        *_, info = env.step(action)
        seen |= set(info)
    assert seen <= declared, seen - declared
    assert {"eval", "analysis", "reward_components", "well_formed_calls", "usage", "turn"} <= seen
