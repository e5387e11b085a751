import pytest

import cfgparse
from cfgparse import InterpolationError


def test_same_section_reference():
    cfg = cfgparse.loads("[s]\na = 1\nb = ${a}0\n")
    assert cfg.get("s", "b") == 10


def test_cross_section_reference():
    cfg = cfgparse.loads("[paths]\nroot = /srv\n[app]\nlog = ${paths:root}/log\n")
    assert cfg.get("app", "log") == "/srv/log"


def test_chained_references():
    cfg = cfgparse.loads("[s]\na = x\nb = ${a}y\nc = ${b}z\n")
    assert cfg.get("s", "c") == "xyz"


def test_reference_to_default_section():
    cfg = cfgparse.loads("[DEFAULT]\nhome = /home/u\n[s]\ncache = ${home}/.cache\n")
    assert cfg.get("s", "cache") == "/home/u/.cache"


def test_dollar_escape():
    cfg = cfgparse.loads("[s]\nprice = $$5 and ${x}\nx = $$y\n")
    assert cfg.get("s", "price") == "$5 and $y"


def test_lone_dollar_kept():
    cfg = cfgparse.loads("[s]\nv = a$b\n")
    assert cfg.get("s", "v") == "a$b"


def test_env_reference():
    cfg = cfgparse.loads("[s]\nhome = ${env:HOME}/x\n", env={"HOME": "/h"})
    assert cfg.get("s", "home") == "/h/x"


def test_undefined_reference_reports_line():
    cfg = cfgparse.loads("[s]\n\nv = ${nope}\n", source="c.ini")
    with pytest.raises(InterpolationError) as info:
        cfg.get("s", "v")
    assert info.value.line == 3
    assert "undefined reference ${nope}" in str(info.value)


def test_circular_reference():
    cfg = cfgparse.loads("[s]\na = ${b}\nb = ${a}\n")
    with pytest.raises(InterpolationError, match="circular reference: s:a -> s:b -> s:a"):
        cfg.get("s", "a")


def test_unterminated_reference():
    cfg = cfgparse.loads("[s]\nv = ${oops\n")
    with pytest.raises(InterpolationError, match="unterminated"):
        cfg.get("s", "v")


def test_quoted_referenced_value_is_unquoted():
    cfg = cfgparse.loads('[s]\nname = "Ann Lee"\ngreet = hi ${name}!\n')
    assert cfg.get("s", "greet") == "hi Ann Lee!"
