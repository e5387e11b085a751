"""Git patches split per file (task patches, agent diffs)."""

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
