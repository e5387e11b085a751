"""Loaders resolve and read the files named by ``%include`` directives.

A loader maps an include name, relative to the including file, to a
canonical name and the text behind it.  Canonical names are what cycle
detection and error messages use.
"""

from __future__ import annotations

import os
import posixpath

from .errors import IncludeError


class Loader:
    """Interface: subclasses implement :meth:`resolve` and :meth:`read`."""

    def resolve(self, name: str, relative_to: str | None = None) -> str:
        """Return the canonical name of *name* included from *relative_to*."""
        raise NotImplementedError

    def read(self, canonical: str) -> str:
        """Return the text of the file with canonical name *canonical*."""
        raise NotImplementedError

    def load(self, name: str, relative_to: str | None = None) -> tuple[str, str]:
        """Resolve and read *name*; return ``(canonical, text)``."""
        canonical = self.resolve(name, relative_to)
        return canonical, self.read(canonical)


class DictLoader(Loader):
    """Serve files from a ``{path: text}`` mapping with POSIX-style paths.

    Relative include names are resolved against the directory of the
    including file; absolute ones (``/x.ini``) against the mapping root.
    """

    def __init__(self, files: dict[str, str]):
        self.files = {self._normalize(path): text for path, text in files.items()}

    @staticmethod
    def _normalize(path: str) -> str:
        return posixpath.normpath(path).lstrip("/")

    def resolve(self, name: str, relative_to: str | None = None) -> str:
        if name.startswith("/") or not relative_to:
            return self._normalize(name)
        base = posixpath.dirname(relative_to)
        return self._normalize(posixpath.join(base, name))

    def read(self, canonical: str) -> str:
        try:
            return self.files[canonical]
        except KeyError:
            raise IncludeError(f"no such file: {canonical}") from None


class DirectoryLoader(Loader):
    """Serve files below a directory; includes may not escape it."""

    def __init__(self, root: str | os.PathLike, encoding: str = "utf-8"):
        self.root = os.path.realpath(os.fspath(root))
        self.encoding = encoding

    def resolve(self, name: str, relative_to: str | None = None) -> str:
        if os.path.isabs(name) or not relative_to:
            base = self.root
            name = name.lstrip("/\\")
        else:
            base = os.path.dirname(os.path.join(self.root, relative_to))
        full = os.path.realpath(os.path.join(base, name))
        if os.path.commonpath([full, self.root]) != self.root:
            raise IncludeError(f"include outside of {self.root}: {name}")
        return os.path.relpath(full, self.root).replace(os.sep, "/")

    def read(self, canonical: str) -> str:
        path = os.path.join(self.root, canonical)
        try:
            with open(path, encoding=self.encoding) as fp:
                return fp.read()
        except FileNotFoundError:
            raise IncludeError(f"no such file: {canonical}") from None
