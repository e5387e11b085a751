"""Typed failures of the environment stack.

Three kinds of failure get three treatments (see docs/architecture.md):
- the agent's mistakes (bad tool call, path outside the repo, broken patch) are *observations*, never raised;
- control flow (submit, turn limit) is explicit in ``step``'s return values;
- infrastructure failures are the exceptions below. Each names where it happened (``where``) so a
  trajectory can record it and training can drop the episode instead of learning from a fake 0.
"""

from __future__ import annotations


class RepogymError(Exception):
    """Base class of every error repogym raises on purpose."""


class ConfigError(RepogymError, ValueError):
    """A user-supplied argument or config value is invalid ("expected X, got Y")."""


class ToolError(RepogymError):
    """The agent's tool call was wrong; ``kind`` names how (it becomes ``info["error"]``).

    Caught by the environment and turned into an observation: the agent's mistake, never raised out of ``step``.
    """

    def __init__(self, kind: str, message: str):
        self.kind, self.message = kind, message
        super().__init__(message)


class TaskFileError(RepogymError, ValueError):
    """A task file is malformed; names the file, line and field."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str):
        self.path, self.line, self.field, self.message = path, line, field, message
        where = f"{path}:{line}" if line is not None else path
        what = f" field {field!r}:" if field else ""
        super().__init__(f"{where}:{what} {message}")


class InfraError(RepogymError):
    """Infrastructure failed (sandbox died, daemon error, harness timeout). Never the agent's fault."""

    def __init__(self, where: str, message: str):
        self.where, self.message = where, message
        super().__init__(f"[{where}] {message}")


class SandboxError(InfraError):
    """The sandbox backend failed: could not start, its runner died, a request got no answer."""


class SandboxUnavailable(SandboxError):
    """A backend cannot run on this machine (no Docker daemon, no bubblewrap)."""


class SandboxKilledByAgent(RepogymError):
    """The agent's own commands killed the sandbox (its runner, its container's processes).

    Not an :class:`InfraError`: the episode is the agent's and scores 0. Were it excluded like an
    infrastructure failure, a policy about to fail would learn to crash its sandbox instead.
    """

    def __init__(self, where: str, message: str):
        self.where, self.message = where, message
        super().__init__(f"[{where}] {message}")


class EvaluationError(InfraError):
    """Grading could not produce a trustworthy per-test report."""
