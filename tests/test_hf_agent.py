"""The hf agent in a real environment: its token record covers exactly what the model generated."""

from __future__ import annotations

import gymnasium as gym
import pytest

from repogym.agents.hf import HFAgent, HFAgentConfig, HFEngine
from repogym.agents.policy import SamplingParams
from repogym.agents.rollout import run_episode
from repogym.agents.trajectory import read_trajectory
from repogym.trainer.tiny import TinyModelConfig, build_tiny_model, build_tokenizer

TINY = TinyModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                       num_kv_heads=1, max_position_embeddings=8192)


class RecordingEngine:
    """An engine that keeps every completion it returned (to compare against the agent's record)."""

    def __init__(self, engine):
        self.engine, self.completions = engine, []

    @property
    def version(self):
        return self.engine.version

    @property
    def max_model_len(self):
        return self.engine.max_model_len

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        self.completions += out
        return out

    def update_weights(self, state_dict, version):
        self.engine.update_weights(state_dict, version)


@pytest.fixture(scope="module")
def tiny_lm():
    corpus = ['<tool_call>{"name": "submit", "arguments": {}}</tool_call>', "def clamp(x, low, high):",
              "error (parse_error): invalid JSON"] * 5
    tokenizer = build_tokenizer(corpus, TINY.vocab_size)
    return tokenizer, build_tiny_model(tokenizer, TINY)


@pytest.mark.slow
def test_loss_mask_of_a_real_multi_turn_episode_covers_exactly_the_generated_tokens(tiny_lm, tiny_task, tmp_path):
    tokenizer, model = tiny_lm
    engine = RecordingEngine(HFEngine(model, device="cpu"))
    agent = HFAgent(engine, tokenizer, HFAgentConfig(temperature=1.0, max_new_tokens=24, seed=3, tools=["edit", "submit"]))
    env = gym.make("repogym/RepoTask-v0", task=tiny_task, sandbox="local", max_turns=3).unwrapped
    try:
        result = run_episode(env, agent, seed=5, trajectory=tmp_path / "ep.jsonl")
    finally:
        env.close()
    # A random model's text is no tool call: every turn is an error observation, so 3 turns are played.
    assert result.turns == 3 and len(engine.completions) == 3
    assert all(c.ids for c in engine.completions)
    tokens = read_trajectory(tmp_path / "ep.jsonl").tokens()
    assert tokens.ids == agent.ids and tokens.mask == agent.mask
    generated = [i for i, m in zip(tokens.ids, tokens.mask) if m]
    assert generated == [t for c in engine.completions for t in c.ids]
    assert [lp for lp, m in zip(tokens.logprobs, tokens.mask) if m] == [lp for c in engine.completions
                                                                        for lp in c.logprobs]
    # Mask-0 spans are what the env and template said: the problem statement and each tool output.
    spans, current = [], []
    for i, m in zip(tokens.ids, tokens.mask):
        if m:
            if current:
                spans.append(tokenizer.decode(current))
            current = []
        else:
            current.append(i)
    if current:
        spans.append(tokenizer.decode(current))
    assert tiny_task.problem_statement in spans[0]
    steps = read_trajectory(tmp_path / "ep.jsonl").steps
    for span, step in zip(spans[1:], steps):
        assert step["observation"].splitlines()[0] in span
    # The mask-1 spans are contiguous runs, one per turn, each exactly one completion.
    runs = sum(1 for a, b in zip([0] + tokens.mask, tokens.mask) if b and not a)
    assert runs == 3 and tokens.versions == [0, 0, 0]


def test_seeded_requests_reproduce_and_logprobs_are_those_of_the_tempered_distribution(tiny_lm):
    import torch

    tokenizer, model = tiny_lm
    engine = HFEngine(model, device="cpu")
    params = SamplingParams(temperature=0.7, max_new_tokens=6, seed=11)
    prompt = tokenizer.encode("def clamp(x, low, high):")
    first, again = engine.generate([prompt], params)[0], engine.generate([prompt], params)[0]
    assert first.ids == again.ids and first.logprobs == pytest.approx(again.logprobs)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + first.ids])).logits[0, len(prompt) - 1:-1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(first.ids)[:, None])[:, 0]
    assert first.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


class PushingEngine(RecordingEngine):
    """The race: the learner's weight push lands after a generation, before the agent reads the version."""

    def generate(self, prompts, params):
        out = super().generate(prompts, params)
        self.engine.update_weights(self.engine.model.state_dict(), self.engine.version + 1)
        return out


def test_the_recorded_version_is_the_one_that_generated_the_tokens(tiny_lm):
    tokenizer, model = tiny_lm
    engine = PushingEngine(HFEngine(model, device="cpu"))
    agent = HFAgent(engine, tokenizer, HFAgentConfig(temperature=1.0, max_new_tokens=4, seed=3, tools=["submit"]))
    agent.reset("Fix the bug.", {"seed": 1})
    for _ in range(3):
        agent.act("an observation", {})
    assert engine.version == 3  # three pushes landed, one after each generation
    assert [t.version for t in agent.traces] == [0, 1, 2]  # each turn is labelled with the weights that made it
    assert [c.version for c in engine.completions] == [0, 1, 2]
