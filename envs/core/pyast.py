"""``ast.parse`` that threads may call at once.

CPython 3.11 keeps the recursion depth of its AST conversion in per-interpreter state, so two threads parsing at
the same moment can fail with ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905):
a bug of the interpreter, not of the source parsed. Grading runs in several threads (an env per thread, the soak,
bench workers), so every parse of ours goes through one lock. Parses are milliseconds; the lock costs nothing
measurable.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """:func:`ast.parse`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename)
