"""What the trainer and the learner need of an algorithm: the :class:`Algorithm` protocol.

GRPO, PPO and SFT each provide every member explicitly (no member is optional, nothing is probed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import torch

from repogym.trainer.algorithms.common import Batch, Sample


@runtime_checkable
class Algorithm(Protocol):
    """One training algorithm: sampling settings for the rollouts, batch preparation, and a loss."""

    name: str
    """The registry name (``grpo``, ``ppo``, ``sft``)."""

    @property
    def group_size(self) -> int:
        """Episodes per task per step (1: no groups)."""

    @property
    def temperature(self) -> float:
        """Sampling temperature of the rollouts; the learner recomputes logprobs at it."""

    @property
    def loss_agg(self) -> str:
        """``token`` or ``sequence``: how the loss is aggregated (and so the batch's denominator)."""

    @property
    def epochs(self) -> int:
        """Optimiser steps per batch."""

    @property
    def needs_hidden(self) -> bool:
        """Whether ``loss`` wants the model's last hidden states (a value head)."""

    @property
    def needs_reference(self) -> bool:
        """Whether ``loss`` wants a frozen reference policy's logprobs (a KL penalty)."""

    def parameters(self) -> Iterable[torch.nn.Parameter]:
        """Trainable parameters of the algorithm's own (a value head), trained with the model's; may be empty."""

    def prepare(self, groups: list[list[Sample]]) -> list[Sample]:
        """The flat list to train on, from groups of samples (advantages set where the algorithm uses them)."""

    def loss(self, logits: torch.Tensor, batch: Batch, denominator: float, ref_logprobs: torch.Tensor | None = None,
             hidden: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """One micro-batch's loss, already divided by the whole batch's ``denominator``, and its metrics."""


__all__ = ["Algorithm"]
