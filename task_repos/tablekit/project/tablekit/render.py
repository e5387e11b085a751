"""Putting it all together: :func:`tabulate` renders rows as a text table."""

from __future__ import annotations

from .cells import align_decimal, format_value, is_number, normalize_text, pad
from .layout import column_types, column_widths, normalize_rows, per_column, resolve_aligns
from .styles import RowFormat, Style, get_style, render_rule
from .wrap import truncate_text, wrap_text

OVERFLOW_MODES = ("wrap", "truncate")


def _shift_option(value, default=None):
    """Make room for the index column in a per-column option given as a list."""
    if value is None or isinstance(value, (str, int)):
        return value
    return [default, *value]


def add_index(headers, rows, start: int = 0):
    """Prepend a column with the row numbers (``start``, ``start + 1``, ...)."""
    rows = [[start + i, *row] for i, row in enumerate(rows)]
    if headers is not None:
        headers = ["", *headers]
    return headers, rows


def format_columns(rows, aligns, floatfmts, intfmts, missing):
    """Format every cell to text and line up decimal columns.

    Returns the rows as lists of strings.
    """
    text_rows = [
        [format_value(v, floatfmts[c], intfmts[c], missing) for c, v in enumerate(row)] for row in rows
    ]
    for col, align in enumerate(aligns):
        if align != "decimal":
            continue
        numeric = [r for r, row in enumerate(rows) if is_number(row[col])]
        aligned = align_decimal([text_rows[r][col] for r in numeric])
        for r, text in zip(numeric, aligned):
            text_rows[r][col] = text
    return text_rows


def fit_cell(text: str, width: int | None, overflow: str, numeric: bool = False) -> list[str]:
    """Split a cell into lines no wider than *width* (numbers are never cut)."""
    if width is None or numeric:
        return text.split("\n")
    if overflow == "truncate":
        return truncate_text(text, width)
    return wrap_text(text, width)


def render_row(cells: list[list[str]], widths, aligns, fmt: RowFormat, padding: int) -> list[str]:
    """Render one table row, which may span several text lines."""
    height = max((len(lines) for lines in cells), default=1)
    space = " " * padding
    out = []
    for i in range(height):
        parts = []
        for lines, width, align in zip(cells, widths, aligns):
            text = lines[i] if i < len(lines) else ""
            parts.append(space + pad(text, width, align) + space)
        line = fmt.begin + fmt.sep.join(parts) + fmt.end
        if not fmt.end:
            line = line.rstrip()
        out.append(line)
    return out


def tabulate(
    rows,
    headers=None,
    style: str | Style = "plain",
    align=None,
    floatfmt="g",
    intfmt="",
    missing: str = "",
    maxwidths=None,
    overflow: str = "wrap",
    showindex: bool = False,
) -> str:
    """Render *rows* as a text table and return it (without a final newline).

    :param rows: iterable of sequences or mappings.
    :param headers: ``None``, a sequence, ``"firstrow"`` or ``"keys"``.
    :param style: a style name (``plain``, ``simple``, ``grid``, ``markdown``,
        ``rst-simple``) or a :class:`~tablekit.styles.Style`.
    :param align: ``None``, one of ``left``/``right``/``center``/``decimal``,
        or a list with one alignment per column.
    :param floatfmt: format spec for floats, or a list per column.
    :param intfmt: format spec for ints, or a list per column.
    :param missing: text shown for ``None`` cells.
    :param maxwidths: maximum content width, for all columns or per column.
    :param overflow: ``"wrap"`` long cells onto more lines or ``"truncate"`` them.
    :param showindex: prepend a column numbering the rows from 0.
    """
    st = get_style(style)
    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"overflow must be one of {OVERFLOW_MODES}, not {overflow!r}")
    headers, body = normalize_rows(rows, headers)
    if showindex:
        headers, body = add_index(headers, body)
        align = _shift_option(align)
        floatfmt = _shift_option(floatfmt)
        intfmt = _shift_option(intfmt)
        maxwidths = _shift_option(maxwidths)
    ncols = len(headers) if headers is not None else len(body[0]) if body else 0
    if ncols == 0:
        return ""
    if headers is None and st.needs_header:
        headers = [""] * ncols

    types = column_types(body, ncols)
    aligns = resolve_aligns(align, types)
    floatfmts = per_column(floatfmt, ncols, "g")
    intfmts = per_column(intfmt, ncols, "")
    limits = per_column(maxwidths, ncols)

    text_rows = format_columns(body, aligns, floatfmts, intfmts, missing)
    body_lines = [
        [fit_cell(text, limits[c], overflow, is_number(row[c])) for c, text in enumerate(texts)]
        for texts, row in zip(text_rows, body)
    ]
    header_lines = None
    if headers is not None:
        header_lines = [fit_cell(normalize_text(h), limits[c], overflow) for c, h in enumerate(headers)]
    widths = column_widths(header_lines, body_lines, st.min_width)

    lines: list[str] = []
    if st.top is not None:
        lines.append(render_rule(st.top, widths, aligns, st))
    if header_lines is not None:
        lines.extend(render_row(header_lines, widths, aligns, st.row, st.padding))
        if st.below_header is not None:
            lines.append(render_rule(st.below_header, widths, aligns, st))
    for i, cells in enumerate(body_lines):
        if i > 0 and st.between_rows is not None:
            lines.append(render_rule(st.between_rows, widths, aligns, st))
        lines.extend(render_row(cells, widths, aligns, st.row, st.padding))
    if st.bottom is not None:
        lines.append(render_rule(st.bottom, widths, aligns, st))
    return "\n".join(lines)
