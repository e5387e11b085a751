"""docs/scaling.md's Ray token-authentication section names what the installed Ray reads: each ``RAY_AUTH_*``
variable and the ``ray get-auth-token`` command it tells operators to use exist in Ray's own source."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "scaling.md"


def _ray_source() -> str:
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("ray is not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    files = [root / "exceptions.py", root / "scripts" / "scripts.py", *(root / "_private" / "authentication").glob("*.py")]
    return "\n".join(f.read_text(encoding="utf-8") for f in files if f.exists())


def test_the_token_auth_section_names_only_what_ray_reads():
    doc = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"RAY_AUTH_[A-Z_]+", doc))
    assert {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"} <= named
    source = _ray_source()
    assert not [name for name in named if name not in source], named
    assert "get-auth-token" in doc and '@cli.command(name="get-auth-token")' in source
    assert "~/.ray/auth_token" in doc and '".ray" / "auth_token"' in source
    assert "RAY_AUTH_MODE=token" in doc and "ray.address" in doc
