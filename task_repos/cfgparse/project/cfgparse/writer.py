"""Render a :class:`~cfgparse.config.Config` back to text.

Unchanged entries are written from their original lines, so comments,
spacing and quoting survive a load/dump round trip byte for byte.  Entries
that were changed or added are rendered as ``key = value``, keeping any
comments that were attached to them.  Included files are flattened into
the output.
"""

from __future__ import annotations

from .config import Config, Entry, Section

CONTINUATION_INDENT = "    "


def render_entry(entry: Entry) -> list[str]:
    """Return the physical lines for *entry*."""
    if entry.lines is not None:
        return list(entry.lines)
    first, *rest = entry.raw.split("\n")
    head = f"{entry.key} = {first}" if first else f"{entry.key} ="
    if entry.inline_comment:
        head = f"{head} {entry.inline_comment}"
    return [head] + [CONTINUATION_INDENT + line for line in rest]


def render_header(section: Section) -> str:
    """Return the header line of *section*."""
    return section.header if section.header is not None else f"[{section.name}]"


def render_section(section: Section, lines: list[str], first: bool) -> None:
    """Append the lines of *section* to *lines*."""
    if section.header is None and not section.comments and lines and lines[-1].strip():
        lines.append("")
    lines.extend(section.comments)
    if not (section.implicit and first):
        lines.append(render_header(section))
    for entry in section.entries.values():
        lines.extend(entry.comments)
        lines.extend(render_entry(entry))


def dumps(config: Config) -> str:
    """Return the text of *config*."""
    lines: list[str] = []
    for index, section in enumerate(config.sections.values()):
        render_section(section, lines, index == 0)
    lines.extend(config.trailing)
    return "\n".join(lines) + "\n" if lines else ""


def dump(config: Config, fp) -> None:
    """Write *config* to the text file object *fp*."""
    fp.write(dumps(config))
