"""The null agent: submits the untouched repository. Proves the empty patch earns nothing."""

from __future__ import annotations

import json
from typing import Any


class NullAgent:
    """Submits at once."""

    def __init__(self, **_: Any):
        pass

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return json.dumps({"name": "submit", "arguments": {}})

    def turn_record(self) -> None:
        """Nothing to record of a turn (no model, no tokens)."""
        return None
