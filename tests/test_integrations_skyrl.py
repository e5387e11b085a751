"""The SkyRL-Gym adapter, through skyrl_gym's own registry and make, on the local sandbox and the builtin suite."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.tasks.suites import find_task
from tests.conftest import require_backend

pytestmark = pytest.mark.integrations
skyrl_gym = pytest.importorskip("skyrl_gym")

from repogym.integrations import skyrl as adapter  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "skyrl.md"
TASK = "repogym__tablekit-center-odd-padding"


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


@pytest.fixture
def make():
    require_backend("local")
    adapter.register()
    made = []

    def _make(task_id=TASK, max_turns=10, **config):
        env = skyrl_gym.make("repogym", env_config={"sandbox": "local", **config},
                             extras={"task_id": task_id, "max_turns": max_turns})
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close()


def test_the_documented_example_runs_and_the_gold_patch_earns_one(capsys):
    require_backend("local")
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    out = namespace["out"]
    assert (out["reward"], out["done"], out["observations"]) == (1.0, True, [])
    assert out["metadata"]["status"] == "resolved" and out["metadata"]["eval"]["status"] == "resolved"
    assert out["metadata"]["reward_components"] == {"tests": 1.0}
    assert "evaluation: resolved" in out["metadata"]["observation"]
    assert "patch applied" in capsys.readouterr().out  # the apply_patch observation came back as a message


def test_registration_is_skyrl_gyms_and_idempotent():
    assert adapter.register() == "repogym" == adapter.register()
    assert skyrl_gym.spec("repogym").entry_point == "repogym.integrations.skyrl:RepogymSkyRLEnv"
    from skyrl_gym.envs.base_text_env import BaseTextEnv
    assert issubclass(adapter.RepogymSkyRLEnv, BaseTextEnv)


def test_init_keeps_system_messages_and_gives_repogyms_first_observation(make):
    env = make()
    task = find_task(TASK, "builtin")
    messages, info = env.init([{"role": "system", "content": "be brief"},
                               {"role": "user", "content": "placeholder from the dataset"}])
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert [m["role"] for m in messages] == ["system", "user"]
    assert task.problem_statement.strip() in messages[1]["content"] and "submit" in messages[1]["content"]
    assert "placeholder" not in messages[1]["content"]
    assert info["task_id"] == TASK and info["max_turns"] == 10


def test_a_bad_action_is_an_error_observation_and_the_episode_goes_on(make):
    env = make()
    env.init([])
    out = env.step("I think I should look around first.")  # no tool call at all
    assert out["done"] is False and out["reward"] == 0.0
    assert out["observations"][0]["role"] == "user"
    assert out["observations"][0]["content"].startswith("error (parse_error)")
    assert out["metadata"]["error"] == "parse_error"
    out = env.step(call("view", path="../../etc/passwd"))
    assert out["done"] is False and out["observations"][0]["content"].startswith("error (")
    out = env.step('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>')
    assert out["done"] is False and "tablekit" in out["observations"][0]["content"]
    assert out["metadata"]["tool"] == "bash" and out["metadata"]["exit_code"] == 0
    out = env.step(call("submit"))
    assert (out["done"], out["reward"], out["metadata"]["status"]) == (True, 0.0, "unresolved")
    assert env.get_metrics() == {"turns": 4, "resolved": 0.0, "reward": 0.0}


def test_an_empty_submit_earns_zero(make):
    env = make()
    env.init(None)
    out = env.step(call("submit"))
    assert (out["done"], out["reward"], out["observations"]) == (True, 0.0, [])
    assert out["metadata"]["status"] == "unresolved" and out["metadata"]["reward_components"] == {"tests": 0.0}


def test_skyrls_max_turns_ends_the_episode_and_grades_the_diff(make):
    env = make(max_turns=2)
    task = find_task(TASK, "builtin")
    env.init([])
    out = env.step(call("bash", command="true"))
    assert out["done"] is False
    out = env.step(call("apply_patch", patch=task.patch))
    assert out["done"] is True and out["reward"] == 1.0  # truncated at the limit, the diff graded as it was
    assert out["metadata"]["truncation"]["reason"] == "turn_limit"


def test_the_task_id_can_come_from_extra_info_or_the_env_config():
    config = adapter.SkyRLConfig.from_mapping({"task_id": "b", "sandbox": "local"})
    assert adapter.task_id_of({"task_id": "a"}, config) == "a"
    assert adapter.task_id_of({"extra_info": {"task_id": "c"}}, config) == "c"
    assert adapter.task_id_of({}, config) == "b"
    assert config.env == {"sandbox": "local"}
    with pytest.raises(ConfigError, match="task_id: expected a string"):
        adapter.task_id_of({"task_id": 3}, config)


def test_bad_config_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown keys \\['max_turn'\\]"):
        adapter.SkyRLConfig.from_mapping({"max_turn": 3})
    with pytest.raises(ConfigError, match="expected a mapping"):
        adapter.SkyRLConfig.from_mapping(["sandbox"])
    from omegaconf import OmegaConf  # SkyRL hands its config over as a DictConfig
    assert adapter.SkyRLConfig.from_mapping(OmegaConf.create({"suite": "builtin", "reward": "shaped"})).env == {
        "reward": "shaped"}
    with pytest.raises(ConfigError, match="max_turns must be >= 1"):
        adapter.env_class()(env_config={"sandbox": "local"}, extras={"task_id": TASK, "max_turns": 0})


def test_dataset_rows_name_the_env_and_the_task():
    rows = adapter.dataset_rows("builtin", [TASK])
    assert rows == [{"prompt": [{"role": "user", "content": find_task(TASK, "builtin").problem_statement}],
                     "env_class": "repogym", "task_id": TASK, "data_source": "repogym/builtin"}]
    with pytest.raises(ConfigError, match="not in suite"):
        adapter.dataset_rows("builtin", ["nope"])


def test_an_infrastructure_failure_keeps_nan_unless_infra_reward_is_set(make, monkeypatch):
    nan_step = (lambda action: ("[infrastructure error in sandbox.run: gone; the episode ends]", float("nan"),
                                False, True, {"eval": {"status": "infra_error"}, "exclude": True}))
    env = make()
    env.init([])
    monkeypatch.setattr(env.env, "step", nan_step)
    out = env.step(call("bash", command="ls"))
    assert out["done"] and math.isnan(out["reward"]) and out["metadata"]["exclude"] is True
    assert out["metadata"]["status"] == "infra_error" and "reward" not in env.get_metrics()
    env = make(infra_reward=0.0)
    env.init([])
    monkeypatch.setattr(env.env, "step", nan_step)
    assert env.step(call("bash", command="ls"))["reward"] == 0.0


def test_a_bug_the_env_caught_ends_the_episode_excluded_like_an_infrastructure_failure(make, monkeypatch):
    buggy_step = (lambda action: ("error (internal_error): the tool failed unexpectedly (KeyError: 'x')", 0.0,
                                  False, False, {"error": "internal_error",
                                                 "internal_error": {"where": "env.step", "message": "KeyError: 'x'"}}))
    env = make()
    env.init([])
    monkeypatch.setattr(env.env, "step", buggy_step)
    out = env.step(call("bash", command="ls"))
    assert out["done"] and math.isnan(out["reward"]) and out["metadata"]["exclude"] is True
    assert out["metadata"]["status"] == "internal_error" and "reward" not in env.get_metrics()
    assert out["metadata"]["eval"]["error"] == {"where": "env.step", "message": "KeyError: 'x'"}
    env = make(infra_reward=0.0)
    env.init([])
    monkeypatch.setattr(env.env, "step", buggy_step)
    assert env.step(call("bash", command="ls"))["reward"] == 0.0


def test_without_skyrl_gym_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(adapter, "_CLASS", None)
    for name in [m for m in sys.modules if m == "skyrl_gym" or m.startswith("skyrl_gym.")]:
        monkeypatch.setitem(sys.modules, name, None)  # import of a None entry raises ImportError
    with pytest.raises(ImportError, match=re.escape('pip install "repogym[integrations]"')):
        adapter.env_class()
    with pytest.raises(ImportError, match="repogym\\[integrations\\]"):
        adapter.register()
