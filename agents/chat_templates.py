"""Chat templates that render repogym's tools in the tool-call format a model family writes.

Small instruct models often ship a template that ignores ``tools`` (SmolLM2's renders a default system prompt
and nothing else): the model is never told which tools exist, and never calls one. :data:`TEMPLATES` holds
templates for such families, and :func:`tool_template` picks the template a tokenizer should use: its own when
it renders tools, else the family's from this module.

``hermes-chatml`` is ChatML with Hermes tool calls (Qwen 2.5's layout): the tools as JSON lines inside
``<tools>`` in the system turn, calls as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, tool
output as a ``user`` turn inside ``<tool_response>``. With ``few_shot`` (a template argument, on unless it is
false) example turns follow the system turn: a short request and the call that answers it, for each of the
tools on offer among look (view or bash), edit and submit. Measured on SmolLM2-135M-Instruct (flips task, tools
edit and submit, 4 samples): no examples 0 parseable calls, an example episode with tool responses 0 (the model
writes a ``<tool_response>`` itself), request/call pairs 3.

The same template string is what the hf agent, the chat proxy and a vLLM OpenAI server (it reads the
tokenizer's template from the model folder) render, so all three feed a model the same prompt token for token.
"""

from __future__ import annotations

from jinja2 import TemplateError

from repogym.envs.core.errors import ConfigError


def _call(name: str, arguments: str) -> str:
    return "'<tool_call>\\n{\"name\": \"" + name + "\", \"arguments\": " + arguments + "}\\n</tool_call>'"


def _turn(role: str, text: str) -> str:
    return "{{- '<|im_start|>" + role + "\\n' + " + text + " + '<|im_end|>\\n' }}"


# Jinja, kept readable: the system turn (with the tools), the optional example turns, then the messages.
HERMES_CHATML = "".join([
    "{%- set few_shot = few_shot if few_shot is defined else true %}",
    "{%- if messages and messages[0].role == 'system' %}{%- set system = messages[0].content %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = 'You are a helpful AI assistant.' %}"
    "{%- set rest = messages %}{%- endif %}",
    "{{- '<|im_start|>system\\n' + system }}",
    "{%- set names = namespace(list=[]) %}",
    "{%- if tools %}",
    "{{- '\\n\\n# Tools\\n\\nYou call one function per turn. The functions, inside <tools></tools>:\\n<tools>' }}",
    "{%- for tool in tools %}{%- set fn = tool.function if tool.function is defined else tool %}"
    "{%- set names.list = names.list + [fn.name] %}{{- '\\n' + (fn | tojson) }}{%- endfor %}",
    "{{- '\\n</tools>\\n\\nTo call a function, answer with its name and arguments as JSON inside <tool_call>"
    "</tool_call> tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n"
    "</tool_call>' }}",
    "{%- endif %}",
    "{{- '<|im_end|>\\n' }}",
    "{%- if tools and few_shot %}",
    "{%- if 'view' in names.list %}",
    _turn("user", "'Show me the file shapes.py.'"),
    _turn("assistant", _call("view", '{\"path\": \"shapes.py\"}')),
    "{%- elif 'bash' in names.list %}",
    _turn("user", "'Show me the file shapes.py.'"),
    _turn("assistant", _call("bash", '{\"command\": \"cat shapes.py\"}')),
    "{%- endif %}",
    "{%- if 'edit' in names.list %}",
    _turn("user", "'In shapes.py, `return w + h` should be `return w * h`.'"),
    _turn("assistant", _call("edit", '{\"path\": \"shapes.py\", \"old\": \"return w + h\", \"new\": \"return w * h\"}')),
    "{%- endif %}",
    "{%- if 'submit' in names.list %}",
    _turn("user", "'Done: submit the change.'"),
    _turn("assistant", _call("submit", "{}")),
    "{%- endif %}",
    "{%- endif %}",
    "{%- for message in rest %}",
    "{%- if message.role == 'assistant' %}",
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}",
    "{%- for call in message.tool_calls or [] %}{%- set fn = call.function if call.function is defined else call %}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn.name + '\", \"arguments\": ' }}"
    "{%- if fn.arguments is string %}{{- fn.arguments }}{%- else %}{{- fn.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}{%- endfor %}",
    "{{- '<|im_end|>\\n' }}",
    "{%- elif message.role == 'tool' %}",
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}",
    "{%- else %}",
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}",
    "{%- endif %}",
    "{%- endfor %}",
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
])

TEMPLATES: dict[str, str] = {"hermes-chatml": HERMES_CHATML}

_PROBE_TOOL = [{"type": "function", "function": {"name": "repogym_probe_tool", "description": "probe",
                                                   "parameters": {"type": "object", "properties": {}}}}]


def renders_tools(tokenizer, template: str | None = None) -> bool:
    """Whether ``template`` (default: the tokenizer's own) puts the tools it is given into the prompt."""
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tokenizer.apply_chat_template(messages, tools=_PROBE_TOOL, chat_template=template, tokenize=False)
    return "repogym_probe_tool" in text


def tool_template(tokenizer) -> str:
    """The chat template to render ``tokenizer``'s prompts with tools: its own if it renders tools, else the
    template of its family (ChatML -> ``hermes-chatml``)."""
    own = getattr(tokenizer, "chat_template", None)
    if not own:
        raise ConfigError("the tokenizer has no chat_template; repogym needs one to wrap turns")
    try:
        if renders_tools(tokenizer):
            return own
    except TemplateError:  # a template that refuses the probe's turns (no system role, say) keeps its own
        return own
    if "<|im_start|>" in own:
        return HERMES_CHATML
    raise ConfigError("the tokenizer's chat template does not render tools and its family has no template in "
                      f"repogym.agents.chat_templates (known: {', '.join(TEMPLATES)}); set a chat_template in the "
                      "model folder's tokenizer_config.json that renders tools")


__all__ = ["HERMES_CHATML", "TEMPLATES", "renders_tools", "tool_template"]
