"""Reading tables from CSV and TSV text."""

from __future__ import annotations

import csv
import io
import re

from .render import tabulate

_INT_RE = re.compile(r"[+-]?(?:0|[1-9][0-9]*)")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?[0-9]+[eE][+-]?[0-9]+")

_CANDIDATE_DELIMITERS = ("\t", ",", ";", "|")


def convert_field(text: str):
    """Turn one CSV field into a Python value.

    Empty fields become ``None``, integers become :class:`int` and decimal
    numbers :class:`float`. Everything else, including integers written with
    leading zeros such as ZIP codes (``"02134"``), stays a string.
    """
    stripped = text.strip()
    if not stripped:
        return None
    if _INT_RE.fullmatch(stripped):
        return int(stripped)
    if _FLOAT_RE.fullmatch(stripped):
        return float(stripped)
    return text


def sniff_delimiter(text: str) -> str:
    """Guess the delimiter from the first non-blank line (``","`` by default)."""
    for line in text.splitlines():
        if line.strip():
            counts = {d: line.count(d) for d in _CANDIDATE_DELIMITERS}
            best = max(_CANDIDATE_DELIMITERS, key=lambda d: counts[d])
            return best if counts[best] else ","
    return ","


def parse_delimited(text: str, delimiter: str = ",", header: bool = True, convert: bool = True):
    """Parse delimited text; return ``(headers, rows)``.

    Blank lines are skipped. With *header* the first record gives the
    headers (otherwise *headers* is ``None``); with *convert* every field
    goes through :func:`convert_field`.
    """
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    records = [record for record in reader if record]
    headers = None
    if header:
        headers = records[0] if records else []
        records = records[1:]
    if convert:
        records = [[convert_field(field) for field in record] for record in records]
    return headers, records


def read_csv(text: str, header: bool = True, convert: bool = True):
    """Parse comma-separated text; return ``(headers, rows)``."""
    return parse_delimited(text, ",", header, convert)


def read_tsv(text: str, header: bool = True, convert: bool = True):
    """Parse tab-separated text; return ``(headers, rows)``."""
    return parse_delimited(text, "\t", header, convert)


def csv_to_table(text: str, delimiter: str | None = None, header: bool = True, convert: bool = True, **options) -> str:
    """Render delimited text as a table; *options* go to :func:`tabulate`.

    Without *delimiter* it is guessed with :func:`sniff_delimiter`.
    """
    if delimiter is None:
        delimiter = sniff_delimiter(text)
    headers, rows = parse_delimited(text, delimiter, header, convert)
    return tabulate(rows, headers=headers, **options)


def load_table(path, encoding: str = "utf-8", **options) -> str:
    """Read a CSV or TSV file and render it; see :func:`csv_to_table`."""
    with open(path, encoding=encoding, newline="") as fh:
        return csv_to_table(fh.read(), **options)
