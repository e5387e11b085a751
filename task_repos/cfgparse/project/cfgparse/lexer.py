"""Line-oriented lexer.

The lexer turns configuration text into a flat list of :class:`Token`
objects, one per physical line.  It knows about comments, section headers,
``key = value`` entries, indented continuation lines and ``%directives``,
but nothing about how they nest; that is the parser's job.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ParseError

BLANK = "blank"
COMMENT = "comment"
SECTION = "section"
ENTRY = "entry"
CONTINUATION = "continuation"
DIRECTIVE = "directive"

COMMENT_CHARS = "#;"
SEPARATORS = "=:"
DIRECTIVES = ("include",)


@dataclass
class Token:
    """One lexed line.

    ``name`` is the section name, key or directive name; ``value`` is the
    raw value (inline comment removed) or the directive argument;
    ``comment`` is the inline comment including its marker.
    """

    kind: str
    line: int
    text: str
    name: str | None = None
    value: str | None = None
    comment: str | None = None


def split_inline_comment(text: str) -> tuple[str, str | None]:
    """Split *text* into ``(value, comment)``.

    An inline comment starts at a ``#`` or ``;`` that is outside quotes and
    is either the first character or preceded by whitespace, so values such
    as ``http://host/#anchor`` keep their ``#``.
    """
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in COMMENT_CHARS and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i:]
        i += 1
    return text.rstrip(), None


def find_separator(text: str) -> int:
    """Return the index of the first key/value separator in *text*, or -1."""
    positions = [text.find(sep) for sep in SEPARATORS]
    positions = [p for p in positions if p >= 0]
    return min(positions) if positions else -1


def _lex_section(stripped: str, lineno: int, source: str) -> tuple[str, str | None]:
    close = stripped.find("]")
    if close < 0:
        raise ParseError("unterminated section header", source, lineno)
    name = stripped[1:close].strip()
    if not name:
        raise ParseError("empty section name", source, lineno)
    rest, comment = split_inline_comment(stripped[close + 1:])
    if rest.strip():
        raise ParseError(f"unexpected text after section header: {rest.strip()!r}", source, lineno)
    return name, comment


def _lex_directive(stripped: str, lineno: int, source: str) -> tuple[str, str, str | None]:
    body, comment = split_inline_comment(stripped[1:])
    name, _, arg = body.partition(" ")
    name = name.strip()
    arg = arg.strip()
    if name not in DIRECTIVES:
        raise ParseError(f"unknown directive %{name}", source, lineno)
    if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "\"'":
        arg = arg[1:-1]
    if not arg:
        raise ParseError(f"%{name} needs an argument", source, lineno)
    return name, arg, comment


def _lex_entry(stripped: str, lineno: int, source: str) -> tuple[str, str, str | None]:
    sep = find_separator(stripped)
    if sep < 0:
        raise ParseError(f"expected 'key = value', got {stripped!r}", source, lineno)
    key = stripped[:sep].strip()
    if not key:
        raise ParseError("missing key before separator", source, lineno)
    value, comment = split_inline_comment(stripped[sep + 1:].strip())
    return key, value, comment


def tokenize(text: str, source: str = "<string>") -> list[Token]:
    """Lex *text* into a list of tokens, one per line.

    An indented line directly following an entry (or another continuation
    line) is a continuation of that entry's value; a blank or comment line
    ends the value.
    """
    tokens: list[Token] = []
    in_value = False
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            tokens.append(Token(BLANK, lineno, line))
            in_value = False
            continue
        if stripped[0] in COMMENT_CHARS:
            tokens.append(Token(COMMENT, lineno, line))
            in_value = False
            continue
        if in_value and line[0] in " \t":
            value, comment = split_inline_comment(stripped)
            tokens.append(Token(CONTINUATION, lineno, line, value=value, comment=comment))
            continue
        if stripped[0] == "[":
            name, comment = _lex_section(stripped, lineno, source)
            tokens.append(Token(SECTION, lineno, line, name=name, comment=comment))
            in_value = False
        elif stripped[0] == "%":
            name, arg, comment = _lex_directive(stripped, lineno, source)
            tokens.append(Token(DIRECTIVE, lineno, line, name=name, value=arg, comment=comment))
            in_value = False
        else:
            key, value, comment = _lex_entry(stripped, lineno, source)
            tokens.append(Token(ENTRY, lineno, line, name=key, value=value, comment=comment))
            in_value = True
    return tokens
