"""Git patches: split per file (task patches, agent diffs), reversed (SWE-smith's bug patches), made from new files."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+?)$", re.M)


@dataclass
class FilePatch:
    """The part of a git patch that touches one file."""

    old_path: str
    new_path: str
    text: str

    @property
    def paths(self) -> set[str]:
        return {self.old_path, self.new_path} - {"/dev/null"}


def split_patch(patch: str) -> list[FilePatch]:
    """Split a git patch into per-file parts (text before the first header is dropped)."""
    starts = [m.start() for m in _HEADER.finditer(patch)]
    parts = []
    for begin, end in zip(starts, starts[1:] + [len(patch)]):
        text = patch[begin:end]
        match = _HEADER.match(text)
        parts.append(FilePatch(match.group(1), match.group(2), text))
    return parts


def touched_paths(patch: str) -> list[str]:
    """Every path a patch touches (old and new names), in order."""
    return list(dict.fromkeys(p for part in split_patch(patch) for p in (part.old_path, part.new_path)))


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def reverse_patch(patch: str) -> str:
    """The git patch that undoes ``patch`` (what ``git apply --reverse`` applies); ValueError if binary."""
    out: list[str] = []
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        bare = line.rstrip("\n")
        hunk = _HUNK.match(bare)
        if hunk:
            old_start, old_len, new_start, new_len, section = hunk.groups()
            old_n = 1 if old_len is None else int(old_len)
            new_n = 1 if new_len is None else int(new_len)
            out.append(f"@@ -{new_start}{'' if new_len is None else ',' + new_len} "
                       f"+{old_start}{'' if old_len is None else ',' + old_len} @@{section}\n")
            i = _reverse_hunk_body(lines, i + 1, old_n, new_n, out)
            continue
        if bare.startswith("GIT binary patch") or bare.startswith("Binary files "):
            raise ValueError("a binary patch cannot be reversed as text")
        if bare.startswith("diff --git "):
            match = re.fullmatch(r"diff --git a/(.+) b/(.+)", bare)
            out.append(f"diff --git a/{match.group(2)} b/{match.group(1)}\n" if match else line)
        elif bare.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = bare[4:], lines[i + 1].rstrip("\n")[4:]
            out.append(f"--- {_swap_prefix(new, 'a/')}\n+++ {_swap_prefix(old, 'b/')}\n")
            i += 1
        elif bare.startswith("index "):
            match = re.fullmatch(r"index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)", bare)
            out.append(f"index {match.group(2)}..{match.group(1)}{match.group(3)}\n" if match else line)
        else:
            out.append(_swap_header(line))
        i += 1
    return "".join(out)


def _reverse_hunk_body(lines: list[str], i: int, old_n: int, new_n: int, out: list[str]) -> int:
    """Append the hunk body from ``lines[i]`` reversed; return the index after it."""
    removed: list[str] = []  # a change block: git lists its removals before its additions
    added: list[str] = []

    def flush() -> None:
        out.extend(removed)
        out.extend(added)
        removed.clear()
        added.clear()

    last: list[str] | None = None
    while i < len(lines) and (old_n > 0 or new_n > 0 or lines[i].startswith("\\")):
        line = lines[i]
        if line.startswith("\\"):  # "\ No newline at end of file" belongs to the line before it
            (last if last is not None else out).append(line)
        elif line.startswith("-"):
            removed_line = "+" + line[1:]
            added.append(removed_line)
            last, old_n = added, old_n - 1
        elif line.startswith("+"):
            removed.append("-" + line[1:])
            last, new_n = removed, new_n - 1
        else:  # context (" " or an empty line some tools write for an empty context line)
            flush()
            out.append(line)
            last, old_n, new_n = out, old_n - 1, new_n - 1
        i += 1
    flush()
    return i


def _swap_prefix(path: str, prefix: str) -> str:
    if path == "/dev/null" or path.startswith("/dev/null\t"):
        return path
    if path[:2] in ("a/", "b/"):
        return prefix + path[2:]
    return path


_HEADER_SWAPS = (("new file mode ", "deleted file mode "), ("deleted file mode ", "new file mode "),
                 ("old mode ", "new mode "), ("new mode ", "old mode "),
                 ("rename from ", "rename to "), ("rename to ", "rename from "))


def _swap_header(line: str) -> str:
    for before, after in _HEADER_SWAPS:
        if line.startswith(before):
            return after + line[len(before):]
    return line


def new_files_patch(files: dict[str, str]) -> str:
    """A git patch that creates ``files`` (path -> text)."""
    parts = []
    for path, text in files.items():
        parts.append(f"diff --git a/{path} b/{path}\nnew file mode 100644\n")
        if not text:
            continue
        lines = text.splitlines(keepends=True)
        parts.append(f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1{'' if len(lines) == 1 else f',{len(lines)}'} @@\n")
        parts.extend("+" + line for line in lines)
        if not lines[-1].endswith("\n"):
            parts.append("\n\\ No newline at end of file\n")
    return "".join(parts)
