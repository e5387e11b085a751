import pytest

from cfgparse import ConversionError, format_value, infer
from cfgparse import values


@pytest.mark.parametrize("raw, expected", [
    ("42", 42),
    ("-7", -7),
    ("0x1f", 31),
    ("3.5", 3.5),
    ("1e3", 1000.0),
    ("true", True),
    ("Off", False),
    ("hello world", "hello world"),
    ('"42"', "42"),
    ("'a\\b'", "a\\b"),
])
def test_infer_scalars(raw, expected):
    result = infer(raw)
    assert result == expected
    assert type(result) is type(expected)


def test_infer_list_mixed():
    assert infer('[1, two, "x, y", [3]]') == [1, "two", "x, y", [3]]


def test_infer_empty_list():
    assert infer("[]") == []


def test_unquote_escapes():
    assert values.unquote(r'"a\tb\n\"q\""') == 'a\tb\n"q"'


def test_unquote_bad_escape():
    with pytest.raises(ConversionError):
        values.unquote(r'"\q"')


def test_to_int_and_underscores():
    assert values.to_int("1_000") == 1000
    with pytest.raises(ConversionError, match="expected int"):
        values.to_int("12abc")


def test_to_float_accepts_int():
    assert values.to_float("3") == 3.0


@pytest.mark.parametrize("raw", ["yes", "on", "1", "TRUE"])
def test_to_bool_true(raw):
    assert values.to_bool(raw) is True


def test_to_bool_invalid():
    with pytest.raises(ConversionError, match="expected bool"):
        values.to_bool("maybe")


def test_to_list_bare_and_typed():
    assert values.to_list("a, b, c") == ["a", "b", "c"]
    assert values.to_list("[1, 2]", int) == [1, 2]
    assert values.to_list("") == []


def test_split_list_trailing_comma():
    assert values.split_list("a, b,") == ["a", "b"]


@pytest.mark.parametrize("value", [1, 2.5, True, "plain", "42", " padded ", "a#b ;c",
                                   ["x", 1, [False]], "line\nbreak", ""])
def test_format_value_round_trips(value):
    assert infer(format_value(value)) == value


def test_format_value_escapes_dollar():
    assert format_value("cost: $5") == "cost: $$5"
