import pytest

from tablekit.layout import column_types, column_widths, default_align, normalize_rows, per_column, resolve_aligns


def test_normalize_pads_short_rows():
    headers, rows = normalize_rows([[1, 2, 3], [4]])
    assert headers is None
    assert rows == [[1, 2, 3], [4, None, None]]


def test_normalize_headers_wider_than_rows():
    headers, rows = normalize_rows([[1]], headers=["a", "b"])
    assert headers == ["a", "b"]
    assert rows == [[1, None]]


def test_normalize_firstrow():
    headers, rows = normalize_rows([["x", "y"], [1, 2]], headers="firstrow")
    assert headers == ["x", "y"]
    assert rows == [[1, 2]]


def test_normalize_dict_rows_with_keys():
    headers, rows = normalize_rows([{"a": 1, "b": 2}, {"b": 3, "c": 4}], headers="keys")
    assert headers == ["a", "b", "c"]
    assert rows == [[1, 2, None], [None, 3, 4]]


def test_normalize_keys_needs_mappings():
    with pytest.raises(TypeError):
        normalize_rows([[1, 2]], headers="keys")


def test_normalize_unknown_headers_option():
    with pytest.raises(ValueError):
        normalize_rows([[1]], headers="first")


def test_column_types():
    rows = [[1, "a", None, 1.5], [2, "b", None, None]]
    assert column_types(rows, 4) == ["number", "text", "text", "number"]


def test_mixed_column_is_text():
    assert column_types([[1], ["x"]], 1) == ["text"]


def test_default_align():
    assert default_align("number") == "decimal"
    assert default_align("text") == "left"


def test_per_column():
    assert per_column("g", 3) == ["g", "g", "g"]
    assert per_column(5, 2) == [5, 5]
    assert per_column([1, None], 3, default=9) == [1, 9, 9]
    assert per_column(None, 2, default="x") == ["x", "x"]


def test_resolve_aligns_defaults_and_overrides():
    types = ["text", "number", "number"]
    assert resolve_aligns(None, types) == ["left", "decimal", "decimal"]
    assert resolve_aligns("right", types) == ["right", "right", "right"]
    assert resolve_aligns(["center"], types) == ["center", "decimal", "decimal"]


def test_resolve_aligns_decimal_on_text_is_right():
    assert resolve_aligns("decimal", ["text"]) == ["right"]


def test_resolve_aligns_rejects_unknown():
    with pytest.raises(ValueError):
        resolve_aligns(["middle"], ["text"])


def test_column_widths():
    header = [["name"], ["n"]]
    body = [[["alice"], ["1"]], [["bo", "b"], ["123"]]]
    assert column_widths(header, body) == [5, 3]
    assert column_widths(None, body, min_width=4) == [5, 4]
