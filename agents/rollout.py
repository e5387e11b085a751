"""Running an agent in an environment for one episode, writing the trajectory as it goes.

The trajectory format is described in :mod:`repogym.agents.trajectory`. An agent that fails on infrastructure
(an unreachable model server: :class:`repogym.envs.core.errors.InfraError`) ends the episode as
:attr:`Status.INFRA_ERROR <repogym.envs.core.status.Status.INFRA_ERROR>` with a NaN reward, recorded with where it
happened, never as a reward of 0. A policy whose context runs out
(:class:`repogym.agents.errors.ContextOverflow`) ends it as ``context_overflow`` with reward 0: that is the
policy's outcome, kept for training.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from repogym.agents.errors import ContextOverflow
from repogym.agents.trajectory import TRAJECTORY_FORMAT, TokenSequence, Trajectory, TrajectoryWriter, status_of
from repogym.envs.core.errors import InfraError
from repogym.envs.core.status import Status, excluded

UNKNOWN_STATUS = "unknown"
"""The status of an episode that ended with no eval record (an environment that grades nothing): no outcome."""


@dataclass
class EpisodeResult:
    """What one episode came to."""

    task_id: str
    agent: str
    status: Status | str
    """A :class:`Status` (a plain string given is taken as one); a string only for outcomes it does not name."""
    reward: float
    turns: int
    duration_s: float
    eval: dict[str, Any] = field(default_factory=dict)
    tokens: TokenSequence | None = None
    """For token-level agents: the episode's ids, loss mask and sampling logprobs."""
    info: dict[str, Any] = field(default_factory=dict)
    """The last step's info (reward components, analysis, well-formed call count)."""
    trajectory: Trajectory | None = None
    """The episode's trajectory records, in memory (as written to the file)."""

    def __post_init__(self):
        self.status = status_of(self.status)

    @property
    def infra_error(self) -> bool:
        """Excluded from training and metrics: an infrastructure failure or no (NaN) reward."""
        return excluded(self.status, self.reward)

    @property
    def resolved(self) -> bool:
        return self.status == Status.RESOLVED


def run_episode(env: gym.Env, agent, *, task_id: str | None = None, seed: int | None = None,
                agent_name: str = "agent", trajectory: str | Path | None = None) -> EpisodeResult:
    """One episode of ``agent`` in ``env`` (a task by id, or the env's own pick)."""
    start = time.monotonic()
    out = TrajectoryWriter(trajectory)
    kept = Trajectory({}, [], None)

    def write(record: dict[str, Any]) -> None:
        out.write(record)
        kind = record["type"]
        if kind == "header":
            kept.header = record
        elif kind == "step":
            kept.steps.append(record)
        else:
            kept.end = record
    tokens = TokenSequence()
    has_tokens = True
    try:
        obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
        write({"type": "header", "format": TRAJECTORY_FORMAT, "task_id": info["task_id"], "agent": agent_name,
                   "seed": seed, "observation": obs})
        agent.reset(obs, {**info, "seed": seed})
        reward, turns, done = 0.0, 0, False
        while not done:
            try:
                action = agent.act(obs, info)
            except InfraError as exc:
                record = {"status": Status.INFRA_ERROR, "error": {"where": exc.where, "message": exc.message}}
                write({"type": "end", "status": Status.INFRA_ERROR, "reward": float("nan"), "eval": record})
                return EpisodeResult(info["task_id"], agent_name, Status.INFRA_ERROR, float("nan"), turns,
                                     time.monotonic() - start, record, None, info, kept)
            except ContextOverflow as exc:  # the policy's limit, not the machine's: a 0, kept for training
                record = {"status": Status.CONTEXT_OVERFLOW, "error": {"where": "agent.context", "message": str(exc)}}
                write({"type": "end", "status": Status.CONTEXT_OVERFLOW, "reward": 0.0, "eval": record})
                return EpisodeResult(info["task_id"], agent_name, Status.CONTEXT_OVERFLOW, 0.0, turns,
                                     time.monotonic() - start, record, tokens if has_tokens and turns else None,
                                     info, kept)
            turn = agent.turn_record() if hasattr(agent, "turn_record") else None
            obs, reward, terminated, truncated, info = env.step(action)
            turns += 1
            done = terminated or truncated
            step = {"type": "step", "turn": turns, "action": action, "observation": obs, "reward": reward,
                    "terminated": terminated, "truncated": truncated,
                    "info": {k: v for k, v in info.items() if k != "eval"}}
            if turn:
                step["agent"] = turn
            tok = (turn or {}).get("tokens")
            if tok is None:
                has_tokens = False
            else:
                tokens.add_record(tok)
            write(step)
        record = info.get("eval", {})
        result = EpisodeResult(info["task_id"], agent_name, record.get("status", UNKNOWN_STATUS), reward, turns,
                               time.monotonic() - start, record, tokens if has_tokens and turns else None, info, kept)
        write({"type": "end", "status": result.status, "reward": reward, "eval": record})
        return result
    finally:
        out.close()
