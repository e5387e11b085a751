"""RL and SFT algorithms, one file each, in a lazy registry by name; each is an :class:`Algorithm`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.registry import Registry
from repogym.trainer.algorithms.base import Algorithm

ALGORITHMS: Registry[Callable[[dict[str, Any], int | None], Algorithm]] = Registry("algorithm", {
    "grpo": "repogym.trainer.algorithms.grpo:GRPO.from_options",
    "ppo": "repogym.trainer.algorithms.ppo:PPO.from_options",
    "sft": "repogym.trainer.algorithms.sft:SFT.from_options",
})
"""Name -> ``from_options(options, hidden_size)`` of the algorithm's class."""


def make_algorithm(name: str, options: dict | None = None, hidden_size: int | None = None) -> Algorithm:
    """An algorithm by name with its config built from ``options``; a miss lists the valid names."""
    build = ALGORITHMS.resolve(name)
    try:
        return build(dict(options or {}), hidden_size)
    except TypeError as exc:  # an unknown option
        raise ConfigError(f"algorithm {name!r}: {exc}") from None


__all__ = ["ALGORITHMS", "Algorithm", "make_algorithm"]
