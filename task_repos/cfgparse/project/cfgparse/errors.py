"""Exception hierarchy used throughout :mod:`cfgparse`.

Every error knows (when possible) the source name and the 1-based line
number it refers to, and renders them in the familiar ``source:line: msg``
form so that messages can be shown to users as-is.
"""

from __future__ import annotations


class ConfigError(Exception):
    """Base class of all errors raised by this package."""

    def __init__(self, message: str, source: str | None = None, line: int | None = None):
        self.message = message
        self.source = source
        self.line = line
        super().__init__(self.__str__())

    def location(self) -> str:
        """Return ``source:line`` (or whichever part is known), or ``""``."""
        if self.source is not None and self.line is not None:
            return f"{self.source}:{self.line}"
        if self.source is not None:
            return self.source
        if self.line is not None:
            return f"line {self.line}"
        return ""

    def __str__(self) -> str:
        where = self.location()
        return f"{where}: {self.message}" if where else self.message


class ParseError(ConfigError):
    """The text is not syntactically valid."""


class DuplicateError(ParseError):
    """A key was defined twice in the same section of the same file."""


class InterpolationError(ConfigError):
    """A ``${...}`` reference could not be resolved."""


class IncludeError(ConfigError):
    """An ``%include`` directive failed (missing file, cycle, too deep)."""


class ConversionError(ConfigError, ValueError):
    """A raw value could not be converted to the requested type."""


class ValidationIssue:
    """One problem found by :class:`cfgparse.schema.Schema`."""

    def __init__(self, section: str, key: str | None, message: str,
                 source: str | None = None, line: int | None = None):
        self.section = section
        self.key = key
        self.message = message
        self.source = source
        self.line = line

    def __str__(self) -> str:
        where = ConfigError(self.message, self.source, self.line).location()
        target = f"[{self.section}]" + (f" {self.key}" if self.key is not None else "")
        text = f"{target}: {self.message}"
        return f"{where}: {text}" if where else text

    def __repr__(self) -> str:
        return f"ValidationIssue({str(self)!r})"


class ValidationError(ConfigError):
    """Raised by schema validation; carries every issue that was found."""

    def __init__(self, issues: list[ValidationIssue]):
        self.issues = list(issues)
        first = self.issues[0] if self.issues else None
        super().__init__(
            self._summary(),
            first.source if first else None,
            first.line if first else None,
        )

    def _summary(self) -> str:
        count = len(self.issues)
        noun = "error" if count == 1 else "errors"
        lines = [f"{count} validation {noun}:"]
        lines.extend(f"  {issue}" for issue in self.issues)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.message
