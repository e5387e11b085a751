"""SFT: next-token cross-entropy on the generated (mask 1) tokens of trajectories.

Used as a warm start from the oracle's or any agent's successful trajectories, tokenised exactly as the
hf agent would have produced them (``repogym.agents.hf.ChatFormat``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from repogym.trainer.algorithms.common import Batch, Sample, aggregate, masked_mean


@dataclass
class SFTConfig:
    """SFT's knobs."""

    loss_agg: str = "token"
    steps: int = 100
    """Optimiser steps of the warm start."""
    batch_size: int = 8
    """Sequences per step."""
    agent: str = "oracle"
    """Whose successful trajectories to learn from (collected on the training tasks)."""
    agent_options: dict | None = None
    """Options of that agent (e.g. ``{"style": "edit"}`` for the oracle)."""
    trajectories: str | None = None
    """Instead of collecting: a glob of trajectory files to learn from (only resolved episodes are used)."""
    episodes_per_task: int = 1


class SFT:
    """Cross-entropy on mask-1 tokens."""

    name = "sft"
    config_type = SFTConfig
    group_size = 1
    """No groups: every sequence is learnt on its own."""
    temperature = 1.0
    """Cross-entropy on the plain distribution (the data was not sampled from the policy)."""
    epochs = 1
    needs_hidden = False
    needs_reference = False
    needs_old_pass = False
    """Nothing is needed from before the update."""

    def __init__(self, config: SFTConfig):
        self.config = config

    @classmethod
    def from_options(cls, options: dict[str, Any], hidden_size: int | None = None) -> "SFT":
        """SFT with ``SFTConfig(**options)`` (the registry's entry; ``hidden_size`` is not needed)."""
        return cls(SFTConfig(**options))

    loss_agg = property(lambda self: self.config.loss_agg)
    agg_length = None
    """No ``constant`` aggregation."""

    def parameters(self) -> list[torch.nn.Parameter]:
        """None of its own: SFT trains the policy only."""
        return []

    def prepare(self, groups: list[list[Sample]]) -> list[Sample]:
        return [s for g in groups for s in g]

    def old_pass(self, batch: Batch, logprobs: torch.Tensor, hidden: torch.Tensor | None) -> None:
        """Nothing to record (``needs_old_pass`` is False)."""

    def finish_old_pass(self, batches: list[Batch]) -> dict[str, float]:
        """No old-pass metrics."""
        return {}

    def loss(self, logprobs: torch.Tensor, batch: Batch, denominator: float, ref_logprobs: torch.Tensor | None = None,
             hidden: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean negative log-likelihood of the generated tokens, over the whole batch's denominator."""
        loss = aggregate(-logprobs, batch.loss_mask, self.config.loss_agg, denominator)
        return loss, {"losses/sft_loss": float(loss.detach()),
                      "losses/token_accuracy": masked_mean((logprobs.detach() > -0.6931).float(), batch.loss_mask)}
