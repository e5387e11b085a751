"""Agents: the ``Agent`` protocol and a registry of agents by name (imported lazily on use).

The agents' typed errors are in :mod:`repogym.agents.errors`; how an episode ended is a
:class:`repogym.envs.core.status.Status`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.registry import Registry


@runtime_checkable
class Agent(Protocol):
    """Something that turns observations into tool calls (text)."""

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """A new episode starts with this observation (the problem statement) and info."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next action: one tool call as text."""


AGENTS: Registry[Any] = Registry("agent", {
    "oracle": "repogym.agents.oracle:OracleAgent",
    "null": "repogym.agents.null:NullAgent",
    "replay": "repogym.agents.replay:ReplayAgent",
    "llm": "repogym.agents.llm:LLMAgent",
    "hf": "repogym.agents.hf:HFAgent.from_pretrained",
})


def make_agent(name: str, **kwargs: Any) -> Agent:
    """An agent by registry name; a miss lists the valid names, an option the agent does not take is a
    :class:`ConfigError` naming the options given."""
    factory = AGENTS.resolve(name)
    try:
        return factory(**kwargs)
    except TypeError as exc:  # an option the agent's constructor does not take
        raise ConfigError(f"agent {name!r} rejected its options {sorted(kwargs)}: {exc}") from exc


__all__ = ["Agent", "AGENTS", "make_agent"]
