"""``bash``: run a shell command in the repository."""

from __future__ import annotations

from repogym.envs.tools.base import Tool, ToolContext, ToolError, ToolResult, string_schema


def format_command_output(stdout: str, stderr: str, exit_code: int, timed_out: bool, timeout: float,
                          truncated: bool) -> str:
    """The observation text of a command: output, then a status line when it is not a clean exit."""
    parts = [stdout]
    if stderr:
        parts.append(("" if not stdout or stdout.endswith("\n") else "\n") + stderr)
    text = "".join(parts)
    if truncated:
        text += "\n[output truncated: past the sandbox's output limit]"
    if timed_out:
        text += f"\n[timed out after {timeout:g}s: the command and every process it started were killed]"
    elif exit_code != 0:
        text += f"\n[exit code {exit_code}]"
    return text if text.strip() else f"[no output, exit code {exit_code}]"


MAX_COMMAND_BYTES = 100_000


def run_bash(ctx: ToolContext, args: dict) -> ToolResult:
    command = args["command"]
    if not command.strip():
        raise ToolError("bad_arguments", "bash: command is empty")
    if len(command.encode()) > MAX_COMMAND_BYTES:  # the kernel refuses longer single arguments (E2BIG)
        raise ToolError("bad_arguments", f"bash: the command is {len(command.encode())} bytes, over "
                                         f"{MAX_COMMAND_BYTES}; write long content with create, not the command line")
    timeout = args.get("timeout", ctx.command_timeout)
    if not 0 < timeout <= ctx.max_timeout:
        raise ToolError("bad_arguments", f"bash: timeout must be in (0, {ctx.max_timeout:g}] seconds, got {timeout}")
    result = ctx.sandbox.run(command, timeout=timeout, tree=True)  # the env's edit check asks for it next
    text = format_command_output(result.stdout, result.stderr, result.exit_code, result.timed_out, timeout,
                                 result.truncated)
    return ToolResult(text, exit_code=result.exit_code, error="timeout" if result.timed_out else None,
                      data={"timed_out": result.timed_out, "command_duration_s": round(result.duration_s, 4)},
                      tree=result.tree)


BASH = Tool(
    name="bash",
    description="Run a bash command in the repository root (/repo). No network. Returns stdout, stderr and the "
                "exit code; a command past its timeout is killed with every process it started.",
    parameters={"type": "object", "properties": {
        "command": string_schema("The shell command."),
        "timeout": {"type": "number", "description": "Seconds before the command is killed (default 60)."}},
        "required": ["command"]},
    run=run_bash,
    edits=True,
)
