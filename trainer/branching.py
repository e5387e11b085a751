"""Branching rollouts for GRPO (issue 24): run an episode to a branch point, fork it, finish every branch.

An episode runs as usual until its branch point (``BranchingConfig.at``); there the environment is forked
(:meth:`RepoTaskEnv.fork <repogym.envs.repo_env.RepoTaskEnv.fork>`) and so is the agent (``agent.fork(seed)``,
see :meth:`HFAgent.fork <repogym.agents.hf.HFAgent.fork>`) into ``group`` continuations, the source being the
first; each runs to its own end. GRPO then compares the continuations of one branch point with each other
only: they share everything before the point, so the difference in their rewards is the continuations'.

Guaranteed:
- every continuation's token sequence is the whole episode it played: the shared prefix (the same ids, byte
  for byte, in every continuation), then its own turns; ``branch["prefix_tokens"]`` is the prefix's length;
- the prefix carries loss mask 0 in every continuation (only post-branch tokens are credited), and its
  generated tokens are counted once, in ``branch["prefix_generated"]`` (see :func:`generated_tokens`);
- each fork's agent samples with its own episode seed (:func:`branch_seed`); the source keeps its own;
- forks are closed when their continuation ends, before the source environment (which the caller owns);
- no branch point reached, or a fork the environment refuses (:class:`~repogym.envs.core.errors.ForkRefused`) or
  fails to make (:class:`~repogym.envs.core.errors.InfraError`): the episode is one plain outcome whose ``branch``
  record says why (``reason``), and whose mask is untouched.

Not guaranteed: continuations run one after another (no concurrency between them); a fork's ``duration_s`` and
its generation time cover its continuation only (the prefix is counted in the source's); processes running in
the sandbox at the branch point are not copied (the env's own limit, said in ``fork_info``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repogym.agents.errors import ContextOverflow
from repogym.agents.rollout import UNKNOWN_STATUS, EpisodeResult
from repogym.agents.trajectory import TRAJECTORY_FORMAT, TokenSequence, Trajectory, TrajectoryWriter
from repogym.envs.core.errors import ConfigError, ForkRefused, InfraError
from repogym.envs.core.status import Status

BRANCH_POINTS = ("off", "after_failing_tests", "turn:K")


@dataclass
class BranchingConfig:
    """Where training episodes branch, and into how many continuations (GRPO only)."""

    at: str = "off"
    """The branch point: ``off`` (plain episodes), ``after_failing_tests`` (right after the first ``run_tests``
    whose result lists a failing test) or ``turn:K`` (after the K-th step, K >= 0; 0 is right after reset)."""
    group: int = 4
    """Continuations per branch point, the source included (>= 2). A task's GRPO group of ``group_size``
    episodes is then ``group_size // group`` branched episodes (at least 1) of ``group`` continuations each."""

    def __post_init__(self):
        if self.at is False:  # YAML reads a bare ``off`` as false
            self.at = "off"
        if isinstance(self.group, bool) or not isinstance(self.group, int) or self.group < 2:
            raise ConfigError(f"group must be an int >= 2, got {self.group!r}")
        if self.at in ("off", "after_failing_tests"):
            return
        k = self.at.removeprefix("turn:") if isinstance(self.at, str) else ""
        if not (isinstance(self.at, str) and self.at.startswith("turn:") and k.isdigit()):
            raise ConfigError(f"at must be one of {', '.join(BRANCH_POINTS)} (K an int >= 0), got {self.at!r}")

    @property
    def enabled(self) -> bool:
        return self.at != "off"

    def reached(self, turns: int, info: dict[str, Any]) -> bool:
        """Whether the episode is at its branch point after ``turns`` steps, the last step's ``info`` given."""
        if self.at == "after_failing_tests":
            return info.get("tool") == "run_tests" and bool(info.get("failed"))
        return self.enabled and turns == int(self.at.removeprefix("turn:"))


@dataclass
class Continuation:
    """One continuation of a branched episode (or the one plain episode)."""

    result: EpisodeResult
    branch: dict[str, Any]
    """``id`` (the branch point; None when the episode did not branch), ``index`` (0: the source), ``size``
    (continuations of the point), ``prefix_tokens``, ``prefix_generated`` (generated tokens in the prefix), ``turn``
    (steps before the point); a plain episode has ``reason`` instead of the prefix fields."""
    generate_s: float = 0.0
    """Seconds in ``agent.act`` during this continuation (the source's includes the prefix)."""


def branch_seed(seed: int | None, index: int) -> int:
    """The episode seed of continuation ``index`` (>= 1) of the episode seeded ``seed``."""
    return ((seed or 0) * 1_000_003 + index) % (2 ** 31 - 1)


def comparison_key(branch: dict[str, Any] | None) -> Any:
    """The key of the group an episode's reward is compared within: its branch point, or None (the task's
    unbranched episodes, compared with each other)."""
    return (branch or {}).get("id")


def closes_request(branch: dict[str, Any] | None) -> bool:
    """Whether the outcome with this ``branch`` record is the last one of its request (they come in order)."""
    return branch is None or branch.get("index", 0) == branch.get("size", 1) - 1


def has_signal(rewards_by_key: list[tuple[Any, float]]) -> bool:
    """Whether some comparison group (see :func:`comparison_key`) has two rewards that differ."""
    groups: dict[Any, list[float]] = {}
    for key, reward in rewards_by_key:
        groups.setdefault(key, []).append(reward)
    return any(len(r) > 1 and max(r) - min(r) >= 1e-9 for r in groups.values())


def generated_tokens(episodes: list[tuple[dict[str, Any] | None, TokenSequence | None]]) -> int:
    """Tokens the policy generated for ``episodes`` (branch record, tokens): each continuation's own, and each
    branch point's prefix once."""
    own = sum(sum(tokens.mask) for _, tokens in episodes if tokens is not None)
    prefixes = {b["id"]: b.get("prefix_generated", 0) for b, _ in episodes if b and b.get("id") is not None}
    return own + sum(prefixes.values())


class _Run:
    """One line of play: an environment, an agent, the last observation and info, tokens and trajectory records."""

    def __init__(self, env, agent, agent_name: str, path: str | Path | None):
        self.env, self.agent, self.agent_name = env, agent, agent_name
        self.out = TrajectoryWriter(path)
        self.kept = Trajectory({}, [], None)
        self.tokens, self.has_tokens = TokenSequence(), True
        self.obs, self.info, self.reward, self.turns = "", {}, 0.0, 0
        self.started, self.generate_s = time.monotonic(), 0.0
        self.result: EpisodeResult | None = None

    def write(self, record: dict[str, Any]) -> None:
        self.out.write(record)
        if record["type"] == "header":
            self.kept.header = record
        elif record["type"] == "step":
            self.kept.steps.append(record)

    def begin(self, task_id: str | None, seed: int | None) -> None:
        self.obs, self.info = self.env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
        self.write({"type": "header", "format": TRAJECTORY_FORMAT, "task_id": self.info["task_id"],
                    "agent": self.agent_name, "seed": seed, "observation": self.obs})
        self.agent.reset(self.obs, {**self.info, "seed": seed})

    def step(self) -> bool:
        """One turn (as :func:`~repogym.agents.rollout.run_episode` plays it); whether the episode ended."""
        start = time.monotonic()
        try:
            action = self.agent.act(self.obs, self.info)
        except InfraError as exc:
            record = {"status": Status.INFRA_ERROR, "error": {"where": exc.where, "message": exc.message}}
            return self._end(Status.INFRA_ERROR, float("nan"), record, None)
        except ContextOverflow as exc:  # the policy's limit: a 0, kept for training
            record = {"status": Status.CONTEXT_OVERFLOW, "error": {"where": "agent.context", "message": str(exc)}}
            return self._end(Status.CONTEXT_OVERFLOW, 0.0, record, self._tokens())
        finally:
            self.generate_s += time.monotonic() - start
        turn = self.agent.turn_record() if hasattr(self.agent, "turn_record") else None
        self.obs, self.reward, terminated, truncated, self.info = self.env.step(action)
        self.turns += 1
        step = {"type": "step", "turn": self.turns, "action": action, "observation": self.obs, "reward": self.reward,
                "terminated": terminated, "truncated": truncated,
                "info": {k: v for k, v in self.info.items() if k != "eval"}}
        if turn:
            step["agent"] = turn
        tok = (turn or {}).get("tokens")
        if tok is None:
            self.has_tokens = False
        else:
            self.tokens.add_record(tok)
        self.write(step)
        if not (terminated or truncated):
            return False
        record = self.info.get("eval", {})
        return self._end(record.get("status", UNKNOWN_STATUS), self.reward, record, self._tokens())

    def _tokens(self) -> TokenSequence | None:
        return self.tokens if self.has_tokens and self.turns else None

    def _end(self, status, reward: float, record: dict[str, Any], tokens: TokenSequence | None) -> bool:
        self.result = EpisodeResult(self.info["task_id"], self.agent_name, status, reward, self.turns,
                                    time.monotonic() - self.started, record, tokens, self.info, self.kept)
        return True

    def finish(self, branch: dict[str, Any]) -> Continuation:
        """Play to the end; write the end line with ``branch``; the continuation."""
        try:
            while self.result is None:
                self.step()
            r = self.result
            self.kept.end = {"type": "end", "status": r.status, "reward": r.reward, "eval": r.eval, "branch": branch}
            self.out.write(self.kept.end)
        finally:
            self.out.close()
        return Continuation(r, branch, self.generate_s)

    def branch(self, env, agent, path: str | Path | None) -> "_Run":
        """A copy of this run on a forked ``env`` and ``agent``; its trajectory file starts with this run's lines."""
        twin = _Run(env, agent, self.agent_name, path)
        for record in [self.kept.header, *self.kept.steps]:
            twin.write(dict(record))
        twin.tokens = TokenSequence(list(self.tokens.ids), list(self.tokens.mask), list(self.tokens.logprobs),
                                    list(self.tokens.versions), list(self.tokens.starts))
        twin.has_tokens, twin.turns, twin.reward = self.has_tokens, self.turns, self.reward
        twin.obs, twin.info = self.obs, dict(self.info)
        return twin

    def close(self) -> None:
        self.out.close()


def _credited(tokens: TokenSequence | None, prefix: int) -> TokenSequence | None:
    """``tokens`` with loss mask 0 on its first ``prefix`` tokens (the shared prefix is credited to no one)."""
    if tokens is None:
        return None
    mask = [0] * min(prefix, len(tokens.mask)) + tokens.mask[prefix:]
    return TokenSequence(tokens.ids, mask, tokens.logprobs, tokens.versions, tokens.starts)


def branch_path(trajectory: str | Path | None, index: int) -> str | None:
    """Continuation ``index``'s trajectory file: the episode's own for the source, ``<name>.b<index>.jsonl`` else."""
    if trajectory is None or index == 0:
        return None if trajectory is None else str(trajectory)
    path = Path(trajectory)
    return str(path.with_name(f"{path.name.removesuffix('.jsonl')}.b{index}.jsonl"))


def branching_rollout(env, agent, config: BranchingConfig, *, task_id: str | None = None, seed: int | None = None,
                      agent_name: str = "agent", trajectory: str | Path | None = None) -> list[Continuation]:
    """One episode of ``agent`` in ``env`` branched at ``config.at`` into ``config.group`` continuations (the
    source first); a single plain continuation when it does not branch (its ``branch["reason"]`` says why)."""
    if config.enabled and not callable(getattr(agent, "fork", None)):
        raise ConfigError(f"branching needs an agent with fork(seed); {type(agent).__name__} has none")
    root = _Run(env, agent, agent_name, branch_path(trajectory, 0))
    try:
        root.begin(task_id, seed)
        while root.result is None and not (config.enabled and config.reached(root.turns, root.info)):
            root.step()
        if root.result is not None:
            return [root.finish({"id": None, "index": 0, "size": 1, "reason": "no branch point reached"
                                 if config.enabled else "branching off"})]
        try:
            envs = env.fork(config.group - 1)
        except ForkRefused as exc:
            return [root.finish({"id": None, "index": 0, "size": 1, "reason": f"fork refused: {exc.message}"})]
        except InfraError as exc:
            return [root.finish({"id": None, "index": 0, "size": 1, "reason": f"fork failed: {exc.message}"})]
    except BaseException:
        root.close()
        raise
    prefix = len(root.tokens.ids)
    point = {"id": f"{root.info['task_id']}/s{seed}/t{root.turns}", "size": config.group, "prefix_tokens": prefix,
             "prefix_generated": sum(root.tokens.mask), "turn": root.turns}
    runs = [root]
    try:
        for k, forked_env in enumerate(envs, start=1):
            runs.append(root.branch(forked_env, agent.fork(seed=branch_seed(seed, k)), branch_path(trajectory, k)))
        out = []
        for k, run in enumerate(runs):
            if k:
                run.started = time.monotonic()  # a fork's time is its continuation's (the prefix is the source's)
            done = run.finish({**point, "index": k})
            done.result.tokens = _credited(done.result.tokens, prefix)
            out.append(done)
        return out
    finally:
        for run in runs:
            run.close()
        for forked_env in envs:
            forked_env.close()


__all__ = ["BRANCH_POINTS", "BranchingConfig", "Continuation", "branch_path", "branch_seed", "branching_rollout",
           "closes_request", "comparison_key", "generated_tokens", "has_signal"]
