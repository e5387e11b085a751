"""The one registry idiom: names to things, each given as an object or a lazy ``"module:attr"`` path.

Every registry in repogym (sandbox backends, tools, reward components, agents, context policies, inference
engines, algorithms) is a :class:`Registry`. A lazy entry imports its module on first use, so optional
dependencies (the docker SDK, vLLM) load only when asked for; a miss names every valid entry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from repogym.envs.core.errors import ConfigError

T = TypeVar("T")


def resolve_path(path: str) -> Any:
    """The object at ``"package.module:Attr.attr"`` (or the module itself for ``"package.module"``)."""
    module, _, attrs = path.partition(":")
    target: Any = importlib.import_module(module)
    for part in attrs.split(".") if attrs else ():
        target = getattr(target, part)
    return target


class Registry(Generic[T]):
    """Named entries of one kind; ``resolve(name)`` gives the entry, importing it on first use."""

    def __init__(self, kind: str, entries: dict[str, T | str] | None = None,
                 error: Callable[[str], Exception] = ConfigError):
        self.kind = kind
        self._entries: dict[str, T | str] = dict(entries or {})
        self._error = error

    def register(self, name: str, target: T | str) -> None:
        """Add (or replace) ``name``: an object, or a ``"module:attr"`` path imported on first use."""
        self._entries[name] = target

    def resolve(self, name: str) -> T:
        """The entry called ``name``; a miss raises the registry's error listing the valid names."""
        if name not in self._entries:
            raise self._error(f"unknown {self.kind} {name!r}: expected one of {', '.join(self.names())}")
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._entries[name] = resolve_path(entry)
        return entry

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
