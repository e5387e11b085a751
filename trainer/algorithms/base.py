"""What the trainer and the learner need of an algorithm: the :class:`Algorithm` protocol.

GRPO, PPO and SFT each provide every member explicitly (no member is optional, nothing is probed).

A learner step, in order: when ``needs_old_pass``, under ``torch.no_grad`` and before any update of the step,
``old_pass`` on every micro-batch then ``finish_old_pass`` on all of them; then, for each of ``epochs``, ``loss``
on every micro-batch and one optimiser step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

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
    def agg_length(self) -> int | None:
        """The constant length of ``constant`` aggregation (Dr. GRPO); None where the algorithm has no such mode."""

    @property
    def epochs(self) -> int:
        """Optimiser steps per batch."""

    @property
    def needs_hidden(self) -> bool:
        """Whether ``loss`` wants the model's last hidden states (a value head)."""

    @property
    def needs_reference(self) -> bool:
        """Whether ``loss`` wants a frozen reference policy's logprobs (a KL penalty)."""

    @property
    def needs_old_pass(self) -> bool:
        """Whether the learner runs the old pass (``old_pass``, ``finish_old_pass``) before each step's update."""

    def parameters(self) -> Iterable[torch.nn.Parameter]:
        """Trainable parameters of the algorithm's own (a value head), trained with the model's; may be empty."""

    def prepare(self, groups: list[list[Sample]]) -> list[Sample]:
        """The flat list to train on, from groups of samples (advantages set where the algorithm uses them)."""

    def old_pass(self, batch: Batch, logprobs: torch.Tensor, hidden: torch.Tensor | None) -> None:
        """Record on ``batch`` what the step needs from before its update, from the learner's ``logprobs`` [B, T-1]
        and, when ``needs_hidden``, its last hidden states [B, T, H]. Called once per micro-batch, under no_grad."""

    def finish_old_pass(self, batches: list[Batch]) -> dict[str, float]:
        """Once every micro-batch has had ``old_pass``: whatever spans them all (PPO's GAE); the old pass's metrics."""

    def loss(self, logprobs: torch.Tensor, batch: Batch, denominator: float, ref_logprobs: torch.Tensor | None = None,
             hidden: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """One micro-batch's loss, already divided by the whole batch's ``denominator``, and its metrics.

        ``logprobs`` [B, T-1] are the learner's logprobs of each target token at ``temperature``, with grad (the
        learner computes them in chunks, never full fp32 logits); ``ref_logprobs`` the reference's, when
        ``needs_reference``; ``hidden`` the last hidden states [B, T, H], when ``needs_hidden``."""


class AlgorithmClass(Protocol):
    """An algorithm's class as the registry holds it: the dataclass of its options, and how it is built."""

    config_type: type
    """The dataclass whose fields are the algorithm's options (``algorithm.options``)."""

    def from_options(self, options: dict[str, Any], hidden_size: int | None = None) -> Algorithm:
        """The algorithm with ``config_type(**options)``; ``hidden_size`` is the model's (PPO's value head)."""


__all__ = ["Algorithm", "AlgorithmClass"]
