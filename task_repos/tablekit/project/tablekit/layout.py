"""Table shape: normalising rows, column types, alignments and widths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .cells import ALIGNMENTS, display_width, is_number


def _header_text(value: object) -> str:
    return "" if value is None else str(value)


def normalize_rows(rows, headers=None):
    """Turn the user's rows and headers into a rectangular list of lists.

    *rows* is an iterable of sequences or of mappings. *headers* may be
    ``None`` (no header row), a sequence of header values, ``"firstrow"``
    (the first row holds the headers) or ``"keys"`` (rows are mappings and
    their keys, in order of first appearance, become the headers).

    Returns ``(headers, rows)`` where *headers* is a list of strings or
    ``None`` and every row has the same number of cells; short rows are
    padded with ``None``.
    """
    rows = list(rows)
    if isinstance(headers, str) and headers == "keys":
        keys: list = []
        for row in rows:
            if not isinstance(row, Mapping):
                raise TypeError("headers='keys' needs rows that are mappings")
            for key in row:
                if key not in keys:
                    keys.append(key)
        header_list = [_header_text(k) for k in keys]
        body = [[row.get(k) for k in keys] for row in rows]
    else:
        body = [list(row.values()) if isinstance(row, Mapping) else list(row) for row in rows]
        if isinstance(headers, str) and headers == "firstrow":
            header_list = [_header_text(h) for h in body[0]] if body else []
            body = body[1:]
        elif isinstance(headers, str):
            raise ValueError(f"unknown headers option: {headers!r}")
        elif headers is None:
            header_list = None
        else:
            header_list = [_header_text(h) for h in headers]

    ncols = max((len(r) for r in body), default=0)
    if header_list is not None:
        ncols = max(ncols, len(header_list))
        header_list = header_list + [""] * (ncols - len(header_list))
    body = [r + [None] * (ncols - len(r)) for r in body]
    return header_list, body


def column_types(rows: list[list], ncols: int) -> list[str]:
    """Classify each column as ``"number"`` or ``"text"``.

    A column is numeric when it holds at least one number and every other
    cell is missing (``None``).
    """
    types = []
    for col in range(ncols):
        values = [row[col] for row in rows if row[col] is not None]
        if values and all(is_number(v) for v in values):
            types.append("number")
        else:
            types.append("text")
    return types


def default_align(coltype: str) -> str:
    """Numbers line up on their decimal point, text is left aligned."""
    return "decimal" if coltype == "number" else "left"


def per_column(value, ncols: int, default=None) -> list:
    """Expand a per-table option into one value per column.

    A scalar (string, number or ``None``) applies to every column; a list or
    tuple gives the value for each column in turn, missing entries (or
    ``None`` entries) falling back to *default*.
    """
    if value is None:
        return [default] * ncols
    if isinstance(value, (str, int)) or not isinstance(value, Sequence):
        return [value] * ncols
    values = list(value)[:ncols]
    values += [None] * (ncols - len(values))
    return [default if v is None else v for v in values]


def resolve_aligns(align, types: list[str]) -> list[str]:
    """Work out the alignment of every column.

    *align* is ``None``, one alignment for all columns, or a sequence with
    one entry per column (``None`` entries keep the default). ``"decimal"``
    on a text column falls back to ``"right"``.
    """
    requested = per_column(align, len(types))
    out = []
    for req, coltype in zip(requested, types):
        if req is None:
            out.append(default_align(coltype))
            continue
        if req not in ALIGNMENTS:
            raise ValueError(f"unknown alignment: {req!r}")
        if req == "decimal" and coltype != "number":
            req = "right"
        out.append(req)
    return out


def column_widths(header_lines, body_lines, min_width: int = 0) -> list[int]:
    """Return the display width of each column.

    *header_lines* is ``None`` or a list with the lines of each header cell;
    *body_lines* is a list of rows, each a list with the lines of each cell.
    """
    ncols = len(header_lines) if header_lines is not None else len(body_lines[0]) if body_lines else 0
    widths = [min_width] * ncols
    all_rows = list(body_lines)
    if header_lines is not None:
        all_rows.append(header_lines)
    for row in all_rows:
        for col, lines in enumerate(row):
            for line in lines:
                widths[col] = max(widths[col], display_width(line))
    return widths

