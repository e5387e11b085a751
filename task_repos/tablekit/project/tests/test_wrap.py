import pytest

from tablekit.wrap import fit_prefix, truncate, truncate_text, wrap_line, wrap_text


def test_short_line_is_unchanged():
    assert wrap_line("hello  world", 20) == ["hello  world"]


def test_wrap_words():
    assert wrap_text("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


def test_wrap_keeps_explicit_newlines():
    assert wrap_text("one two\nthree", 5) == ["one", "two", "three"]


def test_wrap_without_width_only_splits():
    assert wrap_text("a b\nc", None) == ["a b", "c"]


def test_wrap_rejects_zero_width():
    with pytest.raises(ValueError):
        wrap_text("abc", 0)


def test_long_word_is_broken():
    assert wrap_text("abcdefghij", 4) == ["abcd", "efgh", "ij"]


def test_long_word_first_then_more_words():
    assert wrap_text("abcdefgh ij k", 5) == ["abcde", "fgh", "ij k"]


def test_wrap_wide_characters():
    assert wrap_text("日本語の文章", 5) == ["日本", "語の", "文章"]


def test_fit_prefix():
    assert fit_prefix("abcdef", 3) == 3
    assert fit_prefix("日本語", 3) == 1
    assert fit_prefix("ab", 10) == 2


def test_fit_prefix_forces_progress():
    assert fit_prefix("日", 1) == 1
    assert fit_prefix("日", 1, force=False) == 0


def test_truncate_ascii():
    assert truncate("hello world", 8) == "hello w\u2026"
    assert truncate("short", 8) == "short"


def test_truncate_custom_ellipsis():
    assert truncate("abcdefgh", 6, ellipsis="...") == "abc..."


def test_truncate_text_per_line():
    assert truncate_text("abcdef\nxy", 4) == ["abc\u2026", "xy"]
