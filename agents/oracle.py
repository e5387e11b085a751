"""The oracle: applies the task's gold patch and submits. Proves a task is solvable through the tools."""

from __future__ import annotations

import json
from typing import Any

from envs.tasks.schema import Task
from envs.tasks.suites import load_suite


class OracleAgent:
    """Looks the gold patch up by ``info["task_id"]`` in ``suite`` (or in ``tasks``)."""

    def __init__(self, suite: str = "builtin", tasks: list[Task] | None = None):
        self._tasks = {t.instance_id: t for t in (tasks if tasks is not None else load_suite(suite))}
        self._plan: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        task = self._tasks[info["task_id"]]
        self._plan = [json.dumps({"name": "apply_patch", "arguments": {"patch": task.patch}}),
                      json.dumps({"name": "submit", "arguments": {}})]

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self._plan.pop(0) if self._plan else json.dumps({"name": "submit", "arguments": {}})
