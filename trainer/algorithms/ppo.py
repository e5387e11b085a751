"""PPO-clip (Schulman et al. 2017) for token sequences, with a learned value head and GAE.

Only generated tokens are actions: the value head is read at generated positions, the episode's reward
arrives at the last generated token, and GAE runs over the generated positions in order, skipping the
prompt and tool-output tokens between turns (the environment's text is not the policy's action). The
policy loss is the clipped surrogate with the same token-level masking and aggregation as GRPO.

Values and advantages come from the old pass, before the step's update: ``old_pass`` reads the value head on each
micro-batch, then ``finish_old_pass`` runs GAE once over all of them; every epoch reuses those advantages and
clips the value loss against those values. An episode split into several samples (a context policy rebuilt the
prompt: ``meta`` ``episode``, ``part``, ``parts``) gets the advantages it would get as one sequence: its parts'
generated positions are joined in part order, wherever the parts sit in the batch, so a non-final part gets no
reward and bootstraps from the next part. A part that is missing (masked out of training) is skipped: the present
parts are joined as if they were the whole episode, and the last present one gets the reward.
With ``tis_cap``, the ratio is to the learner's recomputed logprobs, weighted by TIS as in GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from repogym.envs.core.errors import ConfigError
from repogym.trainer.algorithms.common import (
    Batch, Sample, aggregate, clipped_surrogate, masked_mean)


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
    tis_cap: float | None = None
    """Truncated importance sampling (Yao et al. 2025; > 0, e.g. 2): the ratio is taken to the learner's logprobs
    recomputed before the update, and each token's policy loss is weighted by min(pi_learner / pi_sampler, tis_cap),
    correcting for the inference engine's numerics. None turns it off."""


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


def episode_gae(batches: list[Batch], gamma: float, lam: float) -> None:
    """Set each batch's ``token_advantages`` and ``returns`` from its ``old_values`` by :func:`gae` per episode.

    The generated positions of an episode's parts (``batch.episode_keys``, ``batch.parts``; in any micro-batch, in
    any order) are joined in part order into one row, so each part bootstraps from the next exactly as if the
    episode were one sequence, and only the last part gets the reward. A missing part is skipped (the last present
    part gets the reward); a part given twice is an error."""
    if any(b.old_values is None for b in batches):
        raise ValueError("PPO: a micro-batch has no old_values (old_pass was not called on it)")
    # Rows numbered across batches; an episode is its rows in part order (a whole one links to nothing).
    first_row = [0]
    for b in batches:
        first_row.append(first_row[-1] + len(b.parts))
    episodes, split = [], {}
    for b, batch in enumerate(batches):
        for i, (key, (part, parts)) in enumerate(zip(batch.episode_keys, batch.parts)):
            row = first_row[b] + i
            if parts > 1:
                split.setdefault(key, []).append((part, row))
            else:
                episodes.append([row])
    for key, rows in split.items():
        if len({part for part, _ in rows}) < len(rows):
            raise ValueError(f"PPO: episode {key} has a part twice, got parts {sorted(part for part, _ in rows)}")
        episodes.append([row for _, row in sorted(rows)])
    # Each row's place in its episode's joined row: (episode, offset of its first generated position).
    lengths = [n for b in batches for n in b.loss_mask.gt(0).sum(-1).tolist()]
    episode_of, offset_of, width = [0] * len(lengths), [0] * len(lengths), 1
    for e, rows in enumerate(episodes):
        offset = 0
        for row in rows:
            episode_of[row], offset_of[row] = e, offset
            offset += lengths[row]
        width = max(width, offset)
    device = batches[0].old_values.device
    rewards = torch.cat([b.rewards for b in batches])[torch.tensor([rows[-1] for rows in episodes], device=device)]
    values = torch.zeros(len(episodes), width, device=device)
    joined_mask = torch.zeros_like(values)
    places = []
    for b, batch in enumerate(batches):
        rows = slice(first_row[b], first_row[b + 1])
        on = batch.loss_mask > 0
        episode = torch.tensor(episode_of[rows], device=device)[:, None].expand_as(on)
        position = torch.tensor(offset_of[rows], device=device)[:, None] + on.long().cumsum(-1) - 1
        place = (episode[on], position[on])
        values[place], joined_mask[place] = batch.old_values[on].float(), 1.0
        places.append((on, place))
    adv, ret = gae(values, joined_mask, rewards, gamma, lam)
    for batch, (on, place) in zip(batches, places):
        batch.token_advantages, batch.returns = torch.zeros_like(batch.old_values), torch.zeros_like(batch.old_values)
        batch.token_advantages[on], batch.returns[on] = adv[place], ret[place]


class PPO:
    """Value head + GAE advantages + clipped surrogate."""

    name = "ppo"
    config_type = PPOConfig
    needs_hidden = True

    def __init__(self, config: PPOConfig, hidden_size: int):
        if config.tis_cap is not None and config.tis_cap <= 0:
            raise ConfigError(f"tis_cap must be > 0 (or null to turn it off), got {config.tis_cap}")
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
    agg_length = None
    """No ``constant`` aggregation."""
    epochs = property(lambda self: self.config.epochs)
    needs_reference = property(lambda self: self.config.kl_coef > 0)
    needs_old_pass = True
    """Always: the values and advantages are those from before the step's update."""

    def parameters(self):
        """Extra trainable parameters (the value head) for the learner's optimiser."""
        return self.value_head.parameters()

    def prepare(self, groups: list[list[Sample]]) -> list[Sample]:
        return [s for g in groups for s in g]

    def old_pass(self, batch: Batch, logprobs: torch.Tensor, hidden: torch.Tensor | None) -> None:
        """Record the values before the update (and, with TIS, the learner's logprobs)."""
        self.value_head.to(hidden.device)
        batch.old_values = self.value_head(hidden[:, :-1].float())[..., 0].detach()  # the state before each target
        if self.config.tis_cap is not None:
            batch.learner_logprobs = logprobs.detach()

    def finish_old_pass(self, batches: list[Batch]) -> dict[str, float]:
        """GAE over every episode at once (:func:`episode_gae`); the values' explained variance of the returns."""
        episode_gae(batches, self.config.gamma, self.config.lam)
        on = torch.cat([b.loss_mask.flatten() for b in batches]) > 0
        values = torch.cat([b.old_values.flatten() for b in batches])[on]
        returns = torch.cat([b.returns.flatten() for b in batches])[on]
        variance = float(returns.var()) if returns.numel() > 1 else 0.0
        return {"losses/explained_variance": 1 - float((returns - values).var()) / variance if variance > 0 else 0.0}

    def loss(self, logprobs: torch.Tensor, batch: Batch, denominator: float, ref_logprobs: torch.Tensor | None = None,
             hidden: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Clipped surrogate + clipped value loss (+ KL) of one micro-batch, over the whole batch's denominator."""
        c = self.config
        if batch.token_advantages is None or batch.old_values is None:
            raise ValueError("PPO.loss needs the old pass first (old_pass on every micro-batch, then finish_old_pass): "
                             "the batch has no old_values / token_advantages")
        logp, mask = logprobs, batch.loss_mask
        self.value_head.to(hidden.device)
        values = self.value_head(hidden[:, :-1].float())[..., 0]  # the value of the state before each target
        adv, returns, old_values = batch.token_advantages, batch.returns, batch.old_values
        policy, surrogate_metrics = clipped_surrogate(logp, batch.old_logprobs, adv, mask, c.clip, c.clip, c.dual_clip,
                                                      batch.learner_logprobs, c.tis_cap)
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
