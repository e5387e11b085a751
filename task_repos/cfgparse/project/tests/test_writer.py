import cfgparse
from cfgparse import Config

ORIGINAL = """\
# Application settings
top = 1

[server]   ; the server
host = example.org   # primary
port: 8080
motd = Welcome
    to the server

; storage
[storage]
path = "/var/lib/app"
# trailing comment
"""


def test_round_trip_is_exact():
    assert cfgparse.dumps(cfgparse.loads(ORIGINAL)) == ORIGINAL


def test_modified_entry_keeps_comments():
    cfg = cfgparse.loads(ORIGINAL)
    cfg.set("server", "host", "other.org")
    out = cfgparse.dumps(cfg)
    assert "host = other.org # primary\n" in out
    assert out.count("\n") == ORIGINAL.count("\n")


def test_new_section_and_key():
    cfg = cfgparse.loads("[a]\nx = 1\n")
    cfg.set("a", "y", "two words")
    cfg.set("b", "z", [1, "a b"])
    assert cfgparse.dumps(cfg) == "[a]\nx = 1\ny = two words\n\n[b]\nz = [1, a b]\n"


def test_written_values_read_back_identically():
    cfg = Config()
    data = {"n": 3, "f": 0.5, "b": True, "s": "  spaced", "dollar": "${not_a_ref}",
            "l": ["x, y", 2], "num_str": "17", "multi": "a\nb"}
    for key, value in data.items():
        cfg.set("s", key, value)
    again = cfgparse.loads(cfgparse.dumps(cfg))
    assert {key: again.get("s", key) for key in data} == data


def test_multiline_raw_rendered_as_continuation():
    cfg = Config()
    cfg.set_raw("s", "text", "one\ntwo")
    out = cfgparse.dumps(cfg)
    assert out == "[s]\ntext = one\n    two\n"
    assert cfgparse.loads(out).get("s", "text") == "one\ntwo"


def test_dump_to_file(tmp_path):
    cfg = cfgparse.loads("[a]\nx = 1\n")
    path = tmp_path / "out.ini"
    with open(path, "w") as fp:
        cfgparse.dump(cfg, fp)
    assert cfgparse.load(path).get("a", "x") == 1


def test_empty_config_dumps_empty():
    assert cfgparse.dumps(Config()) == ""
