"""Branching rollouts for GRPO (issue 24): continuations of a branch point share their prefix token for token,
are compared with each other only, and are credited for their own tokens; no fork means a plain episode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repogym.agents.hf import HFAgent, HFAgentConfig
from repogym.agents.policy import Completion
from repogym.agents.rollout import run_episode
from repogym.agents.trajectory import read_trajectory
from repogym.envs.core.errors import ConfigError, ForkRefused
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.trainer.algorithms.common import Sample
from repogym.trainer.algorithms.grpo import GRPO, GRPOConfig, group_advantages
from repogym.trainer.branching import (
    BranchingConfig, branch_seed, branching_rollout, closes_request, generated_tokens, has_signal)
from repogym.trainer.tiny import build_tokenizer

FAILING_TEST = "def test_not_yet():\n    assert False\n"


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


class ScriptedEngine:
    """A policy with a script: create a failing test, run the tests (they fail: the branch point), then each
    continuation in turn either applies the gold patch and submits (reward 1) or submits at once (reward 0).
    Records every prompt and sampling seed."""

    version = 0
    max_model_len = None

    def __init__(self, tokenizer, gold: str):
        self.tokenizer, self.gold = tokenizer, gold
        self.calls: list[tuple[list[int], int | None, list[int]]] = []
        self.decisions = 0

    def _text(self, prompt: list[int]) -> str:
        turn = self.tokenizer.decode(prompt).count("<|im_start|>assistant")  # the turn being written, from 1
        if turn == 1:
            return call("create", path="tests/test_not_yet.py", content=FAILING_TEST)
        if turn == 2:
            return call("run_tests", tests=["tests/test_not_yet.py"])
        if turn == 3:
            self.decisions += 1
            return call("apply_patch", patch=self.gold) if self.decisions % 2 else call("submit")
        return call("submit")

    def generate(self, prompts, params):
        out = []
        for prompt in prompts:
            ids = self.tokenizer.encode(self._text(prompt), add_special_tokens=False) + list(params.stop_token_ids)
            self.calls.append((list(prompt), params.seed, ids))
            out.append(Completion(ids, [-0.25] * len(ids), "stop", self.version))
        return out

    def update_weights(self, state_dict, version):
        pass


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer([FAILING_TEST, call("submit"), call("run_tests", tests=["tests/x.py"])] * 5, 400)


@pytest.fixture
def env(tiny_task):
    environment = RepoTaskEnv(task=tiny_task, sandbox="local", max_turns=6,
                              config=EnvConfig(eval_pool_size=0, fork_pool_size=3))
    yield environment
    environment.close()


def agent_for(engine, tokenizer, seed: int | None = 11) -> HFAgent:
    return HFAgent(engine, tokenizer, HFAgentConfig(seed=seed))


@pytest.mark.slow
def test_a_branch_after_the_first_failing_tests_makes_g_continuations_sharing_the_prefix(env, tiny_task, tokenizer,
                                                                                          tmp_path):
    engine = ScriptedEngine(tokenizer, tiny_task.patch)
    forks = []
    real_fork = env.fork

    def recording_fork(n):
        forks.extend(real_fork(n))
        return forks
    env.fork = recording_fork
    path = tmp_path / "ep.jsonl"
    out = branching_rollout(env, agent_for(engine, tokenizer), BranchingConfig(at="after_failing_tests", group=4),
                            seed=5, trajectory=path)
    assert len(out) == 4 and len(forks) == 3
    prefix = out[0].branch.prefix_tokens
    first_two = [ids for _, _, ids in engine.calls[:2]]
    for k, c in enumerate(out):
        b = c.branch
        assert (b.index, b.size, b.turn, b.prefix_tokens) == (k, 4, 2, prefix)
        assert b.id == out[0].branch.id and closes_request(b) == (k == 3)
        assert b.prefix_generated == sum(len(ids) for ids in first_two)
        tokens = c.result.tokens
        # The same prefix, token for token; masked out of the loss in every continuation; the rest is its own.
        assert tokens.ids[:prefix] == out[0].result.tokens.ids[:prefix]
        assert tokens.mask[:prefix] == [0] * prefix and sum(tokens.mask[prefix:]) > 0
        assert [i for i, m in zip(tokens.ids[:prefix], read_trajectory(path).tokens().mask) if m] == [
            t for ids in first_two for t in ids]
    # The branch point is the failing run: the prefix ends with its completion (what follows is each one's own).
    assert out[0].result.tokens.ids[prefix - len(first_two[1]):prefix] == first_two[1]
    # Continuation k >= 1 samples with its own episode seed; the source keeps its own; all differ after the point.
    post = [seed for prompt, seed, _ in engine.calls[2:] if tokenizer.decode(prompt).count("<|im_start|>assistant") == 3]
    assert post == [11 + 1000 * 5 + 2] + [11 + 1000 * branch_seed(5, k) + 2 for k in (1, 2, 3)]
    assert len(set(post)) == 4
    # Half fixed the bug, half gave up: the rewards differ within the branch point.
    assert [c.result.resolved for c in out] == [True, False, True, False]
    assert [c.result.reward for c in out] == [1.0, 0.0, 1.0, 0.0]
    # Each continuation has its own whole trajectory (prefix steps included) that says which one it is.
    for k, c in enumerate(out):
        name = path if k == 0 else path.with_name(f"ep.b{k}.jsonl")
        traj = read_trajectory(name)
        assert traj.end["branch"] == c.branch.to_dict() and [s["action"] for s in traj.steps][:2] == [
            s["action"] for s in read_trajectory(path).steps][:2]
        assert traj.tokens().ids == c.result.tokens.ids
    # Every fork was closed (their sandboxes back); the source env goes on.
    assert all(f._sandbox is None for f in forks)
    env.reset()


def test_advantages_are_computed_within_each_branch_group():
    def sample(reward, episode, branch):
        return Sample([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], reward=reward, meta={"episode": episode,
                                                                                      "branch": branch})
    # One task's group: branch point A (1, 0), branch point B (1, 1), two unbranched episodes (0, 1).
    group = [sample(1.0, 0, "A"), sample(0.0, 1, "A"), sample(1.0, 2, "B"), sample(1.0, 3, "B"),
             sample(0.0, 4, None), sample(1.0, 5, None)]
    out = GRPO(GRPOConfig(group_size=6)).prepare([group])
    assert out == group
    adv = [s.advantage for s in out]
    assert adv[0] == pytest.approx(1.0, abs=1e-4) and adv[1] == pytest.approx(-1.0, abs=1e-4)
    assert adv[2] == adv[3] == 0.0  # B's continuations did equally well: nothing to learn, though 1 > task mean
    assert adv[4] == pytest.approx(-1.0, abs=1e-4) and adv[5] == pytest.approx(1.0, abs=1e-4)
    # Compared within the whole task group instead, B's would have been pushed up.
    assert group_advantages([1, 0, 1, 1, 0, 1])[2] > 0.5
    # Signal is per comparison group; the prefix is counted once.
    assert not has_signal([("B", 1.0), ("B", 1.0), (None, 0.0)]) and has_signal([("A", 1.0), ("A", 0.0)])


@pytest.mark.slow
def test_branching_off_changes_nothing(tiny_task, tokenizer):
    # GRPO: samples with no branch point (None, or no key at all) are compared as one task group, as before.
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0]
    plain = [Sample([1, 2], [0, 1], [0.0, -1.0], reward=r, meta={"episode": k}) for k, r in enumerate(rewards)]
    none = [Sample([1, 2], [0, 1], [0.0, -1.0], reward=r, meta={"episode": k, "branch": None})
            for k, r in enumerate(rewards)]
    grpo = GRPO(GRPOConfig(group_size=5))
    expected = group_advantages(rewards)
    assert [s.advantage for s in grpo.prepare([plain])] == expected == [s.advantage for s in grpo.prepare([none])]
    # A rollout with branching off is the plain episode, token for token.
    results = []
    for branched in (False, True):
        env = RepoTaskEnv(task=tiny_task, sandbox="local", max_turns=6, config=EnvConfig(eval_pool_size=0))
        engine = ScriptedEngine(tokenizer, tiny_task.patch)
        try:
            if branched:
                [c] = branching_rollout(env, agent_for(engine, tokenizer), BranchingConfig(), seed=3)
                assert c.branch.to_dict() == {"id": None, "index": 0, "size": 1, "reason": "branching off"}
                results.append(c.result)
            else:
                results.append(run_episode(env, agent_for(engine, tokenizer), seed=3))
        finally:
            env.close()
    a, b = results

    def generated(tokens):  # observations carry test timings ("in 0.05s"): compare what the model wrote
        return [i for i, m in zip(tokens.ids, tokens.mask) if m]

    assert (a.status, a.reward, a.turns, generated(a.tokens)) == (b.status, b.reward, b.turns, generated(b.tokens))
    assert a.tokens.ids[:a.tokens.mask.index(1)] == b.tokens.ids[:b.tokens.mask.index(1)]  # the same first prompt
    # The metric counts each episode's own tokens when nothing branched.
    assert generated_tokens([(None, a.tokens), (None, b.tokens)]) == 2 * sum(a.tokens.mask)


@pytest.mark.slow
def test_a_refused_fork_falls_back_to_one_plain_episode(tiny_task, tokenizer, tmp_path):
    # A real refusal: the episode's files are over fork_max_bytes.
    env = RepoTaskEnv(task=tiny_task, sandbox="local", max_turns=6,
                      config=EnvConfig(eval_pool_size=0, fork_pool_size=1, fork_max_bytes=64))
    engine = ScriptedEngine(tokenizer, tiny_task.patch)
    try:
        [c] = branching_rollout(env, agent_for(engine, tokenizer), BranchingConfig(at="turn:2", group=3), seed=1,
                                trajectory=tmp_path / "ep.jsonl")
    finally:
        env.close()
    assert c.branch.id is None and c.branch.reason.startswith("fork refused:")
    assert "prefix_tokens" not in c.branch.to_dict() and closes_request(c.branch)
    # Played to its end as one episode, every generated token credited.
    assert c.result.resolved and c.result.turns == 4
    assert sum(c.result.tokens.mask) == sum(len(ids) for _, _, ids in engine.calls)
    assert read_trajectory(tmp_path / "ep.jsonl").end["branch"] == c.branch.to_dict()
    assert not list(tmp_path.glob("ep.b*.jsonl"))


@pytest.mark.slow
def test_no_branch_point_reached_is_a_plain_episode_and_says_so(env, tiny_task, tokenizer, monkeypatch):
    def refuse(n):
        raise AssertionError("no branch point: nothing to fork")
    monkeypatch.setattr(env, "fork", refuse)
    engine = ScriptedEngine(tokenizer, tiny_task.patch)
    [c] = branching_rollout(env, agent_for(engine, tokenizer), BranchingConfig(at="turn:9", group=2), seed=1)
    assert c.branch.reason == "no branch point reached" and c.result.resolved


@pytest.mark.slow
def test_fork_refused_raised_by_the_env_also_falls_back(env, tiny_task, tokenizer, monkeypatch):
    def refuse(n):
        raise ForkRefused("the sandbox died by the agent's hand")
    monkeypatch.setattr(env, "fork", refuse)
    engine = ScriptedEngine(tokenizer, tiny_task.patch)
    [c] = branching_rollout(env, agent_for(engine, tokenizer), BranchingConfig(at="after_failing_tests"), seed=2)
    assert c.branch.reason == "fork refused: the sandbox died by the agent's hand" and c.result.turns == 4


def test_an_agent_fork_sees_exactly_the_prefix_its_source_saw(tokenizer, tiny_task):
    engine = ScriptedEngine(tokenizer, tiny_task.patch)
    agent = agent_for(engine, tokenizer, seed=None)
    agent.reset("fix clamp", {"seed": 4, "tools": None})
    agent.act("fix clamp", {})
    twin = agent.fork(seed=9)
    same = agent.fork()
    assert twin.engine is agent.engine and twin.tokenizer is agent.tokenizer  # the model is never copied
    assert (twin.ids, twin.mask, twin.history) == (agent.ids, agent.mask, agent.history)
    for a in (agent, twin, same):
        a.act("error: nothing happened", {})
    prompts = [prompt for prompt, _, _ in engine.calls[1:]]
    assert prompts[0] == prompts[1] == prompts[2]  # the same next prompt, token for token
    seeds = [seed for _, seed, _ in engine.calls[1:]]
    assert seeds[0] is None and seeds[1] == 0 + 1000 * 9 + 1 and seeds[2] is None
    # Each goes on alone: the source's record did not grow from its forks' turns.
    assert len(agent.traces) == len(twin.traces) == 2 and agent.history is not twin.history


def test_branching_config_rejects_what_cannot_work():
    with pytest.raises(ConfigError, match="at must be one of off, after_failing_tests, turn:K"):
        BranchingConfig(at="turn:soon")
    with pytest.raises(ConfigError, match="group must be an int >= 2"):
        BranchingConfig(at="turn:1", group=1)
    assert BranchingConfig(at="turn:0").reached(0, {}) and not BranchingConfig().enabled
    from repogym.trainer.config import load_config

    assert load_config(None, ["branching.at=off"]).branching == BranchingConfig()  # YAML's bare off is false
    with pytest.raises(ConfigError, match="set algorithm.name: grpo"):
        load_config(None, ["branching.at=turn:1", "algorithm.name=ppo"])
    assert BranchingConfig(at="after_failing_tests").reached(3, {"tool": "run_tests", "failed": ["t::x"]})
    assert not BranchingConfig(at="after_failing_tests").reached(3, {"tool": "run_tests", "failed": []})


def test_the_worker_branches_training_episodes_only(tiny_task):
    from repogym.envs.core.status import Status
    from repogym.trainer.fleet import EpisodeRequest, RolloutWorker, WorkerSpec

    from repogym.envs.core.errors import ConfigError, InternalError

    branching = BranchingConfig(at="turn:1", group=2)
    with pytest.raises(ConfigError, match="branching needs an agent that can fork \\(hf\\), got agent 'null'"):
        WorkerSpec(tasks=[tiny_task], agent="null", branching=branching)
    spec = WorkerSpec(tasks=[tiny_task], env=EnvConfig(sandbox="local", max_turns=2), agent="null")
    spec.branching = branching  # past the spec's check: the null agent stands in for an hf one, for speed
    worker = RolloutWorker(spec)
    try:
        # An evaluation is never branched; a training episode is, and an agent that cannot fork is a bug, loud.
        [evaluation] = worker.run_all(EpisodeRequest(tiny_task.instance_id, 0, tag="eval"))
        assert evaluation.branch is None and evaluation.status != Status.INFRA_ERROR
        with pytest.raises(InternalError, match="fork\\(seed\\)"):
            worker.run_all(EpisodeRequest(tiny_task.instance_id, 0))
    finally:
        slot = worker._slots.get()
        if slot["env"] is not None:
            slot["env"].close()
    env = worker._env()
    try:
        assert env.config.fork_pool_size == 1  # forks come from warm sandboxes
    finally:
        env.close()


@pytest.mark.slow
def test_two_training_steps_of_the_tiny_config_with_branching_on(tmp_path):
    """The tiny CPU config (local fleet), warm-started briefly, trains 2 GRPO steps with branching after turn 1."""
    from tests.test_train import _config, _metrics
    from repogym.trainer.train import Trainer

    run_dir = tmp_path / "run"
    config = _config(run_dir, sft={"steps": 60, "batch_size": 2, "lr": 0.003, "agent": "oracle",
                                   "agent_options": {"style": "edit"}},
                     algorithm={"name": "grpo", "options": {"group_size": 4}},
                     branching={"at": "turn:1", "group": 2}, train={"steps": 2, "tasks_per_step": 1, "max_refills": 3,
                                                                     "checkpoint_every": 0, "eval_every": 0})
    trainer = Trainer(config, progress=False)
    assert trainer.roots == 2
    trainer.run()
    steps = _metrics(run_dir)
    assert [m["step"] for m in steps] == [1, 2]
    # Episodes that got past turn 1 branched into pairs; each pair's continuation files sit beside the source's.
    assert sum(m.get("rollout/branch_points", 0) for m in steps) > 0
    forked = list((run_dir / "trajectories" / "train").glob("*.b1.jsonl"))
    assert forked
    for path in forked:
        fork, source = read_trajectory(path), read_trajectory(Path(str(path).replace(".b1.jsonl", ".jsonl")))
        point = fork.end["branch"]
        assert source.end["branch"]["id"] == point["id"] and point["index"] == 1
        assert fork.tokens().ids[:point["prefix_tokens"]] == source.tokens().ids[:point["prefix_tokens"]]
    for m in steps:
        assert m["rollout/generated_tokens_per_episode"] == pytest.approx(
            m["rollout/generated_tokens"] / (m["rollout/episodes"] - m["rollout/infra_errors"]))
    assert any("losses/loss" in m for m in steps), "no step trained: the branch groups gave no signal"
