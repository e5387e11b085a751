"""Parsing from many threads at once: the interpreter's own AST bug (CPython 3.11) never reaches grading."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from repogym.envs.core import pyast


def test_threads_parse_one_at_a_time(monkeypatch):
    # The bug needs two conversions in flight at once; the lock must make that impossible.
    inside, most, lock = [0], [0], threading.Lock()
    real = pyast.ast.parse

    def slow_parse(source, filename="<unknown>"):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.01)
        try:
            return real(source, filename)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(pyast.ast, "parse", slow_parse)
    with ThreadPoolExecutor(max_workers=8) as pool:
        trees = list(pool.map(lambda i: pyast.parse(f"x = {i}"), range(32)))
    assert [tree.body[0].value.value for tree in trees] == list(range(32))
    assert most[0] == 1
