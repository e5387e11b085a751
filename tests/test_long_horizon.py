"""Long episodes: usage and budgets in the env, context policies whose every prompt can be rebuilt from the
trajectory, and training sequences that hold each turn in the context it was generated in."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from repogym.agents.context import (ContextOverflow, FullPolicy, SummaryPolicy, WindowPolicy, history_from_trajectory,
                            make_context_policy, rebuild)
from repogym.agents.hf import HFAgent, HFAgentConfig, HFEngine
from repogym.agents.llm import LLMAgent, LLMConfig
from repogym.agents.rollout import run_episode
from repogym.agents.trajectory import TokenSequence, read_trajectory
from repogym.envs.core.errors import ConfigError
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from tests.test_hf_agent import RecordingEngine, tiny_lm  # noqa: F401 (a fixture)
from tests.test_llm_agent import FakeServer, text_reply, tool_call_reply
from repogym.trainer.algorithms.common import Sample
from repogym.trainer.algorithms.grpo import GRPO, GRPOConfig
from repogym.trainer.learner import micro_batches


def conversation(turns: int, output_chars: int = 2000) -> list[dict]:
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "the task"}]
    for t in range(1, turns + 1):
        history.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{t}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"step {t}"})}}]})
        history.append({"role": "tool", "tool_call_id": f"c{t}", "content": f"out{t} " + "x" * output_chars})
    return history


# -- policies -------------------------------------------------------------------------------------------

def test_window_keeps_task_and_actions_and_cuts_old_outputs_in_steps():
    policy = WindowPolicy(keep_last=3, head_chars=50, tail_chars=20)
    for turns, elided in [(2, 0), (5, 0), (6, 3), (8, 3), (9, 6)]:
        view = policy.view(conversation(turns))
        assert view.record["elided_turns"] == elided
        msgs = view.messages
        assert msgs[:2] == conversation(turns)[:2] and len(msgs) == len(conversation(turns))
        for t in range(1, turns + 1):
            action, output = msgs[2 * t], msgs[2 * t + 1]["content"]
            assert action == conversation(turns)[2 * t]  # actions are never cut
            if t <= elided:
                assert output.startswith(f"out{t} ") and f"characters of the output of turn {t} elided" in output
                assert len(output) < 200
            else:
                assert output == conversation(turns)[2 * t + 1]["content"]
        assert rebuild(conversation(turns), view.record) == msgs


def test_summary_replaces_old_turns_once_per_move_and_lists_every_action():
    calls = []

    def summarize(messages):
        calls.append(messages)
        return f"summary {len(calls)}"

    policy = SummaryPolicy(keep_last=2, prompt="SUMMARISE")
    views = [policy.view(conversation(t), summarize) for t in range(1, 8)]
    assert len(calls) == 2  # the window moved at 4 turns (2 summarised) and at 6 turns (4 summarised)
    assert calls[0][-1] == {"role": "user", "content": "SUMMARISE"}
    assert "summary 1" in calls[1][2]["content"]  # the second summary builds on the first
    last = views[-1]
    assert last.record["summarised_turns"] == 4 and last.record["summary"] == "summary 2"
    note = last.messages[2]["content"]
    assert all(f'{t}. bash {{"command": "step {t}"}}' in note for t in range(1, 5))  # no action dropped silently
    assert last.messages[3:] == conversation(7)[2 + 8:]
    assert rebuild(conversation(7), last.record) == last.messages
    assert [v.record["summarised_turns"] for v in views] == [0, 0, 0, 2, 2, 4, 4]


def test_full_errors_clearly_over_the_context_and_names_are_checked():
    policy = FullPolicy(max_tokens=100, count_tokens=lambda msgs: sum(len(str(m.get("content"))) for m in msgs))
    assert policy.view(conversation(0)).messages == conversation(0)
    with pytest.raises(ContextOverflow, match="over the model's context of 100"):
        policy.view(conversation(1))
    with pytest.raises(ConfigError, match="expected one of"):
        make_context_policy("sliding")
    assert make_context_policy({"name": "window", "keep_last": 2}).keep_last == 2


# -- the env: usage and budgets ---------------------------------------------------------------------------

class CharTokenizer:
    """One token per 4 characters: enough to count with."""

    def encode(self, text, add_special_tokens=False):
        return list(range(0, len(text), 4))


def test_usage_is_reported_every_step_with_running_totals(tiny_task):
    env = RepoTaskEnv(task=tiny_task, sandbox="local", config=EnvConfig(tokenizer=CharTokenizer(), eval_pool_size=0))
    try:
        obs, info = env.reset()
        assert info["usage"]["observation_chars"] == len(obs) and info["usage"]["observation_tokens"] == len(
            range(0, len(obs), 4))
        total = len(obs)
        for command in ("echo hello", "seq 1 100"):
            obs, *_, info = env.step(json.dumps({"name": "bash", "arguments": {"command": command}}))
            total += len(obs)
            assert info["usage"]["observation_chars"] == len(obs)
            assert info["usage"]["episode"]["observation_chars"] == total and info["usage"]["episode"]["turns"] == info["turn"]
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("budget", ["tokens", "wall"])
def test_budgets_truncate_with_the_reason(tiny_task, budget):
    options = {"max_observation_tokens": 600} if budget == "tokens" else {"max_wall_s": 1.5}
    env = RepoTaskEnv(task=tiny_task, sandbox="local", config=EnvConfig(tokenizer=CharTokenizer(), eval_pool_size=0,
                                                                         **options))
    try:
        env.reset()
        for turn in range(1, 30):
            command = "seq 1 200" if budget == "tokens" else "sleep 0.4"
            obs, reward, term, trunc, info = env.step(json.dumps({"name": "bash", "arguments": {"command": command}}))
            if trunc:
                break
        assert trunc and not term and turn < 29
        reason = {"tokens": "observation_token_budget", "wall": "wall_time_budget"}[budget]
        assert info["truncation"]["reason"] == reason and info["truncation"]["used"] >= info["truncation"]["limit"]
        assert info["eval"]["status"] == "unresolved" and "budget" in obs  # graded, like the turn limit
    finally:
        env.close()
    with pytest.raises(ConfigError, match="needs a tokenizer"):
        EnvConfig(max_observation_tokens=10)


# -- agents: the prompt of every turn is rebuilt from the trajectory ---------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("policy", ["full", {"name": "window", "keep_last": 2, "head_chars": 40, "tail_chars": 10},
                                    {"name": "summary", "keep_last": 2}])
def test_llm_prompts_equal_what_the_trajectory_rebuilds(tiny_task, tmp_path, policy):
    server = FakeServer()
    replies = [tool_call_reply("bash", {"command": f"seq 1 {50 * t}"}, call_id=f"c{t}") for t in range(1, 8)]
    # The summary policy asks for summaries (plain text) when the window moves: at turns 5 and 7.
    server.script = replies[:4] + [text_reply("sum A")] + replies[4:6] + [text_reply("sum B")] + replies[6:]
    agent = LLMAgent(LLMConfig(base_url=server.base_url, model="m", api_key="k", context=policy))
    env = RepoTaskEnv(task=tiny_task, sandbox="local", max_turns=7, config=EnvConfig(eval_pool_size=0))
    try:
        run_episode(env, agent, trajectory=tmp_path / "t.jsonl")
    finally:
        env.close()
        server.close()
    trajectory = read_trajectory(tmp_path / "t.jsonl")
    fed = [r["messages"] for r in server.requests if r.get("tools")]  # the action requests, in turn order
    assert len(fed) == len(trajectory.steps) == 7
    history = history_from_trajectory(trajectory.header, trajectory.steps, agent.config.system_prompt)
    for t, step in enumerate(trajectory.steps):
        record = step["agent"]["context"]
        assert rebuild(history[:2 + 2 * t], record) == fed[t], f"turn {t + 1}"
    if policy != "full":
        assert trajectory.steps[-1]["agent"]["context"].get("elided_turns", 0) + \
            trajectory.steps[-1]["agent"]["context"].get("summarised_turns", 0) > 0


class PromptRecorder(RecordingEngine):
    def __init__(self, engine):
        super().__init__(engine)
        self.prompts = []

    def generate(self, prompts, params):
        self.prompts += [list(p) for p in prompts]
        return super().generate(prompts, params)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["full", {"name": "window", "keep_last": 2, "head_chars": 30, "tail_chars": 10}])
def test_hf_tokens_fed_equal_the_trajectory_and_split_into_exact_training_sequences(tiny_lm, tiny_task, tmp_path, policy):
    tokenizer, model = tiny_lm
    engine = PromptRecorder(HFEngine(model, device="cpu"))
    agent = HFAgent(engine, tokenizer, HFAgentConfig(max_new_tokens=12, seed=1, tools=["bash"], context=policy))
    env = gym.make("repogym/RepoTask-v0", task=tiny_task, sandbox="local", max_turns=7).unwrapped
    try:
        run_episode(env, agent, seed=2, trajectory=tmp_path / "ep.jsonl")
    finally:
        env.close()
    trajectory = read_trajectory(tmp_path / "ep.jsonl")
    tokens = trajectory.tokens()
    contexts = tokens.contexts()
    assert len(contexts) == (1 if policy == "full" else 3)  # the window moved at turns 5 and 7
    # Each turn's prompt is the start of its context; the completion follows it there.
    prompts, completions = iter(engine.prompts), iter(engine.completions)
    for seq in contexts:
        cursor = 0
        while cursor < len(seq.ids):
            prompt, completion = next(prompts), next(completions)
            assert seq.ids[:len(prompt)] == prompt and seq.ids[len(prompt):len(prompt) + len(completion.ids)] == completion.ids
            assert seq.mask[len(prompt):len(prompt) + len(completion.ids)] == [1] * len(completion.ids)
            cursor = len(prompt) + len(completion.ids)
        generated = [i for i, m in zip(seq.ids, seq.mask) if m]
        assert sum(seq.mask) == len(generated)
    assert next(prompts, None) is None
    assert sum(sum(q.mask) for q in contexts) == sum(len(c.ids) for c in engine.completions)  # each once
    # And the prompts are rebuilt by rendering the trajectory's history under each turn's record.
    history = [{"role": "system", "content": agent.config.system_prompt},
               {"role": "user", "content": trajectory.header["observation"]}]
    for t, step in enumerate(trajectory.steps):
        assert agent.render(rebuild(history, step["agent"]["context"])) == engine.prompts[t]
        message = {**step["agent"]["message"], "ids": step["agent"]["tokens"]["completion"]}
        history += [message, {"role": "tool", "content": step["observation"]}]


# -- training ----------------------------------------------------------------------------------------------

def test_a_split_episode_counts_once_in_grpo_and_all_its_sequences_share_the_advantage():
    def sample(episode, reward):
        return Sample([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], reward=reward, meta={"episode": episode})

    group = [sample(0, 1.0), sample(0, 1.0), sample(0, 1.0), sample(1, 0.0)]  # episode 0 became 3 sequences
    out = GRPO(GRPOConfig(normalize_std=False)).prepare([group])
    assert [s.advantage for s in out] == [0.5, 0.5, 0.5, -0.5]  # mean over 2 episodes, not 4 sequences


def test_token_sequence_contexts_split_at_each_rebuilt_prompt():
    seq = TokenSequence()
    seq.add_turn([1, 2], [3], [-0.1], 0)
    seq.add_turn([4], [5, 6], [-0.2, -0.3], 0)
    seq.add_turn([1, 2, 9], [7], [-0.4], 1, new_context=True)
    first, second = seq.contexts()
    assert (first.ids, first.mask) == ([1, 2, 3, 4, 5, 6], [0, 0, 1, 0, 1, 1])
    assert (second.ids, second.mask, second.logprobs) == ([1, 2, 9, 7], [0, 0, 0, 1], [0.0, 0.0, 0.0, -0.4])


def test_micro_batches_stay_under_the_token_budget():
    samples = [Sample([0] * n, [1] * n, [0.0] * n) for n in (100, 900, 300, 250, 50, 1200)]
    chunks = micro_batches(samples, size=4, max_tokens=1000)
    assert sorted(len(s.ids) for c in chunks for s in c) == sorted(len(s.ids) for s in samples)
    for chunk in chunks:
        assert len(chunk) * max(len(s.ids) for s in chunk) <= 1000 or len(chunk) == 1
    assert [len(c) for c in micro_batches(samples, size=4)] == [4, 2]


def test_every_shipped_config_loads_with_a_buildable_context_policy():
    from pathlib import Path

    from repogym.trainer.config import load_config
    configs = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        config = load_config(path)
        assert make_context_policy(config.agent.context).name in ("full", "window", "summary"), path
