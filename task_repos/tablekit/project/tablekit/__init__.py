"""tablekit: render rows of values as plain-text tables.

>>> from tablekit import tabulate
>>> print(tabulate([["apple", 1.5], ["kiwi", 12]], headers=["fruit", "price"]))
fruit  price
apple    1.5
kiwi    12
"""

from .cells import cell_width, display_width, format_value
from .io import csv_to_table, load_table, read_csv, read_tsv, sniff_delimiter
from .render import tabulate
from .styles import STYLES, Style, get_style
from .wrap import truncate, wrap_text

__all__ = [
    "STYLES",
    "Style",
    "cell_width",
    "csv_to_table",
    "display_width",
    "format_value",
    "get_style",
    "load_table",
    "read_csv",
    "read_tsv",
    "sniff_delimiter",
    "tabulate",
    "truncate",
    "wrap_text",
]

__version__ = "0.1.0"
