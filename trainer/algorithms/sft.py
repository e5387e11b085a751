"""SFT: next-token cross-entropy on the generated (mask 1) tokens of trajectories.

Used as a warm start from the oracle's or any agent's successful trajectories, tokenised exactly as the
hf agent would have produced them (``repogym.agents.hf.ChatFormat``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from repogym.trainer.algorithms.common import Batch, Sample, aggregate, masked_mean, token_logprobs


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

    def __init__(self, config: SFTConfig):
        self.config = config

    def prepare(self, groups: list[list[Sample]]) -> list[Sample]:
        return [s for g in groups for s in g]

    def loss(self, logits: torch.Tensor, batch: Batch, denominator: float, ref_logprobs=None
             ) -> tuple[torch.Tensor, dict[str, float]]:
        logp = token_logprobs(logits, batch.input_ids)
        loss = aggregate(-logp, batch.loss_mask, self.config.loss_agg, denominator)
        return loss, {"losses/sft_loss": float(loss.detach()),
                      "losses/token_accuracy": masked_mean((logp.detach() > -0.6931).float(), batch.loss_mask)}
