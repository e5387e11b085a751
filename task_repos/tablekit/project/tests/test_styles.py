import pytest

from tablekit import STYLES, Style, get_style, tabulate
from tablekit.styles import marker_segment

ROWS = [["apple", 1.5], ["kiwi", 12]]
HEADERS = ["fruit", "price"]


def test_known_styles():
    assert set(STYLES) == {"plain", "simple", "grid", "markdown", "rst-simple"}


def test_get_style_aliases():
    assert get_style("md").name == "markdown"
    assert get_style("RST").name == "rst-simple"
    assert get_style("rst_simple").name == "rst-simple"
    assert get_style(STYLES["grid"]) is STYLES["grid"]


def test_get_style_unknown():
    with pytest.raises(ValueError, match="unknown style"):
        get_style("fancy")


def test_marker_segment():
    assert marker_segment(5, "left") == ":----"
    assert marker_segment(5, "right") == "----:"
    assert marker_segment(5, "decimal") == "----:"
    assert marker_segment(5, "center") == ":---:"


def test_plain_style():
    assert tabulate(ROWS, HEADERS) == (
        "fruit  price\n"
        "apple    1.5\n"
        "kiwi    12"
    )


def test_simple_style():
    assert tabulate(ROWS, HEADERS, style="simple") == (
        "fruit  price\n"
        "-----  -----\n"
        "apple    1.5\n"
        "kiwi    12"
    )


def test_grid_style():
    assert tabulate(ROWS, HEADERS, style="grid") == (
        "+-------+-------+\n"
        "| fruit | price |\n"
        "+=======+=======+\n"
        "| apple |   1.5 |\n"
        "+-------+-------+\n"
        "| kiwi  |  12   |\n"
        "+-------+-------+"
    )


def test_markdown_style():
    assert tabulate(ROWS, HEADERS, style="markdown") == (
        "| fruit | price |\n"
        "|:------|------:|\n"
        "| apple |   1.5 |\n"
        "| kiwi  |  12   |"
    )


def test_markdown_without_headers_gets_empty_header():
    out = tabulate([["a", "b"]], style="markdown").split("\n")
    assert out[0] == "|   |   |"
    assert out[1] == "|:--|:--|"
    assert out[2] == "| a | b |"


def test_rst_simple_style():
    assert tabulate(ROWS, HEADERS, style="rst-simple") == (
        "=====  =====\n"
        "fruit  price\n"
        "=====  =====\n"
        "apple    1.5\n"
        "kiwi    12\n"
        "=====  ====="
    )


def test_rst_simple_without_headers():
    assert tabulate([["a", "bb"]], style="rst") == "=  ==\na  bb\n=  =="


def test_grid_without_headers():
    assert tabulate([["x"], ["y"]], style="grid") == "+---+\n| x |\n+---+\n| y |\n+---+"


def test_custom_style_object():
    from tablekit.styles import RowFormat

    style = Style(name="bars", row=RowFormat("[", ";", "]"))
    assert tabulate([["a", "b"]], style=style) == "[a;b]"
