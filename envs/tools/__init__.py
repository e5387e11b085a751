"""Tools an agent calls, by name. Each is a schema plus ``run(context, arguments) -> ToolResult``.

``submit`` is listed here for its schema; the environment handles it (it ends the episode).
"""

from __future__ import annotations

from repogym.envs.core.registry import Registry
from repogym.envs.tools.base import Tool, ToolContext, ToolError, ToolResult
from repogym.envs.tools.files import CREATE, EDIT, SEARCH, VIEW
from repogym.envs.tools.inspect import INSPECT_DIFF
from repogym.envs.tools.patches import APPLY_PATCH, DIFF
from repogym.envs.tools.shell import BASH
from repogym.envs.tools.tests import RUN_TESTS


def _submit(ctx: ToolContext, args: dict) -> ToolResult:  # pragma: no cover - the env intercepts submit
    raise ToolError("bad_arguments", "submit is handled by the environment")


SUBMIT = Tool("submit", "Submit the current changes for grading; ends the episode.", {"type": "object", "properties": {}},
              _submit)

TOOLS: Registry[Tool] = Registry("tool", {t.name: t for t in (BASH, VIEW, SEARCH, EDIT, CREATE, APPLY_PATCH,
                                                               RUN_TESTS, DIFF, INSPECT_DIFF, SUBMIT)},
                                  error=lambda message: ToolError("unknown_tool", message))


def get_tool(name: str) -> Tool:
    """A tool by name; a miss lists the valid names."""
    return TOOLS.resolve(name)


def register_tool(tool: Tool) -> None:
    """Add (or replace) a tool by its name."""
    TOOLS.register(tool.name, tool)


def tools_schema(names: list[str] | None = None) -> list[dict]:
    """OpenAI tools JSON of the named tools (all by default)."""
    return [get_tool(n).schema() for n in (names or list(TOOLS))]


def select_tools(schemas: list[dict], names: list[str] | None) -> list[dict]:
    """The OpenAI tool schemas among ``schemas`` named in ``names`` (None: all of them)."""
    return list(schemas) if names is None else [t for t in schemas if t["function"]["name"] in names]


__all__ = ["Tool", "ToolContext", "ToolError", "ToolResult", "TOOLS", "get_tool", "register_tool", "select_tools", "tools_schema"]
