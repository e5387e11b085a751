"""Running an agent in an environment for one episode, writing the trajectory as it goes.

The trajectory format is described in :mod:`repogym.agents.trajectory`. How an episode ended is read once, here,
from the last step's ``info`` (the Gymnasium boundary) into an :class:`EpisodeResult`: its ``status``, ``reward``
and ``error`` (an :class:`~repogym.envs.step_info.ErrorInfo`); nothing downstream reads ``info["eval"]`` for them again.

- An agent that fails on infrastructure (an unreachable model server:
  :class:`repogym.envs.core.errors.InfraError`) ends the episode as
  :attr:`Status.INFRA_ERROR <repogym.envs.core.status.Status.INFRA_ERROR>` with a NaN reward, recorded with where
  it happened, never as a reward of 0.
- A bug of repogym's that the environment caught (``info["internal_error"]``, or an eval record of status
  ``internal_error``) ends it as :attr:`Status.INTERNAL_ERROR <repogym.envs.core.status.Status.INTERNAL_ERROR>`
  with a NaN reward: excluded, never a reward.
- A policy whose context runs out (:class:`repogym.agents.errors.ContextOverflow`) ends it as
  ``context_overflow`` with reward 0: that is the policy's outcome, kept for training.

Any other exception (a bug of the agent's code or of ours) propagates: the caller's boundary decides (the bench
stops the run, the fleet reports it with :func:`repogym.envs.core.bugs.report_bug`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from repogym.agents import Agent
from repogym.agents.errors import ContextOverflow
from repogym.agents.trajectory import TRAJECTORY_FORMAT, TokenSequence, Trajectory, TrajectoryWriter, status_of
from repogym.envs.core.errors import InfraError
from repogym.envs.core.status import Status, excluded
from repogym.envs.step_info import ErrorInfo

UNKNOWN_STATUS = "unknown"
"""The status of an episode that ended with no eval record (an environment that grades nothing): no outcome."""


@dataclass
class EpisodeResult:
    """What one episode came to: the facts every reader of an outcome shares (the rollout fleet's
    :class:`~repogym.trainer.fleet.EpisodeOutcome` adds its own to these)."""

    task_id: str
    agent: str
    status: Status | str
    """A :class:`Status` (a plain string given is taken as one); a string only for outcomes it does not name."""
    reward: float
    turns: int
    duration_s: float
    eval: dict[str, Any] = field(default_factory=dict)
    """The eval record as the trajectory's end line holds it."""
    tokens: TokenSequence | None = None
    """For token-level agents: the episode's ids, loss mask and sampling logprobs."""
    info: dict[str, Any] = field(default_factory=dict)
    """The last step's info (reward components, analysis, well-formed call count)."""
    trajectory: Trajectory | None = None
    """The episode's trajectory records, in memory (as written to the file)."""
    error: ErrorInfo | None = None
    """Where and what went wrong (an infrastructure failure, a bug, a patch that failed, a guard that tripped);
    None when nothing did. Taken from ``eval["error"]`` when not given."""

    def __post_init__(self):
        self.status = status_of(self.status)
        if self.error is None:
            self.error = self.eval.get("error")

    @property
    def excluded(self) -> bool:
        """Left out of training and metrics (:func:`repogym.envs.core.status.excluded`): an infrastructure
        failure, a bug of ours, or no (NaN) reward."""
        return excluded(self.status, self.reward)

    @property
    def resolved(self) -> bool:
        return self.status == Status.RESOLVED

    @property
    def components(self) -> dict[str, float]:
        """The named reward components of the last step (empty when the episode was not graded)."""
        return dict(self.info.get("reward_components") or {})


class EpisodeRun:
    """One line of play: an environment, an agent, the last observation and info, the episode's tokens and its
    trajectory records (written to ``path`` as they come, and kept in memory).

    :func:`run_episode` plays one from start to end; :mod:`repogym.trainer.branching` also copies one onto a forked
    environment at its branch point. ``result`` is set once the episode has ended.
    """

    def __init__(self, env: gym.Env, agent: Agent, agent_name: str, path: str | Path | None):
        self.env, self.agent, self.agent_name = env, agent, agent_name
        self.out = TrajectoryWriter(path)
        self.kept = Trajectory({}, [], None)
        self.tokens, self.has_tokens = TokenSequence(), True
        self.obs: str = ""
        self.info: dict[str, Any] = {}
        self.reward, self.turns = 0.0, 0
        self.started, self.generate_s = time.monotonic(), 0.0
        """When the run (or, for a fork, its continuation) started; seconds spent in ``agent.act``."""
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
        """One turn; whether the episode ended (then ``result`` is set)."""
        start = time.monotonic()
        try:
            action = self.agent.act(self.obs, self.info)
        except InfraError as exc:
            return self._end(Status.INFRA_ERROR, float("nan"), {"status": Status.INFRA_ERROR, "error": exc.record()},
                             None)
        except ContextOverflow as exc:  # the policy's limit, not the machine's: a 0, kept for training
            error: ErrorInfo = {"where": "agent.context", "message": str(exc)}
            return self._end(Status.CONTEXT_OVERFLOW, 0.0, {"status": Status.CONTEXT_OVERFLOW, "error": error},
                             self._tokens())
        finally:
            self.generate_s += time.monotonic() - start
        turn = self.agent.turn_record()
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
        if "internal_error" in self.info:  # a bug of ours: the episode says nothing of the policy
            error = self.info["internal_error"]
            return self._end(Status.INTERNAL_ERROR, float("nan"), {"status": Status.INTERNAL_ERROR, "error": error},
                             None)
        if not (terminated or truncated):
            return False
        record = self.info.get("eval", {})
        status = status_of(record.get("status", UNKNOWN_STATUS))
        reward = float("nan") if status == Status.INTERNAL_ERROR else self.reward
        return self._end(status, reward, record, None if status == Status.INTERNAL_ERROR else self._tokens())

    def _tokens(self) -> TokenSequence | None:
        return self.tokens if self.has_tokens and self.turns else None

    def _end(self, status: Status | str, reward: float, record: dict[str, Any], tokens: TokenSequence | None) -> bool:
        self.result = EpisodeResult(self.info["task_id"], self.agent_name, status, reward, self.turns,
                                    time.monotonic() - self.started, record, tokens, self.info, self.kept)
        return True

    def finish(self, extra: dict[str, Any] | None = None) -> EpisodeResult:
        """Play to the end; write the end line (with ``extra``'s fields after the standard ones); close the file."""
        try:
            while self.result is None:
                self.step()
            r = self.result
            self.kept.end = {"type": "end", "status": r.status, "reward": r.reward, "eval": r.eval, **(extra or {})}
            self.out.write(self.kept.end)
        finally:
            self.out.close()
        return r

    def close(self) -> None:
        self.out.close()


def run_episode(env: gym.Env, agent: Agent, *, task_id: str | None = None, seed: int | None = None,
                agent_name: str = "agent", trajectory: str | Path | None = None) -> EpisodeResult:
    """One episode of ``agent`` in ``env`` (a task by id, or the env's own pick)."""
    run = EpisodeRun(env, agent, agent_name, trajectory)
    try:
        run.begin(task_id, seed)
        return run.finish()
    finally:
        run.close()


__all__ = ["UNKNOWN_STATUS", "EpisodeResult", "EpisodeRun", "run_episode"]
