"""Parsing one tool call from model text."""

import pytest

from repogym.envs.actions import parse_action
from repogym.envs.tools import ToolError


@pytest.mark.parametrize("text", [
    '{"name": "bash", "arguments": {"command": "ls"}}',
    '{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}',
    '{"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}',
    'I will list files.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>',
])
def test_accepted_forms(text):
    call = parse_action(text)
    assert call.name == "bash" and call.arguments == {"command": "ls"}


def test_dict_action_and_missing_arguments():
    assert parse_action({"name": "diff"}).arguments == {}


@pytest.mark.parametrize("text, words", [
    ("hello", "invalid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"arguments": {}}', "no \"name\""),
    ('{"name": "bash", "arguments": [1]}', "must be a JSON object"),
    ('{"name": "bash", "arguments": "{bad"}', "not valid JSON"),
    ('<tool_call>{"name": "diff"}</tool_call><tool_call>{"name": "diff"}</tool_call>', "one tool call"),
    ('<tool_call>{"name": "diff"}', "not closed"),
])
def test_malformed_calls_say_what_is_wrong(text, words):
    with pytest.raises(ToolError) as err:
        parse_action(text)
    assert err.value.kind == "parse_error" and words in err.value.message


def test_non_text_action():
    with pytest.raises(ToolError, match="as text"):
        parse_action(42)
