"""PPO-clip (Schulman et al. 2017) for token sequences, with a learned value head and GAE.

Only generated tokens are actions: the value head is read at generated positions, the episode's reward
arrives at the last generated token, and GAE runs over the generated positions in order, skipping the
prompt and tool-output tokens between turns (the environment's text is not the policy's action). The
policy loss is the clipped surrogate with the same token-level masking and aggregation as GRPO. GAE is computed
once per batch (vectorised over rows) from the values of the step's first pass, which are the values at rollout
time; later epochs clip the value loss against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from repogym.envs.errors import ConfigError
from repogym.trainer.algorithms.common import (
    Batch, Sample, aggregate, clipped_surrogate, masked_mean, token_logprobs)


@dataclass
class PPOConfig:
    """PPO's knobs."""

    clip: float = 0.2
    dual_clip: float | None = 3.0
    """A token with a negative advantage costs at most this times |A| (dual clip, > 1); None turns it off."""
    value_clip: float = 0.2
    value_coef: float = 0.5
    gamma: float = 1.0
    lam: float = 0.95
    loss_agg: str = "token"
    epochs: int = 1
    group_size: int = 1
    """Episodes per task per step (PPO needs no groups; more than 1 is allowed)."""
    kl_coef: float = 0.0
    temperature: float = 1.0


def gae(values: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor, gamma: float, lam: float
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token advantages and returns [B, T] over masked positions; reward at each row's last one.

    Positions outside the mask (prompt, tool output) are skipped: each masked position's next state is the next
    masked position of its row. One backward scan over T, vectorised over the rows."""
    mask = (mask > 0).to(values.dtype)
    batch, length = values.shape
    adv = torch.zeros_like(values)
    running = torch.zeros(batch, dtype=values.dtype, device=values.device)
    next_value = torch.zeros_like(running)
    seen = torch.zeros_like(running)  # 1 once a row's last masked position has been passed
    for t in range(length - 1, -1, -1):
        on = mask[:, t]
        reward = rewards.to(values.dtype) * (1 - seen)  # the reward sits at the row's last masked position
        delta = reward + gamma * next_value - values[:, t]
        step = delta + gamma * lam * running
        adv[:, t] = step * on
        running = torch.where(on > 0, step, running)
        next_value = torch.where(on > 0, values[:, t], next_value)
        seen = torch.maximum(seen, on)
    return adv, adv + values * mask


class PPO:
    """Value head + GAE advantages + clipped surrogate."""

    name = "ppo"
    needs_hidden = True

    def __init__(self, config: PPOConfig, hidden_size: int):
        self.config = config
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_options(cls, options: dict[str, Any], hidden_size: int | None = None) -> "PPO":
        """PPO with ``PPOConfig(**options)`` and a value head over the model's ``hidden_size``."""
        config = PPOConfig(**options)
        if hidden_size is None:
            raise ConfigError("algorithm 'ppo' needs the model's hidden_size for its value head, got None")
        return cls(config, hidden_size)

    group_size = property(lambda self: self.config.group_size)
    temperature = property(lambda self: self.config.temperature)
    loss_agg = property(lambda self: self.config.loss_agg)
    epochs = property(lambda self: self.config.epochs)
    needs_reference = property(lambda self: self.config.kl_coef > 0)

    def parameters(self):
        """Extra trainable parameters (the value head) for the learner's optimiser."""
        return self.value_head.parameters()

    def prepare(self, groups: list[list[Sample]]) -> list[Sample]:
        return [s for g in groups for s in g]

    def loss(self, logits: torch.Tensor, batch: Batch, denominator: float, ref_logprobs: torch.Tensor | None = None,
             hidden: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        c = self.config
        mask = batch.loss_mask
        logp = token_logprobs(logits, batch.input_ids, c.temperature)
        self.value_head.to(hidden.device)
        values = self.value_head(hidden[:, :-1].float())[..., 0]  # the value of the state before each target
        if batch.old_values is None:
            # The first pass over this batch: no update has happened yet this step, so these are the values at
            # rollout time. Later epochs clip against them and reuse the advantages (GAE once per batch).
            with torch.no_grad():
                batch.old_values = values.detach()
                batch.token_advantages, batch.returns = gae(batch.old_values, mask, batch.rewards, c.gamma, c.lam)
        adv, returns, old_values = batch.token_advantages, batch.returns, batch.old_values
        policy, surrogate_metrics = clipped_surrogate(logp, batch.old_logprobs, adv, mask, c.clip, c.clip, c.dual_clip)
        v_clipped = old_values + torch.clamp(values - old_values, -c.value_clip, c.value_clip)
        value_loss = 0.5 * torch.maximum((values - returns) ** 2, (v_clipped - returns) ** 2)
        per_token = policy + c.value_coef * value_loss
        metrics = {**surrogate_metrics, "losses/value_loss": masked_mean(value_loss.detach(), mask),
                   "losses/advantage_mean": masked_mean(adv, mask)}
        if c.kl_coef > 0 and ref_logprobs is not None:
            delta = ref_logprobs - logp
            kl = torch.exp(delta) - delta - 1
            per_token = per_token + c.kl_coef * kl
            metrics["losses/kl"] = masked_mean(kl.detach(), mask)
        loss = aggregate(per_token, mask, c.loss_agg, denominator)
        metrics["losses/policy_loss"] = float(aggregate(policy.detach(), mask, c.loss_agg, denominator))
        return loss, metrics
