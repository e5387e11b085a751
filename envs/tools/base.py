"""What every tool shares: the call, the result, the context it runs in, argument checking."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Callable

from repogym.envs.core.episode_state import EpisodeState
from repogym.envs.core.errors import ToolError
from repogym.envs.sandbox.base import REPO_DIR, Sandbox
from repogym.envs.tasks.schema import Task


@dataclass
class ToolResult:
    """A tool's output and the structured facts ``info`` reports."""

    output: str
    exit_code: int | None = None
    error: str | None = None
    """Error kind when the call failed (``bad_arguments``, ``path_outside_repo``, ``timeout``, ...)."""
    data: dict[str, Any] = field(default_factory=dict)
    tree: str | None = None
    """The repository's tree id after the call, when the tool could tell it on the way (saves the env asking)."""


@dataclass
class ToolContext:
    """What a tool may touch: the agent's sandbox, the task's public side, the episode's state."""

    sandbox: Sandbox
    task: Task
    command_timeout: float = 60.0
    """Default seconds for a ``bash`` command."""
    max_timeout: float = 600.0
    """Most seconds a command may ask for; also the timeout of ``run_tests``."""
    episode: EpisodeState = field(default_factory=EpisodeState)
    """The episode so far (turn, last edit, test runs), shared with the environment; fresh on each reset."""

    @property
    def repo_dir(self) -> str:
        """Where the repository lives in the sandbox (``/repo``, or a dataset image's workdir such as ``/testbed``)."""
        return self.sandbox.repo_dir


@dataclass(frozen=True)
class Tool:
    """A tool: its schema and the function that runs it."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[ToolContext, dict[str, Any]], ToolResult]
    edits: bool = False
    """Whether a successful call may change the repository."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI tools entry."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def check_arguments(self, args: Any) -> dict[str, Any]:
        """Validate against the schema's required keys, known keys and JSON types."""
        if not isinstance(args, dict):
            raise ToolError("bad_arguments", f"{self.name}: arguments must be a JSON object, got {type(args).__name__}")
        props = self.parameters.get("properties", {})
        unknown = sorted(set(args) - set(props))
        if unknown:
            raise ToolError("bad_arguments", f"{self.name}: unknown argument(s) {unknown}; valid: {sorted(props)}")
        missing = [k for k in self.parameters.get("required", []) if k not in args]
        if missing:
            raise ToolError("bad_arguments", f"{self.name}: missing required argument(s) {missing}")
        for key, value in args.items():
            expected = props[key].get("type")
            if expected and not _is_type(value, expected):
                raise ToolError("bad_arguments", f"{self.name}: argument {key!r} must be {expected}, "
                                                  f"got {type(value).__name__} {value!r:.40}")
            for text in (value if isinstance(value, list) else [value]):
                if isinstance(text, str):
                    _check_text(self.name, key, text)
        return args


MAX_ARGUMENT_CHARS = 4 << 20  # a whole file's content may be big; a command line is held to less by the shell


def _check_text(tool: str, key: str, text: str) -> None:
    """A text argument a process and a file can take: no NUL byte, valid Unicode, a sane size."""
    if "\0" in text:
        raise ToolError("bad_arguments", f"{tool}: argument {key!r} holds a NUL byte, which no command or file "
                                         "path can carry")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("bad_arguments", f"{tool}: argument {key!r} is not valid Unicode (a lone surrogate)") from None
    if len(text) > MAX_ARGUMENT_CHARS:
        raise ToolError("bad_arguments", f"{tool}: argument {key!r} has {len(text)} characters, over "
                                         f"{MAX_ARGUMENT_CHARS}")


def _is_type(value: Any, expected: str) -> bool:
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected == "array":
        return isinstance(value, list)
    return isinstance(value, {"string": str, "boolean": bool, "object": dict}.get(expected, object))


def repo_path(path: str, root: str = REPO_DIR) -> str:
    """A path relative to the repository root, or :class:`ToolError` when it leaves the repository.

    An absolute path under ``root`` (the sandbox's ``repo_dir``) or under ``/repo`` (the root's name for agents
    whatever the sandbox) is taken relative to it."""
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise ToolError("bad_arguments", f"expected a non-empty path, got {path!r}")
    path = path.strip()
    for prefix in dict.fromkeys((root.rstrip("/") or "/", REPO_DIR)):
        if path.startswith(prefix + "/") or path == prefix:
            path = path[len(prefix):].lstrip("/") or "."
            break
    if path.startswith("/"):
        raise ToolError("path_outside_repo", f"{path!r} is outside the repository; use paths relative to {root}")
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        raise ToolError("path_outside_repo", f"{path!r} is outside the repository; use paths relative to {root}")
    if norm == ".git" or norm.startswith(".git/"):
        raise ToolError("path_outside_repo", f"{path!r} is git's own data, not part of the repository")
    return norm


def string_schema(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def int_schema(description: str) -> dict[str, str]:
    return {"type": "integer", "description": description}
