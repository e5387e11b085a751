"""Declarative validation of a loaded :class:`~cfgparse.config.Config`.

Example::

    schema = Schema({
        "server": {
            "host": Field(str, required=True),
            "port": Field(int, default=8080, min=1, max=65535),
        },
    })
    settings = schema.validate(config)   # {"server": {"host": ..., "port": ...}}

All problems are collected and raised together as one
:class:`~cfgparse.errors.ValidationError` whose issues carry the source
and line of the offending entry.
"""

from __future__ import annotations

import difflib

from . import values
from .config import DEFAULT_SECTION
from .errors import ConversionError, InterpolationError, ValidationError, ValidationIssue

_NO_DEFAULT = object()


def suggest(name: str, candidates) -> str:
    """Return a ``" (did you mean 'x'?)"`` hint, or ``""``."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


class Field:
    """Description of one key.

    *min* and *max* bound numbers, or the length of strings and lists.
    """

    def __init__(self, type=str, *, required: bool = False, default=_NO_DEFAULT,
                 choices=None, min=None, max=None, item_type=None):
        if type not in (str, int, float, bool, list):
            raise TypeError(f"unsupported field type: {values.type_name(type)}")
        self.type = type
        self.required = required
        self.default = default
        self.choices = list(choices) if choices is not None else None
        self.min = min
        self.max = max
        self.item_type = item_type

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    def coerce(self, text: str):
        """Convert expanded value *text*; raises :class:`ConversionError`."""
        if self.type is list:
            return values.to_list(text, self.item_type)
        return values.convert(text, self.type)

    def check(self, value) -> str | None:
        """Return a message describing why *value* is invalid, or ``None``."""
        if self.choices is not None and value not in self.choices:
            options = ", ".join(repr(choice) for choice in self.choices)
            return f"must be one of {options}, got {value!r}"
        if isinstance(value, (str, list)):
            measured, label = len(value), "length"
        elif isinstance(value, bool):
            return None
        else:
            measured, label = value, "value"
        if self.min is not None and measured < self.min:
            return f"{label} must be >= {self.min}, got {measured!r}"
        if self.max is not None and measured > self.max:
            return f"{label} must be <= {self.max}, got {measured!r}"
        return None


class Schema:
    """A set of sections, each a ``{key: Field}`` mapping."""

    def __init__(self, sections: dict, *, allow_extra_sections: bool = True,
                 allow_extra_keys: bool = False):
        self.sections = sections
        self.allow_extra_sections = allow_extra_sections
        self.allow_extra_keys = allow_extra_keys

    def validate(self, config) -> dict:
        """Check *config*; return ``{section: {key: value}}`` of typed values.

        Missing optional keys get their defaults.  Raises
        :class:`ValidationError` listing every issue found.
        """
        issues: list[ValidationIssue] = []
        result: dict = {}
        for name, fields in self.sections.items():
            section = config.sections.get(name)
            if section is None and name != DEFAULT_SECTION:
                if any(f.required for f in fields.values()):
                    issues.append(ValidationIssue(name, None, "required section missing"))
                    continue
            result[name] = self._validate_section(config, name, section, fields, issues)
        if not self.allow_extra_sections:
            for name in config.section_names():
                if name not in self.sections:
                    section = config.sections[name]
                    hint = suggest(name, self.sections)
                    issues.append(ValidationIssue(
                        name, None, f"unknown section{hint}", section.source, section.line))
        if issues:
            raise ValidationError(issues)
        return result

    def _validate_section(self, config, name, section, fields, issues) -> dict:
        out: dict = {}
        for key, fld in fields.items():
            entry = config.find_entry(name, key)
            if entry is None:
                if fld.required:
                    issues.append(ValidationIssue(
                        name, key, "required key missing",
                        section.source if section else None,
                        section.line if section else None))
                elif fld.has_default:
                    out[key] = fld.default
                continue
            try:
                value = fld.coerce(config.get_expanded(name, key))
            except (ConversionError, InterpolationError) as exc:
                issues.append(ValidationIssue(name, key, exc.message, entry.source, entry.line))
                continue
            problem = fld.check(value)
            if problem:
                issues.append(ValidationIssue(name, key, problem, entry.source, entry.line))
            else:
                out[key] = value
        if section is not None and not self.allow_extra_keys:
            for key, entry in section.entries.items():
                if key not in fields:
                    hint = suggest(key, fields)
                    issues.append(ValidationIssue(
                        name, key, f"unknown key{hint}", entry.source, entry.line))
        return out
