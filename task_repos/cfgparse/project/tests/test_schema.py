import pytest

import cfgparse
from cfgparse import Field, Schema, ValidationError

TEXT = """\
[server]
host = example.org
port = 8080
mode = fast
"""

SCHEMA = Schema({
    "server": {
        "host": Field(str, required=True),
        "port": Field(int, default=80, min=1, max=65535),
        "mode": Field(str, choices=["fast", "safe"]),
        "debug": Field(bool, default=False),
    },
})


def test_valid_config_returns_typed_values():
    cfg = cfgparse.loads(TEXT)
    assert SCHEMA.validate(cfg) == {
        "server": {"host": "example.org", "port": 8080, "mode": "fast", "debug": False},
    }


def test_type_error_has_line_number():
    cfg = cfgparse.loads(TEXT.replace("8080", "eighty"), source="srv.ini")
    with pytest.raises(ValidationError) as info:
        SCHEMA.validate(cfg)
    (issue,) = info.value.issues
    assert (issue.section, issue.key, issue.line) == ("server", "port", 3)
    assert str(issue) == "srv.ini:3: [server] port: expected int, got 'eighty'"


def test_all_issues_are_collected():
    cfg = cfgparse.loads("[server]\nport = 0\nmode = slow\n")
    with pytest.raises(ValidationError) as info:
        SCHEMA.validate(cfg)
    messages = [issue.message for issue in info.value.issues]
    assert messages == ["required key missing", "value must be >= 1, got 0",
                        "must be one of 'fast', 'safe', got 'slow'"]
    assert str(info.value).startswith("3 validation errors:\n")


def test_unknown_key_with_suggestion():
    cfg = cfgparse.loads(TEXT + "hots = x\n")
    with pytest.raises(ValidationError) as info:
        SCHEMA.validate(cfg)
    (issue,) = info.value.issues
    assert issue.message == "unknown key (did you mean 'host'?)"
    assert issue.line == 5


def test_extra_keys_allowed_when_configured():
    schema = Schema(SCHEMA.sections, allow_extra_keys=True)
    cfg = cfgparse.loads(TEXT + "other = 1\n")
    assert "other" not in schema.validate(cfg)["server"]


def test_missing_required_section():
    with pytest.raises(ValidationError, match=r"\[server\]: required section missing"):
        SCHEMA.validate(cfgparse.loads("[other]\n"))


def test_unknown_section_rejected():
    schema = Schema({"server": {}}, allow_extra_sections=False)
    cfg = cfgparse.loads("[server]\n[servre]\n", source="a.ini")
    with pytest.raises(ValidationError) as info:
        schema.validate(cfg)
    assert str(info.value.issues[0]) == (
        "a.ini:2: [servre]: unknown section (did you mean 'server'?)")


def test_list_field_with_item_type():
    schema = Schema({"s": {"ports": Field(list, item_type=int, max=3)}})
    assert schema.validate(cfgparse.loads("[s]\nports = 1, 2\n")) == {"s": {"ports": [1, 2]}}
    with pytest.raises(ValidationError, match="length must be <= 3, got 4"):
        schema.validate(cfgparse.loads("[s]\nports = [1, 2, 3, 4]\n"))


def test_schema_sees_interpolated_and_inherited_values():
    cfg = cfgparse.loads("[DEFAULT]\nbase = 8000\n[server]\nhost = h\nport = ${base}\n")
    assert SCHEMA.validate(cfg)["server"]["port"] == 8000


def test_unsupported_field_type():
    with pytest.raises(TypeError):
        Field(dict)
