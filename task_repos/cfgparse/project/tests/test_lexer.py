import pytest

from cfgparse import ParseError
from cfgparse import lexer


def kinds(text):
    return [tok.kind for tok in lexer.tokenize(text)]


def test_token_kinds():
    text = "# c\n\n[s]\nk = v\n  more\n%include other.ini\n"
    assert kinds(text) == [lexer.COMMENT, lexer.BLANK, lexer.SECTION, lexer.ENTRY,
                           lexer.CONTINUATION, lexer.DIRECTIVE]


def test_entry_key_value_and_inline_comment():
    (tok,) = lexer.tokenize("name = value  # note")
    assert (tok.name, tok.value, tok.comment) == ("name", "value", "# note")
    assert tok.line == 1


def test_colon_separator():
    (tok,) = lexer.tokenize("name: value")
    assert (tok.name, tok.value) == ("name", "value")


def test_hash_inside_quotes_is_not_comment():
    (tok,) = lexer.tokenize('color = "#ff0000"  ; red')
    assert tok.value == '"#ff0000"'
    assert tok.comment == "; red"


def test_split_inline_comment_plain():
    assert lexer.split_inline_comment("abc ; x") == ("abc", "; x")
    assert lexer.split_inline_comment("abc") == ("abc", None)


def test_section_header_with_comment():
    (tok,) = lexer.tokenize("[ server ]  # main")
    assert tok.kind == lexer.SECTION
    assert tok.name == "server"
    assert tok.comment == "# main"


def test_unterminated_section_reports_line():
    with pytest.raises(ParseError) as info:
        lexer.tokenize("[ok]\n[broken\n", source="app.ini")
    assert info.value.line == 2
    assert str(info.value).startswith("app.ini:2:")


def test_missing_separator_is_error():
    with pytest.raises(ParseError, match="expected 'key = value'"):
        lexer.tokenize("[s]\njust a line\n")


def test_unknown_directive():
    with pytest.raises(ParseError, match="unknown directive"):
        lexer.tokenize("%import x.ini")


def test_directive_argument_unquoted():
    (tok,) = lexer.tokenize('%include "conf.d/extra.ini"')
    assert (tok.name, tok.value) == ("include", "conf.d/extra.ini")


def test_indented_entry_after_section_is_entry():
    toks = lexer.tokenize("[s]\n  key = 1\n")
    assert toks[1].kind == lexer.ENTRY
    assert toks[1].name == "key"
