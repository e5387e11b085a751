"""Table styles: which rules to draw and which characters to draw them with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """A horizontal rule: ``begin + sep.join(fill * colwidth ...) + end``."""

    begin: str
    fill: str
    sep: str
    end: str


@dataclass(frozen=True)
class RowFormat:
    """How the cells of one text line are joined: ``begin + sep.join(cells) + end``."""

    begin: str
    sep: str
    end: str


@dataclass(frozen=True)
class Style:
    """A complete table style.

    *padding* spaces are put on both sides of every cell. *min_width* is the
    smallest content width of a column. With *align_markers* the rule below
    the header shows the column alignment the way Markdown expects
    (``:---``, ``---:``, ``:---:``). A style with *needs_header* always gets a
    header row, empty if the caller gave no headers.
    """

    name: str
    row: RowFormat
    top: Rule | None = None
    below_header: Rule | None = None
    between_rows: Rule | None = None
    bottom: Rule | None = None
    padding: int = 0
    min_width: int = 0
    align_markers: bool = False
    needs_header: bool = False


_SPACED = RowFormat("", "  ", "")

PLAIN = Style(name="plain", row=_SPACED)

SIMPLE = Style(name="simple", row=_SPACED, below_header=Rule("", "-", "  ", ""), min_width=1)

GRID = Style(
    name="grid",
    row=RowFormat("|", "|", "|"),
    top=Rule("+", "-", "+", "+"),
    below_header=Rule("+", "=", "+", "+"),
    between_rows=Rule("+", "-", "+", "+"),
    bottom=Rule("+", "-", "+", "+"),
    padding=1,
)

MARKDOWN = Style(
    name="markdown",
    row=RowFormat("|", "|", "|"),
    below_header=Rule("|", "-", "|", "|"),
    padding=1,
    min_width=1,
    align_markers=True,
    needs_header=True,
)

_RST_RULE = Rule("", "=", "  ", "")

RST_SIMPLE = Style(
    name="rst-simple",
    row=_SPACED,
    top=_RST_RULE,
    below_header=_RST_RULE,
    bottom=_RST_RULE,
    min_width=1,
)

STYLES: dict[str, Style] = {s.name: s for s in (PLAIN, SIMPLE, GRID, MARKDOWN, RST_SIMPLE)}

_ALIASES = {"rst": "rst-simple", "md": "markdown", "pipe": "markdown", "github": "markdown"}


def get_style(style: str | Style) -> Style:
    """Look a style up by name (or alias); :class:`Style` objects pass through."""
    if isinstance(style, Style):
        return style
    name = style.strip().lower().replace("_", "-")
    name = _ALIASES.get(name, name)
    try:
        return STYLES[name]
    except KeyError:
        raise ValueError(f"unknown style {style!r}; choose from {', '.join(sorted(STYLES))}") from None


def marker_segment(width: int, align: str, fill: str = "-") -> str:
    """Return a rule segment of *width* characters showing *align* Markdown-style."""
    if align == "left":
        return ":" + fill * (width - 1)
    if align in ("right", "decimal"):
        return fill * (width - 1) + ":"
    if align == "center":
        return ":" + fill * (width - 2) + ":"
    return fill * width


def render_rule(rule: Rule, widths: list[int], aligns: list[str], style: Style) -> str:
    """Draw one horizontal *rule* for columns of the given content *widths*."""
    segments = []
    for width, align in zip(widths, aligns):
        total = width + 2 * style.padding
        if style.align_markers and rule is style.below_header:
            segments.append(marker_segment(total, align, rule.fill))
        else:
            segments.append(rule.fill * total)
    return rule.begin + rule.sep.join(segments) + rule.end
