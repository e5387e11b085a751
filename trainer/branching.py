"""Branching rollouts for GRPO (issue 24): run an episode to a branch point, fork it, finish every branch.

An episode runs as usual until its branch point (``BranchingConfig.at``); there the environment is forked
(:meth:`RepoTaskEnv.fork <repogym.envs.repo_env.RepoTaskEnv.fork>`) and so is the agent (``agent.fork(seed)``,
see :meth:`HFAgent.fork <repogym.agents.hf.HFAgent.fork>`) into ``group`` continuations, the source being the
first; each runs to its own end. GRPO then compares the continuations of one branch point with each other
only: they share everything before the point, so the difference in their rewards is the continuations'.

Guaranteed:
- every continuation's token sequence is the whole episode it played: the shared prefix (the same ids, byte
  for byte, in every continuation), then its own turns; ``branch.prefix_tokens`` is the prefix's length;
- the prefix carries loss mask 0 in every continuation (only post-branch tokens are credited), and its
  generated tokens are counted once, in ``branch.prefix_generated`` (see :func:`generated_tokens`);
- each fork's agent samples with its own episode seed (:func:`branch_seed`); the source keeps its own;
- forks are closed when their continuation ends, before the source environment (which the caller owns);
- no branch point reached, or a fork the environment refuses (:class:`~repogym.envs.core.errors.ForkRefused`) or
  fails to make (:class:`~repogym.envs.core.errors.InfraError`): the episode is one plain outcome whose
  :class:`Branch` says why (``reason``), and whose mask is untouched.

Not guaranteed: continuations run one after another (no concurrency between them); a fork's ``duration_s`` and
its generation time cover its continuation only (the prefix is counted in the source's); processes running in
the sandbox at the branch point are not copied (the env's own limit, said in ``fork_info``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from repogym.agents import Agent, ForkableAgent
from repogym.agents.rollout import EpisodeResult, EpisodeRun
from repogym.agents.trajectory import TokenSequence
from repogym.envs.core.errors import ConfigError, ForkRefused, InfraError

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


@dataclass(frozen=True)
class Branch:
    """Which continuation of which branch point an episode is, or why it did not branch (then ``id`` is None,
    ``reason`` says why, and the prefix fields are None). Written to the trajectory's end line as
    :meth:`to_dict`."""

    id: str | None
    """The branch point (``task/s<seed>/t<turn>``); None when the episode did not branch."""
    index: int = 0
    """0: the source; k >= 1: the k-th fork."""
    size: int = 1
    """Continuations of the branch point, the source included."""
    prefix_tokens: int | None = None
    """Tokens of the shared prefix (loss mask 0 in every continuation)."""
    prefix_generated: int | None = None
    """Tokens the policy generated in the prefix (counted once per branch point)."""
    turn: int | None = None
    """Steps before the branch point."""
    reason: str | None = None
    """Why a plain episode did not branch."""

    def to_dict(self) -> dict[str, Any]:
        """The end line's ``branch`` record, key for key as it has always been written."""
        if self.id is None:
            return {"id": None, "index": self.index, "size": self.size, "reason": self.reason}
        return {"id": self.id, "size": self.size, "prefix_tokens": self.prefix_tokens,
                "prefix_generated": self.prefix_generated, "turn": self.turn, "index": self.index}


@dataclass
class Continuation:
    """One continuation of a branched episode (or the one plain episode)."""

    result: EpisodeResult
    branch: Branch
    generate_s: float = 0.0
    """Seconds in ``agent.act`` during this continuation (the source's includes the prefix)."""


def branch_seed(seed: int | None, index: int) -> int:
    """The episode seed of continuation ``index`` (>= 1) of the episode seeded ``seed``."""
    return ((seed or 0) * 1_000_003 + index) % (2 ** 31 - 1)


def comparison_key(branch: Branch | None) -> str | None:
    """The key of the group an episode's reward is compared within: its branch point, or None (the task's
    unbranched episodes, compared with each other)."""
    return None if branch is None else branch.id


def closes_request(branch: Branch | None) -> bool:
    """Whether the outcome with this ``branch`` is the last one of its request (they come in order)."""
    return branch is None or branch.index == branch.size - 1


def has_signal(rewards_by_key: list[tuple[Any, float]]) -> bool:
    """Whether some comparison group (see :func:`comparison_key`) has two rewards that differ."""
    groups: dict[Any, list[float]] = {}
    for key, reward in rewards_by_key:
        groups.setdefault(key, []).append(reward)
    return any(len(r) > 1 and max(r) - min(r) >= 1e-9 for r in groups.values())


def generated_tokens(episodes: list[tuple[Branch | None, TokenSequence | None]]) -> int:
    """Tokens the policy generated for ``episodes`` (branch, tokens): each continuation's own, and each branch
    point's prefix once."""
    own = sum(sum(tokens.mask) for _, tokens in episodes if tokens is not None)
    prefixes = {b.id: b.prefix_generated or 0 for b, _ in episodes if b is not None and b.id is not None}
    return own + sum(prefixes.values())


def _twin(run: EpisodeRun, env, agent, path: str | Path | None) -> EpisodeRun:
    """A copy of ``run`` on a forked ``env`` and ``agent``; its trajectory file starts with ``run``'s lines."""
    twin = EpisodeRun(env, agent, run.agent_name, path)
    for record in [run.kept.header, *run.kept.steps]:
        twin.write(dict(record))
    twin.tokens = TokenSequence(list(run.tokens.ids), list(run.tokens.mask), list(run.tokens.logprobs),
                                list(run.tokens.versions), list(run.tokens.starts))
    twin.has_tokens, twin.turns, twin.reward = run.has_tokens, run.turns, run.reward
    twin.obs, twin.info = run.obs, dict(run.info)
    return twin


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


def _plain(run: EpisodeRun, reason: str) -> Continuation:
    """``run`` played to its end as one plain episode that did not branch, for ``reason``."""
    branch = Branch(None, reason=reason)
    return Continuation(run.finish({"branch": branch.to_dict()}), branch, run.generate_s)


def branching_rollout(env, agent: Agent, config: BranchingConfig, *, task_id: str | None = None,
                      seed: int | None = None, agent_name: str = "agent",
                      trajectory: str | Path | None = None) -> list[Continuation]:
    """One episode of ``agent`` in ``env`` branched at ``config.at`` into ``config.group`` continuations (the
    source first); a single plain continuation when it does not branch (its ``branch.reason`` says why)."""
    if config.enabled and not isinstance(agent, ForkableAgent):
        raise ConfigError(f"branching needs an agent with fork(seed); {type(agent).__name__} has none")
    root = EpisodeRun(env, agent, agent_name, branch_path(trajectory, 0))
    try:
        root.begin(task_id, seed)
        while root.result is None and not (config.enabled and config.reached(root.turns, root.info)):
            root.step()
        if root.result is not None:
            return [_plain(root, "no branch point reached" if config.enabled else "branching off")]
        try:
            envs = env.fork(config.group - 1)
        except ForkRefused as exc:
            return [_plain(root, f"fork refused: {exc.message}")]
        except InfraError as exc:
            return [_plain(root, f"fork failed: {exc.message}")]
    except BaseException:
        root.close()
        raise
    prefix = len(root.tokens.ids)
    point = Branch(f"{root.info['task_id']}/s{seed}/t{root.turns}", size=config.group, prefix_tokens=prefix,
                   prefix_generated=sum(root.tokens.mask), turn=root.turns)
    runs = [root]
    try:
        for k, forked_env in enumerate(envs, start=1):
            runs.append(_twin(root, forked_env, agent.fork(seed=branch_seed(seed, k)), branch_path(trajectory, k)))
        out = []
        for k, run in enumerate(runs):
            if k:
                run.started = time.monotonic()  # a fork's time is its continuation's (the prefix is the source's)
            branch = replace(point, index=k)
            result = run.finish({"branch": branch.to_dict()})
            result.tokens = _credited(result.tokens, prefix)
            out.append(Continuation(result, branch, run.generate_s))
        return out
    finally:
        for run in runs:
            run.close()
        for forked_env in envs:
            forked_env.close()


__all__ = ["BRANCH_POINTS", "Branch", "BranchingConfig", "Continuation", "branch_path", "branch_seed", "branching_rollout",
           "closes_request", "comparison_key", "generated_tokens", "has_signal"]
