"""Running an agent in an environment for one episode, writing the trajectory as it goes.

Trajectory format ``repogym.trajectory/1``: JSONL, a ``header`` line (task, agent), one ``step`` line per
tool call (action, observation, reward, flags, info), and an ``end`` line (eval record, reward). Written
line by line, so a crashed episode still leaves everything up to the crash.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

TRAJECTORY_FORMAT = "repogym.trajectory/1"


@dataclass
class EpisodeResult:
    """What one episode came to."""

    task_id: str
    agent: str
    status: str
    reward: float
    turns: int
    duration_s: float
    eval: dict[str, Any] = field(default_factory=dict)

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error" or math.isnan(self.reward)


def run_episode(env: gym.Env, agent, *, task_id: str | None = None, seed: int | None = None,
                agent_name: str = "agent", trajectory: str | Path | None = None) -> EpisodeResult:
    """One episode of ``agent`` in ``env`` (a task by id, or the env's own pick)."""
    start = time.monotonic()
    out = open(trajectory, "w", encoding="utf-8") if trajectory else None

    def write(record: dict[str, Any]) -> None:
        if out:
            out.write(json.dumps(record, default=str) + "\n")
            out.flush()

    try:
        obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
        write({"type": "header", "format": TRAJECTORY_FORMAT, "task_id": info["task_id"], "agent": agent_name,
               "observation": obs})
        agent.reset(obs, info)
        reward, turns, done = 0.0, 0, False
        while not done:
            action = agent.act(obs, info)
            obs, reward, terminated, truncated, info = env.step(action)
            turns += 1
            done = terminated or truncated
            write({"type": "step", "turn": turns, "action": action, "observation": obs, "reward": reward,
                   "terminated": terminated, "truncated": truncated,
                   "info": {k: v for k, v in info.items() if k != "eval"}})
        record = info.get("eval", {})
        result = EpisodeResult(info["task_id"], agent_name, record.get("status", "unknown"), reward, turns,
                               time.monotonic() - start, record)
        write({"type": "end", "status": result.status, "reward": reward, "eval": record})
        return result
    finally:
        if out:
            out.close()
