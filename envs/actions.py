"""Parsing an action (one tool call) from what a model writes.

Accepted: a JSON object ``{"name": ..., "arguments": {...}}`` (``arguments`` may itself be a JSON
string, as OpenAI returns it), the OpenAI shape ``{"type": "function", "function": {...}}``, or model text
holding one ``<tool_call>{...}</tool_call>`` block (Hermes / Qwen style). A dict is taken as the parsed
JSON. Anything else raises :class:`repogym.envs.tools.ToolError` with kind ``parse_error``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from repogym.envs.tools.base import ToolError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FORMAT_HINT = ('write exactly one tool call, as JSON {"name": "<tool>", "arguments": {...}} or inside '
               '<tool_call>...</tool_call>')


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call."""

    name: str
    arguments: dict[str, Any]


def parse_action(action: Any) -> ToolCall:
    """The tool call in ``action`` (text or dict)."""
    if isinstance(action, dict):
        return _from_object(action)
    if not isinstance(action, str):
        raise ToolError("parse_error", f"expected the action as text, got {type(action).__name__}; {FORMAT_HINT}")
    text = action.strip()
    blocks = _blocks(text)
    if len(blocks) > 1:
        raise ToolError("parse_error", f"found {len(blocks)} <tool_call> blocks; one step takes one tool call")
    if blocks:
        text = blocks[0]
    elif OPEN in text:
        raise ToolError("parse_error", "a <tool_call> block is not closed with </tool_call>")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError("parse_error", f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                                       f"{FORMAT_HINT}") from None
    except RecursionError:
        raise ToolError("parse_error", f"the JSON is nested too deeply; {FORMAT_HINT}") from None
    return _from_object(obj)


def _blocks(text: str) -> list[str]:
    """The contents of each closed ``<tool_call>`` block, stripped (a plain scan: a regex backtracks badly
    over long whitespace)."""
    found, start = [], text.find(OPEN)
    while start != -1:
        end = text.find(CLOSE, start + len(OPEN))
        if end == -1:
            break
        found.append(text[start + len(OPEN):end].strip())
        start = text.find(OPEN, end + len(CLOSE))
    return found


def _from_object(obj: Any) -> ToolCall:
    if not isinstance(obj, dict):
        raise ToolError("parse_error", f"expected a JSON object, got {type(obj).__name__}; {FORMAT_HINT}")
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ToolError("parse_error", f"the tool call has no \"name\" string; {FORMAT_HINT}")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolError("parse_error", f"arguments of {name!r} are not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise ToolError("parse_error", f"arguments of {name!r} are nested too deeply") from None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolError("parse_error", f"arguments of {name!r} must be a JSON object, got {type(args).__name__}")
    return ToolCall(name, args)
