"""Agents: the ``Agent`` protocol and a registry of agents by name (imported lazily on use)."""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

from repogym.envs.errors import ConfigError


@runtime_checkable
class Agent(Protocol):
    """Something that turns observations into tool calls (text)."""

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """A new episode starts with this observation (the problem statement) and info."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next action: one tool call as text."""


AGENTS = {
    "oracle": "repogym.agents.oracle:OracleAgent",
    "null": "repogym.agents.null:NullAgent",
    "replay": "repogym.agents.replay:ReplayAgent",
    "llm": "repogym.agents.llm:LLMAgent",
    "hf": "repogym.agents.hf:HFAgent.from_pretrained",
}


def make_agent(name: str, **kwargs: Any) -> Agent:
    """An agent by registry name; a miss lists the valid names."""
    if name not in AGENTS:
        raise ConfigError(f"unknown agent {name!r}: expected one of {sorted(AGENTS)}")
    module, attr = AGENTS[name].split(":")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):  # "Class" or "Class.constructor"
        target = getattr(target, part)
    return target(**kwargs)


__all__ = ["Agent", "AGENTS", "make_agent"]
