"""``${...}`` interpolation.

Supported forms inside a raw value:

``${key}``
    ``key`` of the section being read, falling back to ``[DEFAULT]`` and
    the loader defaults.
``${section:key}``
    ``key`` of another section.
``${env:NAME}``
    a variable from the environment mapping given to the config.
``$$``
    a literal ``$``.

References are resolved recursively.  Unqualified references inside an
inherited value (e.g. a ``[DEFAULT]`` entry) resolve against the section
being read, so defaults can be specialised per section.
"""

from __future__ import annotations

from .errors import InterpolationError
from .values import is_quoted, unquote

ENV_SECTION = "env"


def split_reference(ref: str) -> tuple[str | None, str]:
    """Split ``"section:key"`` into ``("section", "key")``; bare keys give ``None``."""
    section, sep, key = ref.rpartition(":")
    if not sep:
        return None, ref.strip()
    return section.strip(), key.strip()


class Interpolator:
    """Expands references of one :class:`~cfgparse.config.Config`."""

    def __init__(self, config, env=None, max_depth: int = 32):
        self.config = config
        self.env = env if env is not None else {}
        self.max_depth = max_depth

    def resolve(self, section: str, key: str) -> str:
        """Return the fully expanded raw value of ``section.key``."""
        entry = self.config.find_entry(section, key)
        if entry is None:
            raise KeyError(f"{section}:{key}")
        return self.expand(entry.raw, section, [(section, key)], entry)

    def expand(self, text: str, section: str, chain: list, origin) -> str:
        """Expand every reference in *text*, read in the context of *section*.

        *chain* lists the ``(section, key)`` pairs being expanded, for cycle
        detection; *origin* is the entry *text* came from, for error lines.
        """
        out: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if ch != "$":
                out.append(ch)
                i += 1
                continue
            nxt = text[i + 1:i + 2]
            if nxt == "$":
                out.append("$")
                i += 2
            elif nxt == "{":
                end = text.find("}", i + 2)
                if end < 0:
                    raise InterpolationError(
                        f"unterminated reference in {text!r}", origin.source, origin.line)
                ref = text[i + 2:end]
                out.append(self._substitute(ref, section, chain, origin))
                i = end + 1
            else:
                out.append(ch)
                i += 1
        return "".join(out)

    def _substitute(self, ref: str, section: str, chain: list, origin) -> str:
        ref_section, key = split_reference(ref)
        if not key:
            raise InterpolationError("empty reference ${}", origin.source, origin.line)
        if ref_section == ENV_SECTION:
            if key not in self.env:
                raise InterpolationError(
                    f"undefined environment variable {key!r}", origin.source, origin.line)
            return str(self.env[key])
        target = section if ref_section is None else ref_section
        link = (target, key)
        if link in chain:
            path = " -> ".join(f"{s}:{k}" for s, k in chain + [link])
            raise InterpolationError(f"circular reference: {path}", origin.source, origin.line)
        if len(chain) >= self.max_depth:
            raise InterpolationError("interpolation too deep", origin.source, origin.line)
        entry = self.config.find_entry(target, key)
        if entry is None:
            raise InterpolationError(
                f"undefined reference ${{{ref}}}", origin.source, origin.line)
        expanded = self.expand(entry.raw, target, chain + [link], entry)
        return unquote(expanded) if is_quoted(expanded) else expanded
