"""mini-swe-agent (the real package) playing repogym episodes through the proxy; its tokens train the learner."""

from __future__ import annotations

import json

import pytest

from repogym.agents.hf import HFEngine
from repogym.agents.policy import Completion
from repogym.agents.trajectory import read_trajectory
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.core.status import Status, excluded
from repogym.envs.tasks import load_suite
from repogym.envs.tasks.suites import find_task
from repogym.integrations.mini_swe import MiniSweConfig, RepoGymEnvironment, run_mini_swe_episode
from repogym.integrations.proxy import ChatProxy, ProxyConfig
from repogym.trainer.algorithms import make_algorithm
from repogym.trainer.algorithms.common import Sample
from repogym.trainer.learner import Learner, LearnerConfig
from repogym.trainer.tiny import TinyModelConfig, build_tiny_model, build_tokenizer
from tests.conftest import require_backend

pytestmark = pytest.mark.integrations

TASK = "repogym__cfgparse-list-trailing-comma"
TINY = TinyModelConfig(vocab_size=600, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                       num_kv_heads=1, max_position_embeddings=16384)
ENV = EnvConfig(analyze_final_diff=False, observation_limit=4000)


@pytest.fixture(autouse=True)
def _no_model_retries(monkeypatch):
    # mini-swe-agent retries a failed model call 10 times with backoff; a test failure should show at once.
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")


@pytest.fixture(scope="module")
def tiny_lm():
    corpus = [t.problem_statement for t in load_suite("builtin")[:6]] + [find_task(TASK).patch]
    corpus += ['<tool_call>{"name": "bash", "arguments": {"command": "git apply"}}</tool_call>'] * 5
    tokenizer = build_tokenizer(corpus, TINY.vocab_size)
    return tokenizer, build_tiny_model(tokenizer, TINY)


def bash_call(command: str) -> str:
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


class ScriptedEngine:
    """Answers fixed texts through the proxy's engine seam, scored by the tiny model (real sampling logprobs of
    those tokens), and keeps every completion it returned."""

    def __init__(self, tokenizer, model, texts: list[str]):
        self.tokenizer, self.model, self.texts, self.version = tokenizer, model, list(texts), 3
        self.returned: list[list[int]] = []

    @property
    def max_model_len(self):
        return self.model.config.max_position_embeddings

    def generate(self, prompts, params):
        import torch

        ids = self.tokenizer.encode(self.texts.pop(0), add_special_tokens=False) + params.stop_token_ids
        with torch.no_grad():
            logp = torch.log_softmax(self.model(torch.tensor([prompts[0] + ids])).logits[0].float(), -1)
        logprobs = [logp[len(prompts[0]) - 1 + i, t].item() for i, t in enumerate(ids)]
        self.returned.append(ids)
        return [Completion(ids, logprobs, "stop", self.version)]

    def update_weights(self, state_dict, version):
        self.version = version


def check_tokens(result, returned: list[list[int]]):
    """Every generated token of the trajectory is what the engine returned, in order, and only those are masked in."""
    seq = result.tokens
    assert len(seq.ids) == len(seq.mask) == len(seq.logprobs)
    assert [i for i, m in zip(seq.ids, seq.mask) if m] == [t for ids in returned for t in ids]
    # Turn by turn: each turn's completion is exactly one engine answer.
    steps = result.trajectory.steps
    assert [s["agent"]["tokens"]["completion"] for s in steps] == returned
    return seq


def test_mini_swe_agent_resolves_a_task_through_the_proxy_and_its_tokens_rebuild_exactly(tiny_lm, tmp_path):
    require_backend("local")
    tokenizer, model = tiny_lm
    patch = find_task(TASK).patch
    texts = ["I will apply the fix.\n" + bash_call(f"git apply <<'REPOGYM_PATCH'\n{patch}REPOGYM_PATCH"),
             bash_call("git diff HEAD --stat"),
             "Done.\n" + bash_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    engine = ScriptedEngine(tokenizer, model, texts)
    with ChatProxy(engine, tokenizer, ProxyConfig(model_name="tiny")) as proxy:
        result = run_mini_swe_episode(proxy, TASK, config=MiniSweConfig(max_turns=6, env=ENV, max_tokens=64,
                                                                        trajectory_dir=str(tmp_path)))
    assert result.status == Status.RESOLVED and result.reward == 1.0 and result.turns == 3
    assert result.trajectory.header["harness"]["exit_status"] == "Submitted"
    seq = check_tokens(result, engine.returned)
    # mini-swe-agent re-sent its history each call, and every prompt extended the last one: one segment.
    assert seq.starts == [0] and seq.versions == [3, 3, 3]
    assert "cfgparse" in result.trajectory.steps[1]["observation"]  # git diff saw the applied patch
    assert result.trajectory.steps[-1]["terminated"] and result.trajectory.steps[-1]["reward"] == 1.0
    written = read_trajectory(next(tmp_path.glob("*.jsonl")))
    assert written.status == Status.RESOLVED and written.tokens().ids == seq.ids

    # One learner step on the trajectory with the repogym algorithm entry points, beside a failed episode of the
    # random model through the same path (so the group's advantages are not all 0).
    with ChatProxy(HFEngine(model, "cpu"), tokenizer, ProxyConfig()) as proxy:
        failed = run_mini_swe_episode(proxy, TASK, config=MiniSweConfig(max_turns=4, env=ENV, max_tokens=12))
    assert failed.status == Status.UNRESOLVED and failed.reward == 0.0 and 1 <= failed.turns <= 4
    # Random text is no tool call: mini-swe-agent drops each such answer from its history, so no prompt extends the
    # last one and each call is a segment of its own (trained as its own sequence).
    assert failed.trajectory.header["harness"]["exit_status"] == "RepeatedFormatError"
    assert len(failed.tokens.contexts()) == failed.turns
    check_tokens(failed, [s["agent"]["tokens"]["completion"] for s in failed.trajectory.steps])
    samples = [Sample(q.ids, q.mask, q.logprobs, reward=episode.reward, meta={"episode": k, "part": j, "parts": len(parts)})
               for k, episode in enumerate((result, failed)) for parts in [episode.tokens.contexts()]
               for j, q in enumerate(parts)]
    algorithm = make_algorithm("grpo")
    learner = Learner(model, LearnerConfig(device="cpu", lr=1e-3, micro_batch_size=2), pad_id=tokenizer.pad_token_id)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    metrics = learner.train_step(algorithm.prepare([samples]), algorithm)
    assert metrics["losses/tokens"] == sum(sum(s.mask) for s in samples) - sum(s.mask[0] for s in samples)
    assert metrics["losses/grad_norm"] > 0
    assert any(not (before[k] == v).all() for k, v in learner.model.state_dict().items())


def test_a_prompt_over_the_context_ends_the_episode_as_context_overflow_not_an_infra_error(tiny_lm):
    require_backend("local")
    tokenizer, model = tiny_lm
    engine = ScriptedEngine(tokenizer, model, [bash_call("ls")] * 4)
    # mini-swe-agent's first prompt (instructions and the issue) is longer than 60 tokens.
    with ChatProxy(engine, tokenizer, ProxyConfig(max_context_tokens=60)) as proxy:
        result = run_mini_swe_episode(proxy, TASK, config=MiniSweConfig(max_turns=4, env=ENV))
    assert result.status == Status.CONTEXT_OVERFLOW and result.reward == 0.0 and result.turns == 0
    assert result.tokens is None and engine.returned == []
    # litellm read the proxy's 400 as an overflow (no retry), mini-swe-agent stopped, and nothing was graded.
    assert result.trajectory.header["harness"]["exit_status"] == "ContextWindowExceededError"
    assert "fail_to_pass" not in result.eval
    assert result.eval["error"]["where"] == "agent.context" and '"limit": 60' in result.eval["error"]["message"]


def test_the_environment_runs_commands_in_the_sandbox_and_submits_on_the_completion_marker():
    require_backend("local")
    from minisweagent.exceptions import Submitted

    env = RepoTaskEnv(task=TASK, sandbox="local", config=ENV, max_turns=5)
    try:
        env.reset()
        environment = RepoGymEnvironment(env)
        out = environment.execute({"command": "cat pyproject.toml | head -1; exit 3"})
        assert out["returncode"] == 3 and "[exit code 3]" in out["output"]
        assert environment.execute({"command": "pwd"}, cwd="cfgparse")["output"].strip().endswith("cfgparse")
        assert environment.get_template_vars()["repo_dir"] == "/repo"
        with pytest.raises(Submitted):
            environment.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})
        assert environment.done and environment.final["eval"]["status"] == Status.UNRESOLVED
        assert [s["command"] for s in environment.steps][-1] is None  # the submit
    finally:
        env.close()


def test_a_bug_of_ours_in_the_proxy_or_the_env_ends_the_episode_as_internal_error_not_infra(tiny_lm, monkeypatch):
    require_backend("local")
    tokenizer, model = tiny_lm
    # The engine seam raising a bug (no text left: IndexError), not an outage: the proxy answers 500 and marks it.
    with ChatProxy(ScriptedEngine(tokenizer, model, []), tokenizer, ProxyConfig()) as proxy:
        result = run_mini_swe_episode(proxy, TASK, config=MiniSweConfig(max_turns=4, env=ENV))
    assert result.status == Status.INTERNAL_ERROR and excluded(result.status, result.reward) and result.turns == 0
    assert result.eval["error"]["where"] == "integrations.proxy.complete"
    assert "IndexError" in result.eval["error"]["message"] and "fail_to_pass" not in result.eval

    # A bug the env caught in a tool (info["internal_error"]): the run ends there, nothing is graded.
    real_step = RepoTaskEnv.step

    def buggy(self, action):
        if "caught-bug" in action:
            return ("error (internal_error): the tool failed unexpectedly (KeyError: 'x')", 0.0, False, False,
                    {"task_id": TASK, "turn": 1, "error": "internal_error",
                     "internal_error": {"where": "env.step", "message": "KeyError: 'x'"}})
        return real_step(self, action)

    monkeypatch.setattr(RepoTaskEnv, "step", buggy)
    engine = ScriptedEngine(tokenizer, model, [bash_call("echo caught-bug"), bash_call("ls")])
    with ChatProxy(engine, tokenizer, ProxyConfig()) as proxy:
        result = run_mini_swe_episode(proxy, TASK, config=MiniSweConfig(max_turns=4, env=ENV))
    assert result.status == Status.INTERNAL_ERROR and excluded(result.status, result.reward) and result.turns == 1
    assert result.eval == {"status": Status.INTERNAL_ERROR, "error": {"where": "env.step", "message": "KeyError: 'x'"}}
    assert len(engine.texts) == 1  # the second answer was never asked for
