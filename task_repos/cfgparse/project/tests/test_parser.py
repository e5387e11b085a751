import pytest

import cfgparse
from cfgparse import DuplicateError, ParseError


def test_sections_and_keys_in_order():
    cfg = cfgparse.loads("[a]\nx = 1\ny = 2\n[b]\nz = 3\n")
    assert cfg.section_names() == ["a", "b"]
    assert cfg.keys("a") == ["x", "y"]


def test_top_level_keys_go_to_default():
    cfg = cfgparse.loads("timeout = 5\n[a]\nx = 1\n")
    assert cfg.get("DEFAULT", "timeout") == 5
    assert cfg.get("a", "timeout") == 5
    assert cfg.section_names() == ["a"]


def test_continuation_lines_joined():
    cfg = cfgparse.loads("[s]\ntext = first\n    second\n    third\n")
    assert cfg.get("s", "text") == "first\nsecond\nthird"


def test_value_starting_on_next_line():
    cfg = cfgparse.loads("[s]\nitems =\n  one\n  two\n")
    assert cfg.get_raw("s", "items") == "one\ntwo"


def test_duplicate_key_is_error_with_both_lines():
    with pytest.raises(DuplicateError) as info:
        cfgparse.loads("[s]\nk = 1\n\nk = 2\n", source="x.ini")
    err = info.value
    assert err.line == 4
    assert "first defined on line 2" in str(err)


def test_duplicate_key_allowed_when_not_strict():
    cfg = cfgparse.loads("[s]\nk = 1\nk = 2\n", strict=False)
    assert cfg.get("s", "k") == 2


def test_reopened_section_merges():
    cfg = cfgparse.loads("[s]\na = 1\n[t]\nb = 2\n[s]\nc = 3\n")
    assert cfg.keys("s") == ["a", "c"]


def test_section_records_line():
    cfg = cfgparse.loads("\n\n[s]\nk = v\n", source="f.ini")
    section = cfg.sections["s"]
    assert (section.source, section.line) == ("f.ini", 3)
    assert section.entries["k"].line == 4


def test_empty_section_name():
    with pytest.raises(ParseError, match="empty section name"):
        cfgparse.loads("[ ]\n")
