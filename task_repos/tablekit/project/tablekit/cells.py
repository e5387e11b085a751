"""Cell-level helpers: display width, value formatting and padding.

Everything in tablekit measures text in *terminal columns*, not in code
points: East Asian wide and fullwidth characters take two columns, while
combining marks and other zero-width characters take none.
"""

from __future__ import annotations

import unicodedata

ALIGNMENTS = ("left", "right", "center", "decimal")

_ZERO_WIDTH_CATEGORIES = ("Mn", "Me", "Cf")


def char_width(ch: str) -> int:
    """Return the number of terminal columns used by the single character *ch*."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in _ZERO_WIDTH_CATEGORIES:
        return 0
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 2
    return 1


def display_width(text: str) -> int:
    """Return the display width of a single line of text."""
    return sum(char_width(ch) for ch in text)


def cell_width(text: str) -> int:
    """Return the display width of a possibly multi-line cell (its widest line)."""
    return max(display_width(line) for line in text.split("\n"))


def normalize_text(text: str, tabsize: int = 4) -> str:
    """Normalise line endings to ``\\n`` and expand tabs to spaces."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(line.expandtabs(tabsize) for line in text.split("\n"))


def is_number(value: object) -> bool:
    """Return True for ints and floats (but not for booleans)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float))


def format_value(value: object, floatfmt: str = "g", intfmt: str = "", missing: str = "") -> str:
    """Format one cell value as text.

    ``None`` becomes *missing*, floats are formatted with *floatfmt*, ints
    with *intfmt* (for instance ``","`` for thousands separators) and every
    other value with :func:`str`.
    """
    if value is None:
        return missing
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return format(value, intfmt)
    if isinstance(value, float):
        return format(value, floatfmt)
    return normalize_text(str(value))


def split_decimal(text: str) -> tuple[str, str]:
    """Split a formatted number into the part before the decimal point and the rest.

    The second part keeps the point itself: ``"12.50"`` -> ``("12", ".50")``.
    Numbers without a point are all integer part: ``"1e+10"`` -> ``("1e+10", "")``.
    """
    point = text.find(".")
    if point < 0:
        return text, ""
    return text[:point], text[point:]


def align_decimal(texts: list[str]) -> list[str]:
    """Pad formatted numbers so that their decimal points line up.

    All returned strings have the same width.
    """
    parts = [split_decimal(t) for t in texts]
    int_width = max((display_width(i) for i, _ in parts), default=0)
    frac_width = max((display_width(f) for _, f in parts), default=0)
    out = []
    for int_part, frac_part in parts:
        out.append(pad(int_part, int_width, "right") + pad(frac_part, frac_width, "left"))
    return out


def pad(text: str, width: int, align: str = "left") -> str:
    """Pad a single line *text* with spaces to *width* display columns.

    ``"decimal"`` is treated like ``"right"`` here: decimal alignment is
    prepared column-wise by :func:`align_decimal` beforehand. Centred text
    gets the odd extra space, if any, on its right. Text that is already
    wider than *width* is returned unchanged.
    """
    gap = width - display_width(text)
    if gap <= 0:
        return text
    if align == "left":
        return text + " " * gap
    if align in ("right", "decimal"):
        return " " * gap + text
    if align == "center":
        left = gap // 2
        return " " * left + text + " " * (gap - left)
    raise ValueError(f"unknown alignment: {align!r}")
