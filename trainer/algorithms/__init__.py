"""RL and SFT algorithms, one file each, in a lazy registry by name; each is an :class:`Algorithm`.

An algorithm is built once per run, from its name and options (:func:`make_algorithm`); the options are checked
against its config dataclass first (:func:`check_options`), so a typo is a :class:`ConfigError` naming the option,
a close match and the valid ones, while an error raised inside a constructor propagates with its traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.registry import Registry
from repogym.trainer.algorithms.base import Algorithm, AlgorithmClass

ALGORITHMS: Registry[AlgorithmClass] = Registry("algorithm", {
    "grpo": "repogym.trainer.algorithms.grpo:GRPO",
    "ppo": "repogym.trainer.algorithms.ppo:PPO",
    "sft": "repogym.trainer.algorithms.sft:SFT",
})
"""Name -> the algorithm's class (its ``config_type`` and ``from_options(options, hidden_size)``)."""


def check_options(name: str, options: dict[str, Any] | None = None) -> None:
    """Raise :class:`ConfigError` unless ``name`` is an algorithm and every option one of its config's fields (a miss
    names the closest field and lists the valid ones). Builds nothing."""
    fields = [f.name for f in dataclasses.fields(ALGORITHMS.resolve(name).config_type)]
    unknown = [key for key in (options or {}) if key not in fields]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"algorithm {name!r}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
                          f"valid options: {', '.join(sorted(fields))}")


def make_algorithm(name: str, options: dict[str, Any] | None = None, hidden_size: int | None = None) -> Algorithm:
    """An algorithm by name with its config built from ``options`` (checked first: :func:`check_options`); a miss
    lists the valid names."""
    check_options(name, options)
    return ALGORITHMS.resolve(name).from_options(dict(options or {}), hidden_size)


__all__ = ["ALGORITHMS", "Algorithm", "check_options", "make_algorithm"]
