"""Chat templates for models whose own template ignores tools: chosen, rendered, and the same in every engine."""

from __future__ import annotations

import pytest

from repogym.agents.chat_templates import HERMES_CHATML, renders_tools, tool_template
from repogym.agents.hf import ChatFormat
from repogym.envs.core.errors import ConfigError
from repogym.envs.tools import tools_schema
from repogym.integrations.proxy import ChatProxy
from repogym.trainer.tiny import CHAT_TEMPLATE, build_tokenizer

# SmolLM2's stock template in miniature: ChatML that never looks at ``tools``.
PLAIN_CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tokenizer():
    tok = build_tokenizer(["def area(w, h):\n    return w * h\n", "<tool_call> edit submit view"] * 4, 400)
    tok.chat_template = PLAIN_CHATML
    return tok


def test_a_template_that_ignores_tools_is_replaced_by_its_familys_and_one_that_renders_them_is_kept(tokenizer):
    assert not renders_tools(tokenizer) and tool_template(tokenizer) == HERMES_CHATML
    assert renders_tools(tokenizer, HERMES_CHATML)
    tokenizer.chat_template = CHAT_TEMPLATE  # the tiny model's: renders tools
    try:
        assert tool_template(tokenizer) == CHAT_TEMPLATE
        tokenizer.chat_template = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"  # no family known
        with pytest.raises(ConfigError, match="does not render tools"):
            tool_template(tokenizer)
    finally:
        tokenizer.chat_template = PLAIN_CHATML


@pytest.mark.parametrize("tools, calls", [(["edit", "submit"], ["edit", "submit"]),
                                          (["view", "edit", "submit"], ["view", "edit", "submit"]),
                                          (["bash", "submit"], ["bash", "submit"]), (["submit"], ["submit"])])
def test_the_example_turns_call_only_the_tools_on_offer(tokenizer, tools, calls):
    text = tokenizer.decode(ChatFormat(tokenizer, "S", tools_schema(tools)).first_prompt("TASK"))
    listed = text[text.index("<tools>\n"):text.index("\n</tools>")]
    assert text.startswith("<|im_start|>system\nS\n\n# Tools") and listed.count("\n{\"name\": ") == len(tools)
    examples = text[text.index("\n</tools>"):text.index("TASK")]
    written = [c.split('"', 1)[0] for c in examples.split('<tool_call>\n{"name": "')[1:]]
    assert written == calls
    assert text.endswith("<|im_start|>user\nTASK<|im_end|>\n<|im_start|>assistant\n")
    bare = tokenizer.decode(ChatFormat(tokenizer, "S", tools_schema(tools), few_shot=False).first_prompt("TASK"))
    assert "<tool_call>\n{\"name\": \"" not in bare and "</tools>" in bare


def test_the_agent_and_the_proxy_render_the_same_ids_with_the_replaced_template(tokenizer):
    tools = tools_schema(["edit", "submit"])
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "fix area"}]
    proxy = ChatProxy(engine=None, tokenizer=tokenizer)
    ids, _ = proxy._render(proxy.episode("e"), messages, tools)
    assert ids == ChatFormat(tokenizer, "S", tools).first_prompt("fix area")
    bare, _ = proxy._render(proxy.episode("f"), messages, tools, {"few_shot": False})
    assert bare == ChatFormat(tokenizer, "S", tools, few_shot=False).first_prompt("fix area") != ids
