"""The replay agent: plays back recorded actions (a trajectory file or a list), then submits."""

from __future__ import annotations

import json
from typing import Any

from repogym.agents.trajectory import read_trajectory
from repogym.envs.core.errors import ConfigError


class ReplayAgent:
    """Replays ``actions`` (or the actions of the trajectory file at ``path``) for every episode."""

    def __init__(self, actions: list[str] | None = None, path: str | None = None):
        if actions is None and path is None:
            raise ConfigError("expected ReplayAgent(actions=[...]) or ReplayAgent(path=TRAJECTORY.jsonl), got neither")
        if actions is None:
            actions = read_trajectory(path).actions
        self.actions = list(actions)
        self._queue: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self._queue = list(self.actions)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self._queue.pop(0) if self._queue else json.dumps({"name": "submit", "arguments": {}})

    def turn_record(self) -> None:
        """Nothing to record of a turn (no model, no tokens)."""
        return None
