"""The agents' typed failures, in one place (the environment's own are in :mod:`repogym.envs.core.errors`).

Each one subclasses :class:`repogym.envs.core.errors.RepogymError`, so the CLI reports it as a clean error, and
keeps to the three treatments of failure there:
- :class:`ContextOverflow` is the *policy's* limit, not the machine's: the rollout ends the episode as
  ``context_overflow`` with reward 0, kept for training;
- :class:`LLMHTTPError` and :class:`TransientLLMError` are infrastructure (:class:`InfraError`, ``where="llm"``):
  the rollout ends the episode as ``infra_error`` with a NaN reward, excluded from training and metrics;
- :class:`LLMServerUnreachable` (also an :class:`InfraError`) is raised by
  :meth:`repogym.agents.llm.LLMAgent.check_server` before any episode: no server answers at the agent's URL, so a
  benchmark stops at once instead of storing one infra error per episode;
- :class:`TrajectoryFileError` is a malformed trajectory file (a user's input), naming the file and line.

A wrong agent option is a :class:`repogym.envs.core.errors.ConfigError`, raised when the agent is built.
"""

from __future__ import annotations

from repogym.envs.core.errors import InfraError, RepogymError


class ContextOverflow(RepogymError):
    """The prompt is over the model's context: the ``full`` policy does not cut."""

    def __init__(self, tokens: int, limit: int):
        self.tokens, self.limit = tokens, limit
        super().__init__(f"the prompt has {tokens} tokens, over the model's context of {limit}; use the "
                         "'window' or 'summary' context policy")


class LLMHTTPError(InfraError):
    """The server refused the request with an HTTP error that a retry would not fix (4xx other than 429)."""

    def __init__(self, url: str, status: int, body: str):
        self.url, self.status, self.body = url, status, body
        super().__init__("llm", f"POST {url} returned HTTP {status}: {body[:500]}")


class TransientLLMError(InfraError):
    """A server-side failure worth another attempt: connection refused, timeout, HTTP 429 or 5xx, a garbled body.

    Control flow inside :class:`repogym.agents.llm.LLMAgent`: its retry loop catches it, and after the last
    retry raises an :class:`InfraError` naming the last one. Never seen outside the agent.
    """

    def __init__(self, message: str):
        super().__init__("llm", message)


class LLMServerUnreachable(InfraError):
    """No server answers at the agent's ``base_url`` (checked before the first episode): says how to start one and
    how to point the agent at it."""

    def __init__(self, base_url: str, reason: str):
        self.base_url, self.reason = base_url, reason
        super().__init__("llm", f"no model server answers at {base_url} ({reason}). Start an OpenAI-compatible "
                                "server, e.g. `repogym proxy --model smollm2-135m-instruct` (a small CPU model; it "
                                "serves http://127.0.0.1:8000/v1) or `vllm serve MODEL`, and point the llm agent at "
                                "it with the base_url and model options (repogym bench: --agent-config FILE holding "
                                "`base_url: http://HOST:PORT/v1` and `model: NAME`; or $REPOGYM_LLM_BASE_URL and "
                                "$REPOGYM_LLM_MODEL)")


class TrajectoryFileError(RepogymError, ValueError):
    """A trajectory file is malformed (no header, an unknown format, a line that is not a JSON object)."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line, self.message = str(path), line, message
        super().__init__(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")


__all__ = ["ContextOverflow", "LLMHTTPError", "LLMServerUnreachable", "TrajectoryFileError", "TransientLLMError"]
