"""Reading unified git diffs: which files changed, which lines, and applying hunks in memory.

Guaranteed: ``git diff`` output (``a/``/``b/`` prefixes, new/deleted/renamed files, ``\\ No newline``
markers, binary stanzas without hunks) parses. Not guaranteed: fuzzy application; ``apply_patch``
trusts the hunks' line numbers and raises ConfigError when the context does not match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from repogym.envs.core.errors import ConfigError

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class FileDiff:
    """One file's part of a diff; a path is None on the /dev/null side."""

    old_path: str | None
    new_path: str | None
    added: dict[int, str] = field(default_factory=dict)  # new-side line -> text
    removed: dict[int, str] = field(default_factory=dict)  # old-side line -> text
    hunks: list[tuple[int, list[str]]] = field(default_factory=list)  # (old start, body lines)


def _strip_prefix(raw: str, prefix: str) -> str | None:
    raw = raw.rstrip("\n").split("\t")[0]
    if raw.startswith('"') and raw.endswith('"'):
        raw = raw[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode(
            "latin-1").decode("utf-8", "replace")
    if raw == "/dev/null":
        return None
    return raw.removeprefix(prefix)


def parse_diff(diff: str) -> list[FileDiff]:
    """Split a unified diff into per-file changes with the changed line numbers on each side."""
    files: list[FileDiff] = []
    current: FileDiff | None = None
    old_line = new_line = 0
    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            match = re.match(r'diff --git (?:"?a/)(.*?)"? (?:"?b/)(.*?)"?$', line)
            old, new = (match.group(1), match.group(2)) if match else (None, None)
            current = FileDiff(old, new)
            files.append(current)
            in_hunk = False
            continue
        if current is None and line.startswith(("--- ", "@@")):
            current = FileDiff(None, None)
            files.append(current)
        if current is None:
            continue
        if line.startswith("@@"):
            match = _HUNK.match(line)
            if not match:
                raise ConfigError(f"expected a hunk header '@@ -a,b +c,d @@', got {line!r}")
            old_line, new_line = int(match.group(1)), int(match.group(3))
            current.hunks.append((old_line, []))
            in_hunk = True
            continue
        if in_hunk and line[:1] in (" ", "+", "-", "\\") or (in_hunk and line == ""):
            if line.startswith("\\"):
                current.hunks[-1][1].append(line)
                continue
            current.hunks[-1][1].append(line)
            tag, text = (line[:1] or " "), line[1:]
            if tag == "+":
                current.added[new_line] = text
                new_line += 1
            elif tag == "-":
                current.removed[old_line] = text
                old_line += 1
            else:
                old_line += 1
                new_line += 1
            continue
        in_hunk = False
        if line.startswith("--- "):
            current.old_path = _strip_prefix(line[4:], "a/")
        elif line.startswith("+++ "):
            current.new_path = _strip_prefix(line[4:], "b/")
        elif line.startswith("new file mode"):
            current.old_path = None
        elif line.startswith("deleted file mode"):
            current.new_path = None
        elif line.startswith("rename from "):
            current.old_path = line[len("rename from "):]
        elif line.startswith("rename to "):
            current.new_path = line[len("rename to "):]
    return files


def apply_patch(before: bytes | None, file_diff: FileDiff) -> bytes | None:
    """The file after applying ``file_diff``'s hunks to ``before``; None when the diff deletes it."""
    if file_diff.new_path is None:
        return None
    old_lines = (before or b"").decode("utf-8", "surrogateescape").splitlines(keepends=True)
    out: list[str] = []
    cursor = 0  # index into old_lines of the next line not yet copied
    for old_start, body in file_diff.hunks:
        start = max(old_start - 1, 0) if any(b[:1] in (" ", "-") for b in body) else old_start
        out.extend(old_lines[cursor:start])
        cursor = start
        last = ""
        for entry in body:
            tag, text = entry[:1] or " ", entry[1:]
            if tag == "\\":
                # "no newline at end of file" belongs to the line before it; only ours can lose it
                if last in (" ", "+") and out and out[-1].endswith("\n"):
                    out[-1] = out[-1][:-1]
                continue
            last = tag
            if tag in (" ", "-"):
                if cursor >= len(old_lines) or old_lines[cursor].rstrip("\r\n") != text.rstrip("\r\n"):
                    raise ConfigError(f"patch does not apply to {file_diff.old_path} at line {cursor + 1}")
                if tag == " ":
                    out.append(old_lines[cursor])
                cursor += 1
            else:
                out.append(text + "\n")
    out.extend(old_lines[cursor:])
    return "".join(out).encode("utf-8", "surrogateescape")
