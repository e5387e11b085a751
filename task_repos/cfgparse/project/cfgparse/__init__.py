"""cfgparse: an INI-like configuration parser, validator and writer.

Quick start::

    import cfgparse

    cfg = cfgparse.loads('''
    [server]
    host = example.org
    port = 8080
    url = http://${host}:${port}/
    ''')
    cfg.get("server", "port")      # 8080
    cfg.get("server", "url")       # 'http://example.org:8080/'
    cfgparse.dumps(cfg)            # the original text
"""

from __future__ import annotations

import os

from .config import DEFAULT_SECTION, Config, Entry, Section
from .errors import (ConfigError, ConversionError, DuplicateError, IncludeError,
                     InterpolationError, ParseError, ValidationError, ValidationIssue)
from .loaders import DictLoader, DirectoryLoader, Loader
from .parser import Parser
from .schema import Field, Schema
from .values import format_value, infer
from .writer import dump, dumps

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SECTION", "Config", "Entry", "Section", "ConfigError", "ConversionError",
    "DuplicateError", "IncludeError", "InterpolationError", "ParseError",
    "ValidationError", "ValidationIssue", "DictLoader", "DirectoryLoader", "Loader",
    "Parser", "Field", "Schema", "format_value", "infer", "dump", "dumps", "load", "loads",
]


def loads(text: str, *, source: str = "<string>", loader: Loader | None = None,
          defaults: dict | None = None, env: dict | None = None, strict: bool = True) -> Config:
    """Parse configuration *text* and return a :class:`Config`."""
    config = Config(defaults=defaults, env=env)
    return Parser(loader, strict=strict).parse(text, source, config)


def load(name: str | os.PathLike, *, loader: Loader | None = None,
         defaults: dict | None = None, env: dict | None = None, strict: bool = True) -> Config:
    """Load the file *name*.

    With a *loader*, *name* is resolved through it; otherwise *name* is a
    filesystem path and includes are resolved in its directory.
    """
    if loader is None:
        path = os.path.abspath(os.fspath(name))
        loader = DirectoryLoader(os.path.dirname(path))
        name = os.path.basename(path)
    canonical, text = loader.load(os.fspath(name))
    return loads(text, source=canonical, loader=loader, defaults=defaults, env=env, strict=strict)
