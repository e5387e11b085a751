import pytest

from tablekit.cells import (
    align_decimal,
    cell_width,
    char_width,
    display_width,
    format_value,
    is_number,
    normalize_text,
    pad,
    split_decimal,
)


def test_ascii_width():
    assert display_width("hello") == 5
    assert display_width("") == 0


def test_cjk_characters_are_double_width():
    assert char_width("日") == 2
    assert display_width("日本語") == 6
    assert display_width("a日b") == 4


def test_combining_marks_have_no_width():
    assert display_width("e\u0301") == 1
    assert char_width("\u0301") == 0


def test_cell_width_uses_widest_line():
    assert cell_width("ab\nabcd\nc") == 4
    assert cell_width("") == 0


def test_normalize_text_line_endings_and_tabs():
    assert normalize_text("a\r\nb\rc") == "a\nb\nc"
    assert normalize_text("a\tb", tabsize=4) == "a   b"


def test_is_number():
    assert is_number(3)
    assert is_number(2.5)
    assert not is_number("3")
    assert not is_number(None)


def test_format_value_basics():
    assert format_value(None) == ""
    assert format_value(None, missing="-") == "-"
    assert format_value(True) == "True"
    assert format_value("text") == "text"


def test_format_value_numbers():
    assert format_value(1234567, intfmt=",") == "1,234,567"
    assert format_value(3.14159, floatfmt=".2f") == "3.14"
    assert format_value(0.5) == "0.5"


def test_split_decimal():
    assert split_decimal("12.50") == ("12", ".50")
    assert split_decimal("-3") == ("-3", "")
    assert split_decimal("1e+10") == ("1e+10", "")


def test_align_decimal_lines_up_points():
    assert align_decimal(["1.5", "10", "2.25"]) == [" 1.5 ", "10   ", " 2.25"]


def test_align_decimal_empty():
    assert align_decimal([]) == []


def test_pad_left_right():
    assert pad("ab", 5, "left") == "ab   "
    assert pad("ab", 5, "right") == "   ab"
    assert pad("ab", 5, "decimal") == "   ab"


def test_pad_center_even_gap():
    assert pad("ab", 6, "center") == "  ab  "


def test_pad_counts_wide_characters():
    assert pad("日本", 6, "left") == "日本  "
    assert pad("日本", 6, "right") == "  日本"


def test_pad_never_cuts():
    assert pad("abcdef", 3) == "abcdef"


def test_pad_rejects_unknown_alignment():
    with pytest.raises(ValueError):
        pad("x", 4, "middle")
