"""Agents: the ``Agent`` protocol and a registry of agents by name (imported lazily on use).

The agents' typed errors are in :mod:`repogym.agents.errors`; how an episode ended is a
:class:`repogym.envs.core.status.Status`.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
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

    def turn_record(self) -> dict[str, Any] | None:
        """What the agent records of its last turn for the trajectory's ``step["agent"]`` (token-level agents:
        ``tokens``; API agents: ``usage``), or None when it has nothing to record."""


@runtime_checkable
class ForkableAgent(Agent, Protocol):
    """An agent that can be copied mid-episode (branching rollouts, :mod:`repogym.trainer.branching`)."""

    def fork(self, seed: int | None = None) -> "ForkableAgent":
        """This agent at this point of its episode, to go on apart from it, sampling with episode seed ``seed``."""


AGENTS: Registry[Any] = Registry("agent", {
    "oracle": "repogym.agents.oracle:OracleAgent",
    "null": "repogym.agents.null:NullAgent",
    "replay": "repogym.agents.replay:ReplayAgent",
    "llm": "repogym.agents.llm:LLMAgent",
    "hf": "repogym.agents.hf:HFAgent.from_pretrained",
})


def check_options(owner: str, given: Iterable[str], valid: Iterable[str]) -> None:
    """Raise a :class:`ConfigError` for the first option of ``given`` not in ``valid``, naming the closest valid
    one and all of them."""
    valid = sorted(valid)
    for option in sorted(given):
        if option not in valid:
            close = difflib.get_close_matches(option, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{owner} has no option {option!r}{hint}; its options: {', '.join(valid) or '(none)'}")


def _check_signature(owner: str, factory: Callable[..., Any], options: dict[str, Any]) -> None:
    """Check ``options`` against ``factory``'s signature before calling it, so a ``TypeError`` raised inside the
    constructor (a bug) is never mistaken for a wrong option."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: its call checks the options
        return
    params = signature.parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        named = [n for n, p in params.items()
                 if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
        check_options(owner, options, named)
    try:
        signature.bind(**options)
    except TypeError as exc:  # what is left: a required option missing
        raise ConfigError(f"{owner}: {exc}") from None


def make_agent(name: str, **kwargs: Any) -> Agent:
    """An agent by registry name; a miss lists the valid names, an option the agent does not take is a
    :class:`ConfigError` naming the closest valid one. An error raised inside the agent's constructor propagates
    as itself, with its traceback."""
    factory = AGENTS.resolve(name)
    _check_signature(f"agent {name!r}", factory, kwargs)
    return factory(**kwargs)


__all__ = ["Agent", "AGENTS", "ForkableAgent", "check_options", "make_agent"]
