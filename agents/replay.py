"""The replay agent: plays back recorded actions (a trajectory file or a list), then submits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class ReplayAgent:
    """Replays ``actions`` (or the ``action`` fields of a trajectory JSONL at ``path``) for every episode."""

    def __init__(self, actions: list[str] | None = None, path: str | None = None):
        if actions is None and path is None:
            raise ValueError("ReplayAgent needs actions=[...] or path=TRAJECTORY.jsonl")
        if actions is None:
            records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
            actions = [r["action"] for r in records if r.get("type") == "step"]
        self.actions = list(actions)
        self._queue: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self._queue = list(self.actions)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self._queue.pop(0) if self._queue else json.dumps({"name": "submit", "arguments": {}})
