import pytest

from tablekit import tabulate


def test_empty_table():
    assert tabulate([]) == ""


def test_headers_only():
    assert tabulate([], headers=["a", "b"], style="grid") == "+---+---+\n| a | b |\n+===+===+\n+---+---+"


def test_numeric_column_is_decimal_aligned():
    out = tabulate([[1.5], [10], [-2.25]])
    assert out.split("\n") == [" 1.5", "10", "-2.25"]


def test_text_column_is_left_aligned():
    out = tabulate([["a", 1], ["bbb", 2]])
    assert out == "a    1\nbbb  2"


def test_explicit_alignments():
    out = tabulate([["ab", "cd"], ["x", "yy"]], align=["right", "left"], style="grid")
    assert out.split("\n")[1] == "| ab | cd |"
    assert out.split("\n")[3] == "|  x | yy |"


def test_center_alignment_even_gap():
    out = tabulate([["abcd"], ["ab"]], align="center", style="grid")
    assert "|  ab  |" in out.split("\n")


def test_floatfmt_and_intfmt():
    out = tabulate([[1234, 3.14159]], floatfmt=".2f", intfmt=",")
    assert out == "1,234  3.14"


def test_floatfmt_per_column():
    out = tabulate([[1.23456, 1.23456]], floatfmt=[".1f", ".3f"])
    assert out == "1.2  1.235"


def test_missing_values():
    out = tabulate([["a", None], ["b", 2]], missing="-", style="grid")
    lines = out.split("\n")
    assert lines[1] == "| a | - |"
    assert lines[3] == "| b | 2 |"


def test_multiline_cells():
    out = tabulate([["one\ntwo", "x"]], style="grid")
    assert out.split("\n") == ["+-----+---+", "| one | x |", "| two |   |", "+-----+---+"]


def test_wide_characters_keep_grid_aligned():
    out = tabulate([["日本", "x"], ["abc", "y"]], style="grid")
    lines = out.split("\n")
    assert lines[1] == "| 日本 | x |"
    assert lines[3] == "| abc  | y |"


def test_maxwidths_wraps_text():
    out = tabulate([["the quick brown fox", 1]], maxwidths=[9, None], style="grid")
    assert out.split("\n")[1:4] == ["| the quick | 1 |", "| brown fox |   |", "+-----------+---+"]


def test_numbers_are_never_wrapped():
    out = tabulate([[123456789]], maxwidths=3)
    assert out == "123456789"


def test_truncate_overflow():
    out = tabulate([["abcdefghij"]], maxwidths=5, overflow="truncate")
    assert out == "abcd\u2026"


def test_bad_overflow_mode():
    with pytest.raises(ValueError):
        tabulate([["a"]], overflow="clip")


def test_showindex():
    out = tabulate([["a"], ["b"]], headers=["letter"], showindex=True)
    assert out.split("\n") == ["   letter", "0  a", "1  b"]


def test_showindex_shifts_per_column_options():
    out = tabulate([["ab", 1.23456]], showindex=True, align=["right", "left"], floatfmt=[None, ".2f"], style="grid")
    assert out.split("\n")[1] == "| 0 | ab | 1.23 |"


def test_dict_rows_with_keys():
    out = tabulate([{"name": "x", "n": 1}, {"name": "yy", "n": 22}], headers="keys")
    assert out == "name   n\nx      1\nyy    22"


def test_plain_strips_trailing_space():
    out = tabulate([["a", None], ["bbbb", None]], headers=["h1", "h2"])
    assert all(not line.endswith(" ") for line in out.split("\n"))
