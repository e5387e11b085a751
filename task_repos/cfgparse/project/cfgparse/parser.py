"""Build a :class:`~cfgparse.config.Config` from lexer tokens.

The parser tracks the current section, attaches comment and blank lines
to the item that follows them (so the writer can put them back), joins
continuation lines and processes ``%include`` directives through a
:class:`~cfgparse.loaders.Loader`.  Included files are parsed into the same
config; after the directive, parsing resumes in the section that was
current before it.
"""

from __future__ import annotations

from . import lexer
from .config import DEFAULT_SECTION, Config, Entry
from .errors import DuplicateError, IncludeError


class Parser:
    """Configurable parser.

    *strict* makes a key defined twice in the same section of the same
    file an error; across files the later definition always wins.
    """

    def __init__(self, loader=None, strict: bool = True, max_include_depth: int = 16):
        self.loader = loader
        self.strict = strict
        self.max_include_depth = max_include_depth

    def parse(self, text: str, source: str = "<string>", config: Config | None = None) -> Config:
        """Parse *text* (named *source* in messages) into *config* or a new one."""
        if config is None:
            config = Config()
        config.trailing = self._parse(text, source, config, [source])
        return config

    def _parse(self, text: str, source: str, config: Config, stack: list[str]) -> list[str]:
        """Parse one file; return the comment/blank lines left over at its end."""
        pending: list[str] = []
        section = None
        entry = None
        seen: dict[tuple[str, str], int] = {}
        for tok in lexer.tokenize(text, source):
            if tok.kind in (lexer.BLANK, lexer.COMMENT):
                pending.append(tok.text)
                entry = None
            elif tok.kind == lexer.CONTINUATION:
                entry.raw = entry.raw + "\n" + tok.value if entry.raw else tok.value
                entry.lines.append(tok.text)
            elif tok.kind == lexer.SECTION:
                section = config.add_section(tok.name, source, tok.line)
                if section.header is None:
                    section.header = tok.text
                    section.comments = pending
                    section.source, section.line = source, tok.line
                    pending = []
                entry = None
            elif tok.kind == lexer.DIRECTIVE:
                self._include(tok, source, config, stack)
                entry = None
            else:
                if section is None:
                    section = config.add_section(DEFAULT_SECTION, source, tok.line)
                    if section.header is None:
                        section.implicit = True
                self._check_duplicate(seen, section.name, tok, source)
                entry = Entry(tok.name, tok.value, source, tok.line, pending,
                              tok.comment, [tok.text])
                section.entries[tok.name] = entry
                pending = []
        return pending

    def _check_duplicate(self, seen: dict, section: str, tok, source: str) -> None:
        key = (section, tok.name)
        if self.strict and key in seen:
            raise DuplicateError(
                f"duplicate key {tok.name!r} in section [{section}]"
                f" (first defined on line {seen[key]})", source, tok.line)
        seen[key] = tok.line

    def _include(self, tok, source: str, config: Config, stack: list[str]) -> None:
        if self.loader is None:
            raise IncludeError("%include used but no loader was given", source, tok.line)
        try:
            canonical, text = self.loader.load(tok.value, source)
        except IncludeError as exc:
            raise IncludeError(exc.message, source, tok.line) from None
        if canonical in stack:
            chain = " -> ".join(stack + [canonical])
            raise IncludeError(f"circular include: {chain}", source, tok.line)
        if len(stack) > self.max_include_depth:
            raise IncludeError("includes nested too deeply", source, tok.line)
        self._parse(text, canonical, config, stack + [canonical])
