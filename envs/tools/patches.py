"""``apply_patch`` and ``diff``: changes as unified diffs."""

from __future__ import annotations

from repogym.envs.tools.base import Tool, ToolContext, ToolError, ToolResult, string_schema

PATCH_FILE = ".git/repogym-agent.patch"  # inside .git: never part of the agent's diff


def run_apply_patch(ctx: ToolContext, args: dict) -> ToolResult:
    patch = args["patch"]
    if not patch.strip():
        raise ToolError("bad_arguments", "apply_patch: patch is empty")
    if not patch.endswith("\n"):
        patch += "\n"
    ctx.sandbox.write_file(PATCH_FILE, patch.encode("utf-8"))
    result = ctx.sandbox.run(f"git apply --whitespace=nowarn --recount {PATCH_FILE} 2>&1 || "
                             f"{{ git apply --whitespace=nowarn --recount -p0 {PATCH_FILE} 2>/dev/null; }}; "
                             f"status=$?; rm -f {PATCH_FILE}; exit $status", timeout=60, tree=True)
    if not result.ok:
        raise ToolError("patch_failed", "apply_patch: the patch does not apply:\n" + result.stdout.strip()
                        + "\nExpected a unified diff relative to the repository root (---/+++ a/PATH b/PATH, "
                          "@@ hunks whose context matches the current files). Nothing was changed.")
    files = sorted({line[6:].strip() for line in patch.splitlines() if line.startswith("+++ b/")})
    return ToolResult(f"patch applied{': ' + ', '.join(files) if files else ''}", exit_code=0, data={"files": files},
                      tree=result.tree)


def run_diff(ctx: ToolContext, args: dict) -> ToolResult:
    text = ctx.sandbox.diff()
    return ToolResult(text or "[no changes against the base commit]", exit_code=0)


APPLY_PATCH = Tool("apply_patch", "Apply a unified diff (git style, paths relative to the repository root).",
                   {"type": "object", "properties": {"patch": string_schema("The unified diff.")},
                    "required": ["patch"]}, run_apply_patch, edits=True)
DIFF = Tool("diff", "Show every change made so far against the base commit, as a git diff.",
            {"type": "object", "properties": {}}, run_diff)
