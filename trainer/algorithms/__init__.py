"""RL and SFT algorithms, one file each, by name."""

from __future__ import annotations

from repogym.envs.errors import ConfigError

ALGORITHMS = ("grpo", "ppo", "sft")


def make_algorithm(name: str, options: dict | None = None, hidden_size: int | None = None):
    """An algorithm by name with its config built from ``options``; a miss lists the valid names."""
    options = dict(options or {})
    try:
        if name == "grpo":
            from repogym.trainer.algorithms.grpo import GRPO, GRPOConfig
            return GRPO(GRPOConfig(**options))
        if name == "ppo":
            from repogym.trainer.algorithms.ppo import PPO, PPOConfig
            return PPO(PPOConfig(**options), hidden_size)
        if name == "sft":
            from repogym.trainer.algorithms.sft import SFT, SFTConfig
            return SFT(SFTConfig(**options))
    except TypeError as exc:
        raise ConfigError(f"algorithm {name!r}: {exc}") from None
    raise ConfigError(f"unknown algorithm {name!r}: expected one of {list(ALGORITHMS)}")
