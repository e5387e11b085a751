"""GRPO: group-relative policy optimisation (Shao et al. 2024), with DAPO's options.

For each task, G episodes are sampled; an episode's advantage is its reward minus the group's mean (or, with
``baseline: leave_one_out``, RLOO's mean of the other episodes), divided by the group's std when
``normalize_std``. Every generated token of the episode shares it.
With branching (:mod:`repogym.trainer.branching`), the rewards compared are those of the continuations of one
branch point (``meta["branch"]``), not the whole task group: they share the prefix, which the rollout already
masked out of every continuation, so each is credited for its own post-branch tokens only. A task's episodes that
did not branch are compared with each other, as plain GRPO.
The loss is PPO's clipped surrogate on the token ratio to the sampling policy, with an asymmetric clip
range (``clip_high`` > ``clip_low`` is DAPO's clip-higher), aggregated over tokens or sequences, plus an
optional KL penalty to a frozen reference (k3 estimator), off when ``kl_coef`` is 0. Off-policy tokens are safe:
the log-ratio is clamped and, with ``dual_clip``, a negative advantage's cost is bounded
(:func:`~repogym.trainer.algorithms.common.clipped_surrogate`). With ``tis_cap``, an old pass recomputes the
batch's logprobs with the learner before the update: the ratio is taken to those, and each token is weighted by
its truncated importance weight to the sampler (TIS, Yao et al. 2025).

``negative_scale`` < 1 scales the negative advantages down (an asymmetric, success-leaning estimator,
biased like a raised baseline): a tiny model that memorised its SFT data fails by writing the right text
in the wrong place, and pushing those tokens down at full weight erases the text where it belongs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch

from repogym.envs.core.errors import ConfigError
from repogym.trainer.algorithms.common import (
    Batch, Sample, aggregate, clipped_surrogate, masked_mean)


@dataclass
class GRPOConfig:
    """GRPO's knobs."""

    group_size: int = 8
    """Episodes per task per step (G)."""
    normalize_std: bool = True
    """Divide advantages by the group's reward std (Dr. GRPO turns this off)."""
    loss_agg: str = "token"
    """``token`` (DAPO: every token weighs the same), ``sequence`` (original GRPO) or ``constant`` (Dr. GRPO: token
    sums over sequences times ``agg_length``)."""
    agg_length: int = 1024
    """The constant length of ``constant`` aggregation (Dr. GRPO uses the generation budget)."""
    baseline: str = "mean"
    """``mean`` (the group's mean reward) or ``leave_one_out`` (RLOO: the mean of the other episodes)."""
    clip_low: float = 0.2
    clip_high: float = 0.28
    """Upper clip of the ratio at 1 + clip_high; above clip_low is clip-higher."""
    negative_scale: float = 1.0
    """Multiplier on negative advantages: 1 is plain GRPO, 0 learns from the successes only."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the reference policy; 0 turns it (and the reference model) off."""
    epochs: int = 1
    """Passes over each batch; more than 1 makes later passes off-policy (the clip then matters)."""
    dual_clip: float | None = 3.0
    """A token with a negative advantage costs at most this times |A| (dual clip, > 1); None turns it off."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (logprobs are recomputed at it)."""
    tis_cap: float | None = None
    """Truncated importance sampling (Yao et al. 2025; > 0, e.g. 2): the learner recomputes the batch's logprobs
    before the update, the ratio is taken to them, and each token's loss is weighted by min(pi_learner / pi_sampler,
    tis_cap), correcting for the inference engine's numerics. None turns it (and the old pass) off."""


def group_advantages(rewards: list[float], normalize_std: bool = True, eps: float = 1e-6,
                     negative_scale: float = 1.0, leave_one_out: bool = False) -> list[float]:
    """Each reward minus the group mean (``leave_one_out``: the mean of the others, RLOO), over the group std when
    ``normalize_std``; negatives times ``negative_scale``."""
    mean = statistics.fmean(rewards)
    centred = [r - mean for r in rewards]
    if leave_one_out and len(rewards) > 1:  # r - mean(others) = (r - mean) * G / (G - 1)
        centred = [c * len(rewards) / (len(rewards) - 1) for c in centred]
    if normalize_std:
        std = statistics.pstdev(rewards)
        centred = [c / (std + eps) for c in centred]
    return [c * negative_scale if c < 0 else c for c in centred]


def comparison_groups(group: list[Sample]) -> list[list[Sample]]:
    """The samples of a task's group whose rewards are compared: those of each branch point (``meta["branch"]``)
    together, and those of no branch point (absent or None: every sample when branching is off) together."""
    by_point: dict[Any, list[Sample]] = {}
    for sample in group:
        by_point.setdefault(sample.meta.get("branch"), []).append(sample)
    return list(by_point.values())


class GRPO:
    """Advantages per group, then the clipped token-level surrogate."""

    name = "grpo"
    config_type = GRPOConfig
    needs_hidden = False

    def __init__(self, config: GRPOConfig):
        if config.baseline not in ("mean", "leave_one_out"):
            raise ConfigError(f"baseline must be 'mean' or 'leave_one_out' (RLOO), got {config.baseline!r}")
        if config.loss_agg not in ("token", "sequence", "constant"):
            raise ConfigError(f"loss_agg must be 'token', 'sequence' or 'constant' (Dr. GRPO), got {config.loss_agg!r}")
        if config.dual_clip is not None and config.dual_clip <= 1:
            raise ConfigError(f"dual_clip must be > 1 (or null to turn it off), got {config.dual_clip}")
        if config.negative_scale < 0:
            raise ConfigError(f"negative_scale must be >= 0 (1 is plain GRPO), got {config.negative_scale}")
        if config.tis_cap is not None and config.tis_cap <= 0:
            raise ConfigError(f"tis_cap must be > 0 (or null to turn it off), got {config.tis_cap}")
        self.config = config

    @classmethod
    def from_options(cls, options: dict[str, Any], hidden_size: int | None = None) -> "GRPO":
        """GRPO with ``GRPOConfig(**options)`` (the registry's entry; ``hidden_size`` is not needed)."""
        return cls(GRPOConfig(**options))

    group_size = property(lambda self: self.config.group_size)
    temperature = property(lambda self: self.config.temperature)
    loss_agg = property(lambda self: self.config.loss_agg)
    agg_length = property(lambda self: self.config.agg_length)
    epochs = property(lambda self: self.config.epochs)
    needs_reference = property(lambda self: self.config.kl_coef > 0)
    needs_old_pass = property(lambda self: self.config.tis_cap is not None)

    def parameters(self) -> list[torch.nn.Parameter]:
        """None of its own: GRPO trains the policy only."""
        return []

    def prepare(self, groups: list[list[Sample]]) -> list[Sample]:
        """Set each sample's advantage from its comparison group (see :func:`comparison_groups`); the flat list
        to train on, in the order given.

        An episode split into several sequences (a context policy rebuilt its prompt: the samples share
        ``meta["episode"]``) counts once in the group's statistics, and every sequence of it gets its advantage.
        """
        out = []
        for group in groups:
            for peers in comparison_groups(group):
                rewards: dict[Any, float] = {}
                for sample in peers:
                    rewards.setdefault(sample.meta.get("episode", id(sample)), sample.reward)
                advantages = dict(zip(rewards, group_advantages(
                    list(rewards.values()), self.config.normalize_std, negative_scale=self.config.negative_scale,
                    leave_one_out=self.config.baseline == "leave_one_out")))
                for sample in peers:
                    sample.advantage = advantages[sample.meta.get("episode", id(sample))]
            out += group
        return out

    def old_pass(self, batch: Batch, logprobs: torch.Tensor, hidden: torch.Tensor | None) -> None:
        """With TIS, keep the learner's logprobs before the update (the ratio's denominator)."""
        if self.config.tis_cap is not None:
            batch.learner_logprobs = logprobs.detach()

    def finish_old_pass(self, batches: list[Batch]) -> dict[str, float]:
        """Nothing spans the micro-batches; the mismatch metrics come with the loss."""
        return {}

    def loss(self, logprobs: torch.Tensor, batch: Batch, denominator: float, ref_logprobs: torch.Tensor | None = None,
             hidden: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """The clipped surrogate (+ KL) of one micro-batch, already divided by the whole batch's denominator."""
        c = self.config
        logp, mask = logprobs, batch.loss_mask
        adv = batch.advantages[:, None].expand_as(logp)
        per_token, metrics = clipped_surrogate(logp, batch.old_logprobs, adv, mask, c.clip_low, c.clip_high,
                                               c.dual_clip, batch.learner_logprobs, c.tis_cap)
        metrics["losses/entropy_proxy"] = -masked_mean(logp.detach(), mask)
        if c.kl_coef > 0:
            if ref_logprobs is None:
                raise ValueError("kl_coef > 0 needs reference logprobs")
            delta = ref_logprobs - logp
            kl = torch.exp(delta) - delta - 1  # k3: unbiased, always >= 0
            per_token = per_token + c.kl_coef * kl
            metrics["losses/kl"] = masked_mean(kl.detach(), mask)
        loss = aggregate(per_token, mask, c.loss_agg, denominator)
        metrics["losses/policy_loss"] = float(loss.detach())
        return loss, metrics
