"""``view``, ``search``, ``create``, ``edit``: reading and changing files of the repository."""

from __future__ import annotations

import shlex

from repogym.envs.sandbox.base import SandboxRequestError
from repogym.envs.tools.base import Tool, ToolContext, ToolError, ToolResult, int_schema, repo_path, string_schema

MAX_FILE_BYTES = 2 << 20
MAX_VIEW_LINES = 800


def looks_binary(data: bytes) -> bool:
    """NUL bytes, or more than 5% of the first 8 KiB not decodable as UTF-8.

    The host's copy of the in-sandbox runner's test for binary command output (``inside/runner.py``, which the host
    never imports: it runs in the sandbox, stdlib only); ``tests/test_layers.py`` checks that the two agree."""
    sample = data[:8192]
    if b"\0" in sample:
        return True
    return sample.decode("utf-8", errors="replace").count("\ufffd") > len(sample) // 20 + 1


def _read_text(ctx: ToolContext, path: str, for_edit: bool = False) -> str:
    """A file's text; ``for_edit``: refused when it would not come back whole (too large, not UTF-8)."""
    try:
        data = ctx.sandbox.read_file(path, limit=MAX_FILE_BYTES + 1 if for_edit else MAX_FILE_BYTES)
    except FileNotFoundError as exc:
        if "directory" in str(exc):
            raise ToolError("is_directory", f"{path} is a directory") from None
        raise ToolError("not_found", f"{path}: no such file") from None
    except SandboxRequestError as exc:
        raise ToolError("path_outside_repo" if "outside" in str(exc) else "bad_arguments", str(exc)) from None
    if looks_binary(data):
        raise ToolError("binary_file", f"{path} is a binary file ({len(data)} bytes); it cannot be shown as text")
    if for_edit:
        if len(data) > MAX_FILE_BYTES:
            raise ToolError("file_too_large", f"{path} is over {MAX_FILE_BYTES} bytes; edit it with bash (sed)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError("not_utf8", f"{path} is not UTF-8 text; edit would change its bytes: use bash") from None
    return data.decode("utf-8", errors="replace")


def run_view(ctx: ToolContext, args: dict) -> ToolResult:
    path = repo_path(args["path"], ctx.repo_dir)
    try:
        text = _read_text(ctx, path)
    except ToolError as exc:
        if exc.kind != "is_directory":
            raise
        listing = ctx.sandbox.run(f"ls -la {shlex.quote(path)}", timeout=30)
        return ToolResult(listing.stdout or listing.stderr, exit_code=listing.exit_code)
    lines = text.splitlines()
    start = args.get("start_line", 1)
    end = args.get("end_line", min(len(lines), start + MAX_VIEW_LINES - 1))
    if start < 1 or end < start:
        raise ToolError("bad_arguments", f"view: expected 1 <= start_line <= end_line, got {start}..{end}")
    if lines and start > len(lines):
        raise ToolError("bad_arguments", f"view: {path} has {len(lines)} lines; start_line {start} is past the end")
    end = min(end, len(lines), start + MAX_VIEW_LINES - 1)
    width = len(str(end))
    body = "\n".join(f"{n:>{width}}\t{lines[n - 1]}" for n in range(start, end + 1))
    more = f"\n[lines {start}-{end} of {len(lines)}]" if (start > 1 or end < len(lines)) else ""
    return ToolResult((body or "[empty file]") + more, exit_code=0, data={"lines": len(lines)})


def run_search(ctx: ToolContext, args: dict) -> ToolResult:
    pattern = args["pattern"]
    if not pattern:
        raise ToolError("bad_arguments", "search: pattern is empty")
    path = repo_path(args.get("path", "."), ctx.repo_dir)
    command = (f"grep -rnIE --exclude-dir=.git --color=never -e {shlex.quote(pattern)} -- {shlex.quote(path)}"
               " | head -n 200")
    result = ctx.sandbox.run("set -o pipefail; " + command, timeout=60)
    if result.exit_code == 1 and not result.stdout:
        return ToolResult(f"no matches for {pattern!r} in {path}", exit_code=1)
    if result.exit_code not in (0, 1, 141):
        raise ToolError("bad_arguments", f"search failed: {result.stderr.strip() or 'invalid pattern'} "
                                         "(pattern is an extended regular expression)")
    lines = result.stdout.splitlines()
    suffix = "\n[first 200 matches shown]" if len(lines) >= 200 else ""
    return ToolResult(result.stdout.rstrip("\n") + suffix, exit_code=0, data={"matches": len(lines)})


def _write(ctx: ToolContext, path: str, text: str) -> str | None:
    """Write ``text`` to ``path``; the tree id after it (for the env's edit check), or None where it cannot be told."""
    try:
        return ctx.sandbox.write_file(path, text.encode("utf-8"), tree=True)
    except IsADirectoryError:
        raise ToolError("is_directory", f"{path} is a directory") from None
    except SandboxRequestError as exc:
        raise ToolError("path_outside_repo" if "outside" in str(exc) else "bad_arguments", str(exc)) from None


def run_create(ctx: ToolContext, args: dict) -> ToolResult:
    path = repo_path(args["path"], ctx.repo_dir)
    existed = True
    try:
        _read_text(ctx, path)
    except ToolError as exc:
        if exc.kind == "is_directory":
            raise
        existed = False
    tree = _write(ctx, path, args["content"])
    verb = "overwrote" if existed else "created"
    return ToolResult(f"{verb} {path} ({len(args['content'].splitlines())} lines)", exit_code=0, tree=tree)


def run_edit(ctx: ToolContext, args: dict) -> ToolResult:
    path, old, new = repo_path(args["path"], ctx.repo_dir), args["old"], args["new"]
    if not old:
        raise ToolError("bad_arguments", "edit: old is empty; use create to write a whole file")
    text = _read_text(ctx, path, for_edit=True)
    count = text.count(old)
    if count == 0:
        raise ToolError("no_match", f"edit: old text not found in {path}; it must match exactly, whitespace included")
    if count > 1:
        raise ToolError("ambiguous_match", f"edit: old text occurs {count} times in {path}; include more context "
                                           "so it matches exactly once")
    tree = _write(ctx, path, text.replace(old, new, 1))
    line = text[:text.index(old)].count("\n") + 1
    return ToolResult(f"edited {path} at line {line}", exit_code=0, data={"line": line}, tree=tree)


VIEW = Tool("view", "Show a file with line numbers (or list a directory). Paths are relative to the repository root.",
            {"type": "object", "properties": {"path": string_schema("File or directory."),
                                              "start_line": int_schema("First line (1-based)."),
                                              "end_line": int_schema("Last line (inclusive).")},
             "required": ["path"]}, run_view)
SEARCH = Tool("search", "Search files for an extended regular expression (grep -rnE); at most 200 matches.",
              {"type": "object", "properties": {"pattern": string_schema("Regular expression."),
                                                "path": string_schema("File or directory (default: the repository).")},
               "required": ["pattern"]}, run_search)
CREATE = Tool("create", "Create a file (or replace its whole content).",
              {"type": "object", "properties": {"path": string_schema("File path."),
                                                "content": string_schema("The full content.")},
               "required": ["path", "content"]}, run_create, edits=True)
EDIT = Tool("edit", "Replace one exact occurrence of `old` with `new` in a file; `old` must occur exactly once.",
            {"type": "object", "properties": {"path": string_schema("File path."),
                                              "old": string_schema("Exact text to replace."),
                                              "new": string_schema("Replacement text.")},
             "required": ["path", "old", "new"]}, run_edit, edits=True)
