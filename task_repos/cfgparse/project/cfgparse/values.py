"""Typed values: parsing raw strings into Python objects and back.

Raw values are the strings found after the separator.  They may be:

* double-quoted strings with backslash escapes (``"a\\tb"``),
* single-quoted literal strings (``'C:\\temp'``),
* lists in brackets (``[1, 2, "three"]``), items inferred recursively,
* booleans (``true/false/yes/no/on/off``), integers, floats,
* anything else, taken as a plain string.
"""

from __future__ import annotations

import re

from .errors import ConversionError

TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})

_INT_RE = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|\d+)$")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
_REVERSE_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", '"': '\\"', "\0": "\\0"}


def is_quoted(raw: str) -> bool:
    """True if *raw* is a complete single- or double-quoted string."""
    return len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'"


def unquote(raw: str) -> str:
    """Remove quotes from *raw*, processing escapes in double quotes.

    Unquoted input is returned unchanged.
    """
    if not is_quoted(raw):
        return raw
    body = raw[1:-1]
    if raw[0] == "'":
        return body
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise ConversionError(f"invalid escape sequence \\{nxt} in {raw}")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def quote(text: str) -> str:
    """Return *text* as a double-quoted string with escapes."""
    return '"' + "".join(_REVERSE_ESCAPES.get(ch, ch) for ch in text) + '"'


def split_list(body: str) -> list[str]:
    """Split the inside of a list on top-level commas.

    Commas inside quotes or nested brackets do not split.  Items are
    stripped; a trailing comma is allowed.
    """
    items: list[str] = []
    depth = 0
    quote_char = None
    current: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if quote_char:
            current.append(ch)
            if ch == "\\" and quote_char == '"' and i + 1 < len(body):
                current.append(body[i + 1])
                i += 2
                continue
            if ch == quote_char:
                quote_char = None
        elif ch in "\"'":
            quote_char = ch
            current.append(ch)
        elif ch == "[":
            depth += 1
            current.append(ch)
        elif ch == "]":
            depth -= 1
            current.append(ch)
        elif ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    last = "".join(current).strip()
    if last or items and not body.rstrip().endswith(","):
        items.append(last)
    return items


def _is_list(raw: str) -> bool:
    return raw.startswith("[") and raw.endswith("]")


def infer(raw: str):
    """Convert *raw* to the most specific Python value it spells."""
    raw = raw.strip()
    if is_quoted(raw):
        return unquote(raw)
    if _is_list(raw):
        return [infer(item) for item in split_list(raw[1:-1])]
    lowered = raw.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if _INT_RE.match(raw):
        return int(raw, 0) if not raw.lstrip("+-").isdigit() else int(raw)
    if _FLOAT_RE.match(raw):
        return float(raw)
    return raw


def to_str(raw: str) -> str:
    """Return *raw* as a string, unquoting it if quoted."""
    return unquote(raw.strip())


def to_int(raw: str) -> int:
    """Convert *raw* to ``int`` (decimal, ``0x``, ``0o``, ``0b``)."""
    text = to_str(raw).replace("_", "")
    if not _INT_RE.match(text):
        raise ConversionError(f"expected int, got {raw!r}")
    return int(text, 0) if not text.lstrip("+-").isdigit() else int(text)


def to_float(raw: str) -> float:
    """Convert *raw* to ``float``; integers are accepted."""
    text = to_str(raw).replace("_", "")
    if _INT_RE.match(text):
        return float(to_int(text))
    if not _FLOAT_RE.match(text):
        raise ConversionError(f"expected float, got {raw!r}")
    return float(text)


def to_bool(raw: str) -> bool:
    """Convert *raw* to ``bool`` using the usual yes/no words."""
    text = to_str(raw).lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise ConversionError(f"expected bool, got {raw!r}")


def to_list(raw: str, item_type=None) -> list:
    """Convert *raw* to a list.

    Both ``[a, b]`` and a bare ``a, b`` are accepted.  Items are inferred,
    or converted with *item_type* when given.
    """
    text = raw.strip()
    if _is_list(text):
        text = text[1:-1]
    if not text.strip():
        return []
    items = split_list(text)
    if item_type is None:
        return [infer(item) for item in items]
    return [convert(item, item_type) for item in items]


_CONVERTERS = {str: to_str, int: to_int, float: to_float, bool: to_bool, list: to_list}


def type_name(type_) -> str:
    """Human readable name of a supported type."""
    return getattr(type_, "__name__", str(type_))


def convert(raw: str, type_):
    """Convert *raw* to *type_* (one of ``str, int, float, bool, list``)."""
    try:
        converter = _CONVERTERS[type_]
    except KeyError:
        raise TypeError(f"unsupported type: {type_name(type_)}") from None
    return converter(raw)


def format_value(value) -> str:
    """Render a Python value as raw config text that :func:`infer` reads back.

    ``$`` is doubled so that the written value survives interpolation.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if value is None:
        return '""'
    text = str(value)
    needs_quotes = (
        text != text.strip()
        or any(ch in text for ch in "#;\"'\\\n\t\r\0,[]")
        or infer(text) != text
    )
    out = quote(text) if needs_quotes else text
    return out.replace("$", "$$")
