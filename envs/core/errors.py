"""Typed failures of the environment stack: every exception class of ``repogym.envs`` is defined here.

Three kinds of failure get three treatments (see docs/architecture.md):

- the agent's mistakes (bad tool call, path outside the repo, broken patch, tests that hang) are
  *observations*, never raised out of ``step``: :class:`ToolError` and :class:`SandboxRequestError` are
  raised inside the stack and turned into observations where the tool call is handled;
- control flow (submit, turn limit) is explicit in ``step``'s return values;
- infrastructure failures are :class:`InfraError` and its subclasses. Each names where it happened
  (``where``) so a trajectory can record it and training can drop the episode instead of learning from a fake 0.

A wrong argument or config value is a :class:`ConfigError` ("expected X, got Y"); a malformed task file a
:class:`TaskFileError` (:class:`TaskCannotFail`, also a :class:`ConfigError`, for a task with no FAIL_TO_PASS test).
:class:`SandboxKilledByAgent` is the agent's outcome (graded unresolved: its tests score 0), not an
infrastructure failure, though it carries ``where`` too. The task generator's drop signals
(:class:`MutantTimeout`, :class:`MutationNotLongHorizon`) never leave :func:`repogym.envs.taskgen.generate.generate`.
Every class here subclasses :class:`RepogymError`, so a caller can catch all of repogym's deliberate failures at once.
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


class TaskCannotFail(TaskFileError, ConfigError):
    """A task record with no FAIL_TO_PASS test: no patch can fail it, so it would pay every agent, even one that does
    nothing. Loaders refuse it unless told to skip such tasks (``skip_no_f2p=True``, ``--skip-no-f2p``)."""


class LocatedError(RepogymError):
    """A failure that names where it happened (``where``, a step such as ``sandbox.start``) and what (``message``).

    The base of every error a trajectory or an evaluation record carries as ``{"where": ..., "message": ...}``
    (:meth:`record`): infrastructure failures, the agent's killed or refusing sandbox, our own bugs."""

    def __init__(self, where: str, message: str):
        self.where, self.message = where, message
        super().__init__(f"[{where}] {message}")

    def record(self) -> dict[str, str]:
        """The error as results store it: ``{"where": ..., "message": ...}``."""
        return {"where": self.where, "message": self.message}


class InfraError(LocatedError):
    """Infrastructure failed (sandbox died, daemon error, harness timeout). Never the agent's fault."""


class InternalError(LocatedError):
    """A bug of repogym's own: neither the agent nor the outside world caused it.

    Raised by :func:`repogym.envs.core.bugs.report_bug` in strict mode (the test suite); otherwise the bug is
    logged with its traceback, counted, and its episode excluded with status ``internal_error``."""


class SandboxError(InfraError):
    """The sandbox backend failed: could not start, its runner died, a request got no answer."""


class SandboxUnavailable(SandboxError):
    """A backend cannot run on this machine (no Docker daemon, no bubblewrap)."""


class InstallFailed(InfraError):
    """A task's install steps failed in a freshly loaded tree, before the agent acted: its environment cannot
    install the repository (a missing wheel, a Python the project does not support)."""


class SandboxKilledByAgent(LocatedError):
    """The agent's own commands killed the sandbox (its runner, its container's processes).

    Not an :class:`InfraError`: the episode is the agent's, graded unresolved (its tests score 0). Were it excluded
    like an infrastructure failure, a policy about to fail would learn to crash its sandbox instead.
    """


class RunnerExited(SandboxError):
    """The in-sandbox runner's output stream ended: it exited or was killed (the client blames agent or infra)."""


class RunnerTimeout(SandboxError):
    """The in-sandbox runner did not answer in time (frozen from outside, or starved by what runs inside)."""


class SandboxRequestError(RepogymError):
    """The runner refused a request (bad path, git failure); the sandbox itself is fine.

    Not an :class:`InfraError`: the request was wrong (usually the agent's), so callers turn it into an
    observation or an ``unresolved`` grade, never an excluded episode."""


class SandboxRefused(LocatedError):
    """After the agent acted, its sandbox refused what the harness needed of it: staging a test run (a full or
    read-only ``/tmp``), listing what a patch changed. ``where`` names the step.

    Not an :class:`InfraError`: the agent's sandbox is the agent's doing, so the tool call becomes an error
    observation and grading ``unresolved``. Were it excluded, a failing policy would learn to break its sandbox
    to drop the episode."""


class ForkRefused(RepogymError):
    """An episode could not be branched (``RepoTaskEnv.fork``): its files are over the size limit, or its sandbox
    refused or died by the agent's hand. Not an :class:`InfraError`: the agent's state caused it; the source
    episode goes on (a dead sandbox ends it at its next step, as the agent's outcome)."""

    def __init__(self, message: str):
        self.message = message
        super().__init__(f"cannot fork this episode: {message}")


class TestRunTimeout(InfraError):
    """A test run passed the harness's time limit (the tests hung, not the sandbox failing)."""

    __test__ = False  # not a pytest test class


class SourceNotUsable(ConfigError):
    """The task generator's source has no tests that run (none found, a missing dependency, a collection error)."""


class MutantTimeout(RepogymError):
    """The task generator's mutant made the tests run past their time: the mutation is dropped."""


class MutationNotLongHorizon(RepogymError):
    """In long-horizon task generation, a test too close to the mutation catches it: the mutation is dropped."""
