"""What every algorithm shares: a training sample, batching with shifted loss masks, masked aggregation.

Positions: for a sequence of ids ``x``, the model's logits at position t predict ``x[t+1]``. Everything
per token here (loss mask, sampling logprobs, advantages) is aligned to the *predicted* token, so a
batch holds ``T-1`` target positions for ``T`` ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Sample:
    """One training sequence: ids, loss mask (1 on generated tokens), their sampling logprobs, the episode's reward."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    reward: float = 0.0
    advantage: float = 0.0
    """Sequence-level advantage (GRPO); PPO computes per-token advantages itself."""
    task_id: str = ""
    group: int = 0
    version: int = 0
    """Oldest policy version that generated any of its tokens."""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not (len(self.ids) == len(self.mask) == len(self.logprobs)):
            raise ValueError(f"sample lengths differ: ids {len(self.ids)}, mask {len(self.mask)}, "
                             f"logprobs {len(self.logprobs)}")


@dataclass
class Batch:
    """Padded tensors for a list of samples; per-token fields are aligned to target positions (``T-1``)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor
    """The sampler's (inference engine's) logprobs of the generated tokens."""
    advantages: torch.Tensor
    """Per sequence, shape [B]."""
    rewards: torch.Tensor
    episode_keys: list[tuple[int, int]] = field(default_factory=list)
    """Per row: ``(group, meta["episode"])`` (episode -1 when absent); the parts of one episode share it."""
    parts: list[tuple[int, int]] = field(default_factory=list)
    """Per row: ``(meta["part"], meta["parts"])``, this sample's place in its episode (``(0, 1)``: a whole episode)."""
    learner_logprobs: torch.Tensor | None = None
    """The learner's own logprobs [B, T-1] before this step's update (the old pass; TIS)."""
    old_values: torch.Tensor | None = None
    """PPO: the value head's values [B, T-1] in the old pass (before this step's update), reused by every epoch."""
    token_advantages: torch.Tensor | None = None
    """PPO: GAE advantages [B, T-1], computed once per step from ``old_values``."""
    returns: torch.Tensor | None = None

    @property
    def tokens(self) -> int:
        return int(self.loss_mask.sum())


def collate(samples: list[Sample], pad_id: int, device: str | torch.device = "cpu") -> Batch:
    """Right-padded batch of ``samples``; each row's episode identity comes from ``meta`` (``episode``, ``part``,
    ``parts``; absent keys mean a whole episode)."""
    width = max(len(s.ids) for s in samples)
    n = len(samples)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.float32)
    old = torch.zeros((n, width), dtype=torch.float32)
    for i, s in enumerate(samples):
        k = len(s.ids)
        ids[i, :k] = torch.tensor(s.ids)
        attn[i, :k] = 1
        mask[i, :k] = torch.tensor(s.mask, dtype=torch.float32)
        old[i, :k] = torch.tensor(s.logprobs, dtype=torch.float32)
    parts = [(int(s.meta.get("part", 0)), int(s.meta.get("parts", 1))) for s in samples]
    for part, count in parts:
        if not 0 <= part < count:
            raise ValueError(f"sample meta: expected 0 <= part < parts, got part {part} of {count}")
    return Batch(ids.to(device), attn.to(device), mask[:, 1:].to(device), old[:, 1:].to(device),
                 torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),
                 torch.tensor([s.reward for s in samples], dtype=torch.float32, device=device),
                 episode_keys=[(s.group, int(s.meta.get("episode", -1))) for s in samples], parts=parts)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Logprob of each next token, [B, T-1], under ``logits / temperature`` (as the sampler drew them)."""
    logits = logits[:, :-1].float()
    if temperature not in (0, 1):
        logits = logits / temperature
    return torch.log_softmax(logits, -1).gather(-1, input_ids[:, 1:, None])[..., 0]


def normalizer(batch_masks: list[torch.Tensor], mode: str, constant: int | None = None) -> float:
    """The denominator of a whole (accumulated) batch: its token count (``token``), sequence count (``sequence``),
    or sequence count times a constant length (``constant``: Dr. GRPO; no bias toward short or long answers)."""
    if mode == "token":
        return max(float(sum(m.sum() for m in batch_masks)), 1.0)
    if mode == "sequence":
        return float(sum(m.shape[0] for m in batch_masks))
    if mode == "constant":
        if not constant or constant < 1:
            raise ValueError(f"loss aggregation 'constant' needs a positive length, got {constant!r}")
        return float(sum(m.shape[0] for m in batch_masks) * constant)
    raise ValueError(f"loss aggregation must be 'token', 'sequence' or 'constant', got {mode!r}")


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str, denominator: float) -> torch.Tensor:
    """Masked sum of per-token ``values`` divided by the whole batch's ``denominator``.

    ``token``: every generated token in the batch weighs the same. ``sequence``: each sequence's tokens
    are averaged first, so each sequence weighs the same. ``constant``: token sums over a fixed denominator. Dividing by the full batch's denominator
    (not the micro-batch's) makes gradient accumulation exact.
    """
    if mode in ("token", "constant"):
        return (values * mask).sum() / denominator
    per_seq = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_seq.sum() / denominator


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Plain masked mean, for metrics."""
    return float((values * mask).sum() / mask.sum().clamp(min=1.0))


LOG_RATIO_CLAMP = 20.0
"""|log(pi / pi_old)| above this is clamped before the ratio is taken: e^20 is already far past any clip."""


def clipped_surrogate(logp: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                      clip_low: float, clip_high: float, dual_clip: float | None,
                      learner_old: torch.Tensor | None = None, tis_cap: float | None = None
                      ) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate per token (to minimise), safe off-policy, and its metrics.

    ``old_logprobs`` are the sampler's. With ``learner_old`` (the learner's own logprobs before this step's
    update) the ratio is pi / pi_learner_old instead, and with ``tis_cap`` each token's surrogate is also weighted
    by the detached min(pi_learner_old / pi_sampler, tis_cap): truncated importance sampling (Yao et al. 2025),
    which corrects for the inference engine's numerics differing from the learner's.

    The log-ratio is clamped to +-:data:`LOG_RATIO_CLAMP` (a token the sampler drew at p = e^-30 gives no
    overflow), and with ``dual_clip`` (Ye et al. 2020; > 1) a token with a negative advantage costs at most
    ``dual_clip * |A|`` however large its ratio. The metrics include how far the learner's logprobs are from the
    sampler's (``losses/sampler_k3``: mean k3 estimate of KL(sampler || learner); ``losses/sampler_gap_max``:
    the largest absolute logprob gap), measured against ``learner_old`` when given (the true mismatch), else
    against ``logp`` (on the first pass over a batch both should be near 0).
    """
    if tis_cap is not None and learner_old is None:
        raise ValueError("tis_cap needs the learner's old logprobs (batch.learner_logprobs, set by old_pass), got None")
    old = old_logprobs if learner_old is None else learner_old
    log_ratio = torch.clamp(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        surrogate = torch.where(advantages < 0, torch.maximum(surrogate, dual_clip * advantages), surrogate)
    metrics = {}
    if tis_cap is not None:
        log_weight = (learner_old - old_logprobs).detach()
        weight = torch.exp(torch.clamp(log_weight, max=math.log(tis_cap)))  # min(ratio, cap) without overflow
        surrogate = surrogate * weight
        metrics = {"losses/tis_weight_mean": masked_mean(weight, mask),
                   "losses/tis_clipped_fraction": masked_mean((log_weight > math.log(tis_cap)).float(), mask)}
    with torch.no_grad():
        gap = old_logprobs - (logp.detach() if learner_old is None else learner_old)  # the sampler's mismatch
        k3 = torch.exp(torch.clamp(gap, max=LOG_RATIO_CLAMP)) - gap - 1
        on = mask > 0
        metrics |= {"losses/clip_fraction": masked_mean((unclipped != clipped).float(), mask),
                    "losses/ratio_mean": masked_mean(ratio.detach(), mask),
                    "losses/sampler_k3": masked_mean(k3, mask),
                    "losses/sampler_gap_max": float(gap.abs()[on].max()) if bool(on.any()) else 0.0}
    return -surrogate, metrics
