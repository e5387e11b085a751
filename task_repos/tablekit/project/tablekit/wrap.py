"""Word wrapping and truncation of cell text, measured in display columns."""

from __future__ import annotations

from .cells import char_width, display_width

ELLIPSIS = "\u2026"


def fit_prefix(text: str, width: int, force: bool = True) -> int:
    """Return how many leading characters of *text* fit into *width* columns.

    With *force* (the default) at least one character is taken, when *text*
    is not empty, so that callers breaking text into pieces are guaranteed to
    make progress even when a single wide character is wider than *width*.
    """
    used = 0
    for index, ch in enumerate(text):
        w = char_width(ch)
        if used + w > width:
            return max(index, 1) if force else index
        used += w
    return len(text)


def break_word(word: str, width: int) -> list[str]:
    """Cut a word that is too long for *width* into pieces that fit."""
    pieces = []
    while display_width(word) > width:
        n = fit_prefix(word, width)
        pieces.append(word[:n])
        word = word[n:]
    if word:
        pieces.append(word)
    return pieces


def wrap_line(line: str, width: int) -> list[str]:
    """Wrap one line (without newlines) to *width* columns.

    Words are separated by whitespace; words longer than *width* are broken.
    A line that already fits is returned as-is, whitespace included.
    """
    if display_width(line) <= width:
        return [line]
    out: list[str] = []
    current = ""
    for word in line.split():
        pieces = break_word(word, width)
        for piece in pieces[:-1]:
            if current:
                out.append(current)
                current = ""
            out.append(piece)
        word = pieces[-1]
        if not current:
            current = word
        elif display_width(current) + 1 + display_width(word) <= width:
            current += " " + word
        else:
            out.append(current)
            current = word
    if current or not out:
        out.append(current)
    return out


def wrap_text(text: str, width: int | None) -> list[str]:
    """Wrap possibly multi-line *text* to *width* columns; return the lines.

    Explicit newlines are kept. With ``width=None`` the text is only split
    into its lines.
    """
    lines = text.split("\n")
    if width is None:
        return lines
    if width < 1:
        raise ValueError("width must be at least 1")
    out: list[str] = []
    for line in lines:
        out.extend(wrap_line(line, width))
    return out


def truncate(text: str, width: int, ellipsis: str = ELLIPSIS) -> str:
    """Shorten one line to at most *width* columns, ending it with *ellipsis*."""
    if display_width(text) <= width:
        return text
    room = width - display_width(ellipsis)
    if room <= 0:
        return ellipsis[: fit_prefix(ellipsis, width, force=False)]
    return text[: fit_prefix(text, room, force=False)] + ellipsis


def truncate_text(text: str, width: int | None) -> list[str]:
    """Split *text* into its lines and truncate each one to *width* columns."""
    lines = text.split("\n")
    if width is None:
        return lines
    if width < 1:
        raise ValueError("width must be at least 1")
    return [truncate(line, width) for line in lines]
