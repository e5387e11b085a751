"""The in-memory configuration model.

A :class:`Config` is an ordered collection of :class:`Section` objects,
each an ordered collection of :class:`Entry` objects.  Entries keep their
raw text, where they came from and the comments around them, so that the
writer can reproduce the original file.

Lookups fall back from a section to ``[DEFAULT]`` and then to the
*defaults* mapping the config was created with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import values
from .errors import ConversionError
from .interpolate import Interpolator

DEFAULT_SECTION = "DEFAULT"
_MISSING = object()


@dataclass
class Entry:
    """One ``key = value`` pair.

    ``lines`` holds the original physical lines; it is ``None`` once the
    value has been changed programmatically, telling the writer to render
    the entry afresh.
    """

    key: str
    raw: str
    source: str | None = None
    line: int | None = None
    comments: list[str] = field(default_factory=list)
    inline_comment: str | None = None
    lines: list[str] | None = None


@dataclass
class Section:
    """A named group of entries."""

    name: str
    source: str | None = None
    line: int | None = None
    comments: list[str] = field(default_factory=list)
    header: str | None = None
    implicit: bool = False
    entries: dict[str, Entry] = field(default_factory=dict)

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


class SectionView:
    """Mapping-like, read-only view of one section (with inheritance)."""

    def __init__(self, config: "Config", name: str):
        self._config = config
        self.name = name

    def __getitem__(self, key: str):
        return self._config.get(self.name, key)

    def __contains__(self, key: str) -> bool:
        return self._config.find_entry(self.name, key) is not None

    def get(self, key: str, default=None, type=None):
        return self._config.get(self.name, key, default, type=type)

    def keys(self) -> list[str]:
        return self._config.keys(self.name)

    def items(self) -> list[tuple[str, object]]:
        return [(key, self[key]) for key in self.keys()]


class Config:
    """A parsed configuration.

    *defaults* are raw strings or Python values used when neither the
    section nor ``[DEFAULT]`` defines a key.  *env* is the mapping used for
    ``${env:NAME}`` references.
    """

    def __init__(self, defaults: dict | None = None, env: dict | None = None):
        self.sections: dict[str, Section] = {}
        self.defaults: dict[str, Entry] = {}
        self.trailing: list[str] = []
        for key, value in (defaults or {}).items():
            raw = value if isinstance(value, str) else values.format_value(value)
            self.defaults[key] = Entry(key, raw, source="<defaults>")
        self.interpolator = Interpolator(self, env)

    # -- sections ---------------------------------------------------------
    def section_names(self) -> list[str]:
        """Names of all sections except ``DEFAULT``, in file order."""
        return [name for name in self.sections if name != DEFAULT_SECTION]

    def has_section(self, name: str) -> bool:
        return name in self.sections

    def add_section(self, name: str, source: str | None = None, line: int | None = None) -> Section:
        """Return section *name*, creating it if needed."""
        section = self.sections.get(name)
        if section is None:
            section = Section(name, source=source, line=line)
            self.sections[name] = section
        return section

    def remove_section(self, name: str) -> None:
        del self.sections[name]

    def __getitem__(self, name: str) -> SectionView:
        if name not in self.sections and name != DEFAULT_SECTION:
            raise KeyError(name)
        return SectionView(self, name)

    def __contains__(self, name: str) -> bool:
        return name in self.sections

    # -- entries ----------------------------------------------------------
    def find_entry(self, section: str, key: str) -> Entry | None:
        """Return the entry that provides ``section.key``, following inheritance."""
        for name in (section, DEFAULT_SECTION):
            sect = self.sections.get(name)
            if sect is not None and key in sect.entries:
                return sect.entries[key]
        return self.defaults.get(key)

    def keys(self, section: str) -> list[str]:
        """Keys visible in *section*: its own first, then inherited ones."""
        seen: dict[str, None] = {}
        own = self.sections.get(section)
        if own is not None:
            seen.update(dict.fromkeys(own.entries))
        if section != DEFAULT_SECTION and DEFAULT_SECTION in self.sections:
            seen.update(dict.fromkeys(self.sections[DEFAULT_SECTION].entries))
        seen.update(dict.fromkeys(self.defaults))
        return list(seen)

    def get_raw(self, section: str, key: str, default=_MISSING) -> str:
        """Raw, uninterpolated value text."""
        entry = self.find_entry(section, key)
        if entry is None:
            if default is _MISSING:
                raise KeyError(f"{section}:{key}")
            return default
        return entry.raw

    def get_expanded(self, section: str, key: str) -> str:
        """Value text with every ``${...}`` reference expanded."""
        return self.interpolator.resolve(section, key)

    def get(self, section: str, key: str, default=_MISSING, type=None):
        """Return the value of ``section.key``.

        Without *type* the value is inferred (see :func:`values.infer`);
        otherwise it is converted to *type*.  If the key is missing,
        *default* is returned, or :class:`KeyError` raised.
        """
        if self.find_entry(section, key) is None:
            if default is _MISSING:
                raise KeyError(f"{section}:{key}")
            return default
        text = self.get_expanded(section, key)
        if type is None:
            return values.infer(text)
        entry = self.find_entry(section, key)
        try:
            return values.convert(text, type)
        except ConversionError as exc:
            raise ConversionError(
                f"{section}:{key}: {exc.message}", entry.source, entry.line) from None

    def get_int(self, section: str, key: str, default=_MISSING) -> int:
        return self.get(section, key, default, type=int)

    def get_float(self, section: str, key: str, default=_MISSING) -> float:
        return self.get(section, key, default, type=float)

    def get_bool(self, section: str, key: str, default=_MISSING) -> bool:
        return self.get(section, key, default, type=bool)

    def get_str(self, section: str, key: str, default=_MISSING) -> str:
        return self.get(section, key, default, type=str)

    def get_list(self, section: str, key: str, default=_MISSING) -> list:
        return self.get(section, key, default, type=list)

    def set(self, section: str, key: str, value) -> None:
        """Set ``section.key`` to the Python *value*, creating the section.

        Strings are stored literally: ``$`` is escaped, so no interpolation
        happens on them.  Use :meth:`set_raw` to store reference text.
        """
        self.set_raw(section, key, values.format_value(value))

    def set_raw(self, section: str, key: str, raw: str) -> None:
        """Set ``section.key`` to the raw text *raw* (interpolated on read)."""
        sect = self.add_section(section)
        entry = sect.entries.get(key)
        if entry is None:
            sect.entries[key] = Entry(key, raw)
        else:
            entry.raw = raw
            entry.lines = None

    def remove(self, section: str, key: str) -> None:
        """Delete ``section.key`` (only from the section itself)."""
        del self.sections[section].entries[key]

    def to_dict(self, include_default: bool = False) -> dict:
        """Return ``{section: {key: value}}`` with inferred, expanded values."""
        names = self.section_names()
        if include_default:
            names = [DEFAULT_SECTION] + names
        return {name: {key: self.get(name, key) for key in self.keys(name)} for name in names}
