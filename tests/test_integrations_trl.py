"""TRL's GRPOTrainer driving repogym episodes through its ``rollout_func`` hook (TRL from .venv-integrations)."""

from __future__ import annotations

import math

import pytest

from repogym.agents.rollout import EpisodeResult
from repogym.agents.trajectory import TokenSequence, read_trajectory
from repogym.envs.core.errors import ConfigError
from repogym.envs.repo_env import EnvConfig
from repogym.envs.core.status import Status
from repogym.envs.tasks import load_suite
from repogym.integrations.trl import RepoGymRollout, TRLRolloutConfig, make_grpo_trainer, repogym_reward, task_dataset
from repogym.trainer.tiny import TinyModelConfig, build_tiny_model, build_tokenizer
from tests.conftest import require_backend

pytestmark = pytest.mark.integrations

TINY = TinyModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                       num_kv_heads=1, max_position_embeddings=8192)


@pytest.fixture(scope="module")
def tiny_lm():
    corpus = [t.problem_statement for t in load_suite("builtin")[:4]]
    corpus += ['<tool_call>{"name": "submit", "arguments": {}}</tool_call>', "error (parse_error): invalid JSON"] * 5
    tokenizer = build_tokenizer(corpus, TINY.vocab_size)
    return tokenizer, build_tiny_model(tokenizer, TINY)


def test_an_episode_maps_to_trl_fields_with_observations_masked_and_infra_failures_unscored(tiny_lm):
    tokenizer, _ = tiny_lm
    rollout = RepoGymRollout(tokenizer)
    seq = TokenSequence()
    seq.add_turn([1, 2, 3], [4, 5], [-0.5, -0.25], 0)
    seq.add_turn([6, 7], [8], [-1.0], 0)
    done = EpisodeResult("t", "trl", "resolved", 1.0, 2, 0.1, tokens=seq)
    prompt, completion, logprobs, mask, reward, status, task, turns = rollout._row(done)
    assert (prompt, completion, mask) == ([1, 2, 3], [4, 5, 6, 7, 8], [1, 1, 0, 0, 1])
    assert logprobs == [-0.5, -0.25, 0.0, 0.0, -1.0] and (reward, status, task, turns) == (1.0, "resolved", "t", 2)
    # An infrastructure failure before any turn: no reward (TRL's None, never 0) and nothing to train on.
    failed = EpisodeResult("t", "trl", Status.INFRA_ERROR, float("nan"), 0, 0.1)
    prompt, completion, _, mask, reward, status, *_ = rollout._row(failed)
    assert reward is None and status == "infra_error" and prompt and completion == [tokenizer.eos_token_id]
    assert mask == [0]
    # A bug of repogym's that ended the episode: excluded like an infrastructure failure, never a 0.
    buggy = EpisodeResult("t", "trl", Status.INTERNAL_ERROR, float("nan"), 2, 0.1, tokens=seq)
    *_, mask, reward, status, _, _ = rollout._row(buggy)
    assert reward is None and status == "internal_error"
    assert repogym_reward(completions=["a", "b"], repogym_reward=[1.0, None]) == [1.0, None]
    with pytest.raises(ConfigError, match="rollout_func"):
        repogym_reward(completions=["a"])


def test_a_sandbox_that_fails_to_start_is_an_unscored_row_not_a_crash(tiny_lm, monkeypatch):
    from types import SimpleNamespace

    import repogym.integrations.trl as trl_module
    from repogym.envs.core.errors import InfraError

    tokenizer, model = tiny_lm

    def broken(*args, **kwargs):
        raise InfraError("sandbox.local", "bwrap could not start")

    monkeypatch.setattr(trl_module, "run_episode", broken)
    accelerator = SimpleNamespace(unwrap_model=lambda m: m, device="cpu")
    trainer = SimpleNamespace(model=model.train(), accelerator=accelerator, temperature=1.0,
                              state=SimpleNamespace(global_step=0))
    task = load_suite("builtin")[0].instance_id
    out = RepoGymRollout(tokenizer)([task, task], trainer)
    assert out["repogym_reward"] == [None, None] and out["repogym_status"] == ["infra_error"] * 2
    assert out["env_mask"] == [[0], [0]] and out["repogym_task_id"] == [task, task]
    assert model.training  # the trainer's mode is given back


def test_the_dataset_holds_task_ids_and_rejects_unknown_ones():
    ids = [t.instance_id for t in load_suite("builtin")[:2]]
    assert task_dataset(ids)["prompt"] == ids
    with pytest.raises(ConfigError, match="no-such-task"):
        task_dataset(["no-such-task"])
    with pytest.raises(ConfigError, match="task id"):
        RepoGymRollout(None)([{"role": "user", "content": 3}], trainer=None)


def generated_length(completions, **kwargs):
    """A reward the random model's groups differ in (it never resolves a task, so repogym's reward is 0 for all
    and every GRPO advantage would be 0): it makes the update visible, nothing more."""
    return [len(str(c)) / 1000 for c in completions]


@pytest.mark.slow
def test_grpo_runs_two_steps_over_real_repogym_episodes(tiny_lm, tmp_path):
    require_backend("local")
    import torch

    tokenizer, model = tiny_lm
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    tasks = [t.instance_id for t in load_suite("builtin")[:2]]
    trainer = make_grpo_trainer(
        model, tokenizer, tasks, sandbox="local", reward_funcs=[generated_length],
        rollout=TRLRolloutConfig(max_turns=2, max_new_tokens=16, tools=["bash", "submit"],
                                 env=EnvConfig(observation_limit=2000, analyze_final_diff=False),
                                 trajectory_dir=str(tmp_path / "trajectories")),
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, num_generations=2,
        learning_rate=1e-2, seed=0)
    trainer.train()

    assert trainer.state.global_step == 2
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    episodes = list(trainer.rollout_func.episodes)
    # One episode per (prompt, generation): 2 steps x 1 task x 2 generations, each a full graded episode.
    assert len(episodes) == 4 and {e.task_id for e in episodes} <= set(tasks)
    files = sorted((tmp_path / "trajectories").glob("*.jsonl"))
    assert len(files) == 4
    for episode, path in zip(episodes, files):
        trajectory = read_trajectory(path)
        assert trajectory.header["task_id"] == episode.task_id and len(trajectory.steps) == episode.turns == 2
        # The hidden tests ran in a grading sandbox: the task's pass-to-pass tests passed there, its fail-to-pass
        # ones (nothing was fixed) did not.
        record = trajectory.end["eval"]
        assert record["pass_to_pass"]["passed"] == record["pass_to_pass"]["total"] > 0
        assert record["fail_to_pass"]["passed"] == 0 and episode.status == Status.UNRESOLVED
        assert trajectory.end["reward"] == episode.reward == 0.0
        assert all(step["observation"].startswith("error (") or step["info"].get("tool") for step in trajectory.steps)
    logs = [entry for entry in trainer.state.log_history if "rewards/repogym_reward/mean" in entry]
    assert len(logs) == 2
    for log, pair in zip(logs, (episodes[:2], episodes[2:])):
        assert log["rewards/repogym_reward/mean"] == 0.0 and not math.isnan(log["loss"])
        # TRL counts a completion's length through env_mask: only the tokens the model generated, not the
        # observations between its turns.
        generated = [sum(e.tokens.mask) for e in pair]
        assert log["completions/mean_length"] == pytest.approx(sum(generated) / 2)
        assert all(len(e.tokens.ids) - e.tokens.mask.index(1) > sum(e.tokens.mask) for e in pair)
