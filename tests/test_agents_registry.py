"""make_agent: options checked against the agent's signature (a typo names the closest option), and an error raised
inside an agent's constructor propagates as itself."""

from __future__ import annotations

import pytest

from repogym.agents import AGENTS, Agent, make_agent
from repogym.envs.core.errors import ConfigError


def test_a_misspelt_option_names_the_closest_one_and_every_option():
    with pytest.raises(ConfigError) as caught:
        make_agent("oracle", stlye="edit")
    assert str(caught.value) == ("agent 'oracle' has no option 'stlye' (did you mean 'style'?); its options: "
                                 "context, style, suite, tasks")


def test_a_misspelt_hf_or_llm_option_names_the_closest_one():
    with pytest.raises(ConfigError, match="agent 'hf' has no option 'temprature' \\(did you mean 'temperature'"):
        make_agent("hf", path="unused", temprature=0.5)
    with pytest.raises(ConfigError, match="LLMAgent has no option 'modle' \\(did you mean 'model'"):
        make_agent("llm", modle="m")


def test_a_missing_option_is_a_config_error():
    class NeedsPath:
        def __init__(self, path: str):
            self.path = path

    AGENTS.register("needs-path", NeedsPath)
    try:
        with pytest.raises(ConfigError, match="agent 'needs-path': missing a required argument: 'path'"):
            make_agent("needs-path")
    finally:
        AGENTS._entries.pop("needs-path")


def test_a_type_error_inside_a_constructor_propagates_as_itself():
    class Broken:
        def __init__(self, size: int = 1):
            self.size = len(size)  # a bug: TypeError inside the constructor, not a wrong option

    AGENTS.register("broken", Broken)
    try:
        with pytest.raises(TypeError, match="has no len") as caught:
            make_agent("broken", size=3)
        assert not isinstance(caught.value, ConfigError)
        assert caught.traceback[-1].name == "__init__"  # raised where the bug is, not re-raised by make_agent
    finally:
        AGENTS._entries.pop("broken")


@pytest.mark.parametrize("name, options", [("null", {}), ("replay", {"actions": []}), ("oracle", {"tasks": []})])
def test_every_builtin_agent_implements_the_protocol_turn_record_included(name, options):
    agent = make_agent(name, **options)
    assert isinstance(agent, Agent) and agent.turn_record() is None
