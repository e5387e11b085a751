import pytest

import cfgparse
from cfgparse import Config, ConversionError

TEXT = """\
[DEFAULT]
retries = 3

[db]
host = localhost
port = 5432
debug = no
ratio = 0.25
hosts = a, b, c
"""


@pytest.fixture
def cfg():
    return cfgparse.loads(TEXT, source="app.ini")


def test_typed_getters(cfg):
    assert cfg.get_int("db", "port") == 5432
    assert cfg.get_bool("db", "debug") is False
    assert cfg.get_float("db", "ratio") == 0.25
    assert cfg.get_list("db", "hosts") == ["a", "b", "c"]
    assert cfg.get_str("db", "port") == "5432"


def test_default_section_inheritance(cfg):
    assert cfg.get("db", "retries") == 3
    assert "retries" in cfg["db"]
    assert cfg.keys("db")[-1] == "retries"


def test_missing_key_default_and_error(cfg):
    assert cfg.get("db", "nope", default=None) is None
    with pytest.raises(KeyError):
        cfg.get("db", "nope")


def test_conversion_error_has_location(cfg):
    with pytest.raises(ConversionError) as info:
        cfg.get_int("db", "host")
    assert info.value.line == 5
    assert str(info.value).startswith("app.ini:5: db:host: expected int")


def test_loader_defaults_lowest_priority():
    cfg = cfgparse.loads("[DEFAULT]\na = file\n[s]\n", defaults={"a": "given", "b": 7})
    assert cfg.get("s", "a") == "file"
    assert cfg.get("s", "b") == 7


def test_set_and_get_python_values():
    cfg = Config()
    cfg.set("s", "n", 10)
    cfg.set("s", "flags", [True, False])
    cfg.set("s", "price", "$9")
    assert cfg.get("s", "n") == 10
    assert cfg.get("s", "flags") == [True, False]
    assert cfg.get("s", "price") == "$9"


def test_set_raw_is_interpolated():
    cfg = cfgparse.loads("[s]\nname = world\n")
    cfg.set_raw("s", "greeting", "hello ${name}")
    assert cfg.get("s", "greeting") == "hello world"


def test_section_view(cfg):
    view = cfg["db"]
    assert view["port"] == 5432
    assert view.get("missing", "dflt") == "dflt"
    assert dict(view.items())["host"] == "localhost"


def test_to_dict(cfg):
    data = cfg.to_dict()
    assert list(data) == ["db"]
    assert data["db"]["hosts"] == "a, b, c"
    assert data["db"]["retries"] == 3


def test_remove_key_and_section(cfg):
    cfg.remove("db", "ratio")
    assert cfg.get("db", "ratio", None) is None
    cfg.remove_section("db")
    assert "db" not in cfg
