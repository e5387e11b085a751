"""The oracle: applies the task's gold patch and submits. Proves a task is solvable through the tools.

``style="patch"`` sends the gold patch through ``apply_patch``; ``style="edit"`` sends one ``edit`` call
per hunk (the hunk's old and new lines with ``context`` lines around them), the short form a small
model can learn to write, which makes oracle trajectories useful as SFT warm-start data.
"""

from __future__ import annotations

import json
from typing import Any

from repogym.envs.core.errors import ConfigError
from repogym.envs.tasks.schema import Task
from repogym.envs.tasks.suites import load_suite


def _call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def patch_to_edits(patch: str, context: int = 1) -> list[dict[str, Any]] | None:
    """The ``edit``/``create`` calls equivalent to ``patch``; None when it holds what edits cannot say."""
    calls: list[dict[str, Any]] = []
    path, new_file, hunk = None, False, None

    def flush() -> None:
        nonlocal hunk
        if hunk is None:
            return
        lines = hunk
        first = next((i for i, (k, _) in enumerate(lines) if k != " "), len(lines))
        last = max((i for i, (k, _) in enumerate(lines) if k != " "), default=-1)
        lines = lines[max(0, first - context):last + 1 + context]
        old = "".join(t for k, t in lines if k in " -")
        new = "".join(t for k, t in lines if k in " +")
        if new_file:
            calls.append({"name": "create", "arguments": {"path": path, "content": new}})
        else:
            calls.append({"name": "edit", "arguments": {"path": path, "old": old, "new": new}})
        hunk = None

    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git"):
            flush()
            path, new_file = None, False
        elif line.startswith("--- "):
            flush()
            new_file = line.strip() == "--- /dev/null"
        elif line.startswith("+++ "):
            target = line[4:].strip()
            if target == "/dev/null":
                return None  # a deleted file
            path = target[2:] if target.startswith("b/") else target
        elif line.startswith("@@"):
            flush()
            hunk = []
        elif hunk is not None and line[:1] in (" ", "-", "+"):
            hunk.append((line[0], line[1:]))
        elif line.startswith("\\"):
            return None  # "no newline at end of file" needs byte-exact patching
        elif line.startswith(("rename ", "Binary ", "old mode", "new mode", "similarity")):
            return None
    flush()
    return calls or None


class OracleAgent:
    """Looks the gold patch up by ``info["task_id"]`` in ``suite`` (or in ``tasks``)."""

    def __init__(self, suite: str = "builtin", tasks: list[Task] | None = None, style: str = "patch",
                 context: int = 1):
        if style not in ("patch", "edit"):
            raise ConfigError(f"expected style 'patch' or 'edit', got {style!r}")
        self._tasks = {t.instance_id: t for t in (tasks if tasks is not None else load_suite(suite))}
        self.style, self.context = style, context
        self._plan: list[str] = []

    def plan(self, task: Task) -> list[str]:
        """The actions for ``task``, submit last."""
        edits = patch_to_edits(task.patch, self.context) if self.style == "edit" else None
        if edits is None:
            actions = [_call("apply_patch", patch=task.patch)]
        else:
            actions = [json.dumps(c) for c in edits]
        return actions + [_call("submit")]

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self._plan = self.plan(self._tasks[info["task_id"]])

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self._plan.pop(0) if self._plan else _call("submit")

    def turn_record(self) -> None:
        """Nothing to record of a turn (no model, no tokens)."""
        return None
