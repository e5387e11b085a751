"""The plain records the analysis layer hands out: symbols, references and the problems it found.

All are frozen dataclasses so an index can share them between copies without defensive copying.
Line numbers are 1-based; paths are posix and relative to the repository root.
"""

from __future__ import annotations

from dataclasses import dataclass

SYMBOL_KINDS = ("module", "class", "function", "method")
REFERENCE_KINDS = ("call", "attribute", "import", "name", "fixture")


@dataclass(frozen=True)
class Symbol:
    """A module, class, function or method, named by its dotted path from the repository root."""

    name: str
    """Qualified name, e.g. ``pkg.mod.Class.method``; ``pkg/__init__.py`` is ``pkg``."""
    kind: str
    """One of ``SYMBOL_KINDS``."""
    file: str
    """Path relative to the repository root."""
    line: int
    """First line of the ``def``/``class`` statement (not of its decorators); 1 for a module."""
    end_line: int
    """Last line of the definition."""
    signature: str = ""
    """Normalised parameter list (plus ``-> T`` when annotated) for functions and methods, else ""."""
    test_id: str | None = None
    """Pytest node id (``tests/test_x.py::TestC::test_m``) when this is a test, else None."""


@dataclass(frozen=True)
class Reference:
    """One resolved use of a repository symbol: ``source`` uses ``target`` at ``file:line``."""

    source: str
    """Qualified name of the enclosing def, or the module for module-level code."""
    target: str
    """Qualified name of the symbol used."""
    file: str
    line: int
    kind: str
    """One of ``REFERENCE_KINDS``."""


@dataclass(frozen=True)
class Unresolved:
    """A use that looks like it could be repository code but cannot be resolved statically."""

    file: str
    line: int
    expression: str
    reason: str
    """``getattr``, ``dynamic attribute``, ``dynamic dispatch``, ``star import`` or ``unknown name``."""


@dataclass(frozen=True)
class SyntaxIssue:
    """A file whose tree has ERROR or MISSING nodes; ``line`` is that of the first one."""

    file: str
    line: int
    message: str
