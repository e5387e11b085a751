from tablekit import csv_to_table, load_table, read_csv, read_tsv, sniff_delimiter
from tablekit.io import convert_field


def test_convert_field():
    assert convert_field("42") == 42
    assert convert_field("-7") == -7
    assert convert_field("2.5") == 2.5
    assert convert_field("1e3") == 1000.0
    assert convert_field("") is None
    assert convert_field("  ") is None
    assert convert_field("abc") == "abc"
    assert convert_field("1_000") == "1_000"
    assert convert_field("nan") == "nan"


def test_read_csv():
    headers, rows = read_csv('name,qty\n"Smith, J",3\nDoe,4.5\n')
    assert headers == ["name", "qty"]
    assert rows == [["Smith, J", 3], ["Doe", 4.5]]


def test_read_csv_without_header_or_conversion():
    headers, rows = read_csv("1,2\n3,4\n", header=False, convert=False)
    assert headers is None
    assert rows == [["1", "2"], ["3", "4"]]


def test_read_csv_skips_blank_lines():
    headers, rows = read_csv("a\n\n1\n\n2\n")
    assert rows == [[1], [2]]


def test_read_csv_quoted_newline():
    headers, rows = read_csv('a,b\n"line1\nline2",x\n')
    assert rows == [["line1\nline2", "x"]]


def test_read_tsv():
    headers, rows = read_tsv("a\tb\n1\tx y\n")
    assert headers == ["a", "b"]
    assert rows == [[1, "x y"]]


def test_sniff_delimiter():
    assert sniff_delimiter("a\tb\tc\n1\t2\t3") == "\t"
    assert sniff_delimiter("a;b;c\n") == ";"
    assert sniff_delimiter("\n\na,b\n") == ","
    assert sniff_delimiter("single") == ","


def test_csv_to_table():
    out = csv_to_table("item,price\ntea,3.5\ncoffee,12\n", style="rst")
    assert out == (
        "======  =====\n"
        "item    price\n"
        "======  =====\n"
        "tea       3.5\n"
        "coffee   12\n"
        "======  ====="
    )


def test_csv_to_table_tsv_guess():
    out = csv_to_table("x\ty\n1\t2\n")
    assert out == "x  y\n1  2"


def test_load_table(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("k,v\na,1\n", encoding="utf-8")
    assert load_table(path, style="markdown") == "| k | v |\n|:--|--:|\n| a | 1 |"
