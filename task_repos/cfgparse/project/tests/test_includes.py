import pytest

import cfgparse
from cfgparse import DictLoader, DirectoryLoader, IncludeError


def test_include_from_dict_loader():
    loader = DictLoader({
        "main.ini": "[a]\nx = 1\n%include extra.ini\n",
        "extra.ini": "[b]\ny = 2\n",
    })
    cfg = cfgparse.load("main.ini", loader=loader)
    assert cfg.get("a", "x") == 1
    assert cfg.get("b", "y") == 2


def test_included_values_can_be_overridden():
    loader = DictLoader({
        "main.ini": "%include base.ini\n[a]\nx = mine\n",
        "base.ini": "[a]\nx = base\ny = base\n",
    })
    cfg = cfgparse.load("main.ini", loader=loader)
    assert cfg.get("a", "x") == "mine"
    assert cfg.get("a", "y") == "base"


def test_missing_include_reports_including_line():
    loader = DictLoader({"main.ini": "[a]\n%include nope.ini\n"})
    with pytest.raises(IncludeError) as info:
        cfgparse.load("main.ini", loader=loader)
    assert info.value.source == "main.ini"
    assert info.value.line == 2
    assert "no such file: nope.ini" in str(info.value)


def test_circular_include():
    loader = DictLoader({"a.ini": "%include b.ini\n", "b.ini": "%include a.ini\n"})
    with pytest.raises(IncludeError, match="circular include: a.ini -> b.ini -> a.ini"):
        cfgparse.load("a.ini", loader=loader)


def test_include_without_loader():
    with pytest.raises(IncludeError, match="no loader"):
        cfgparse.loads("%include x.ini\n")


def test_errors_in_included_file_name_that_file():
    loader = DictLoader({"main.ini": "%include bad.ini\n", "bad.ini": "[s]\n[oops\n"})
    with pytest.raises(cfgparse.ParseError) as info:
        cfgparse.load("main.ini", loader=loader)
    assert (info.value.source, info.value.line) == ("bad.ini", 2)


def test_directory_loader(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "app.ini").write_text("[app]\nname = demo\n%include conf.d/db.ini\n")
    (tmp_path / "conf.d" / "db.ini").write_text("[db]\nport = 5432\n")
    cfg = cfgparse.load(tmp_path / "app.ini")
    assert cfg.get("db", "port") == 5432
    assert cfg.sections["db"].source == "conf.d/db.ini"


def test_directory_loader_rejects_escape(tmp_path):
    (tmp_path / "app.ini").write_text("%include ../secret.ini\n")
    with pytest.raises(IncludeError, match="outside"):
        cfgparse.load("app.ini", loader=DirectoryLoader(tmp_path))
