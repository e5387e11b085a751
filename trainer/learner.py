"""The learner: a torch causal LM, its optimiser, and one update step of any algorithm.

GPU when present (bf16 weights, gradient checkpointing and LoRA as options), CPU otherwise. A step
splits the batch into micro-batches, divides every micro-batch's loss by the *whole* batch's token (or
sequence) count so accumulation equals one big batch, clips the gradient norm, and steps AdamW.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from repogym.trainer.algorithms.base import Algorithm
from repogym.trainer.algorithms.common import Sample, collate, normalizer, token_logprobs


@dataclass
class LoraConfig:
    """LoRA adapters (peft) instead of full fine-tuning."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class LearnerConfig:
    """Optimiser and device settings of the learner."""

    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = 1.0
    micro_batch_size: int = 4
    """Sequences per forward/backward; the batch is accumulated over micro-batches."""
    max_tokens_per_micro_batch: int | None = None
    """Token budget of a micro-batch (rows x longest row, padding included); when set, sequences are bucketed
    by length (longest first) into micro-batches under it instead of ``micro_batch_size`` at a time. A
    sequence longer than the budget gets a micro-batch of its own."""
    device: str | None = None
    """``cuda``, ``cpu`` or None (cuda when available)."""
    bf16: bool | None = None
    """Train in bfloat16 (None: on GPU only)."""
    gradient_checkpointing: bool = False
    lora: LoraConfig | None = None
    seed: int = 0


class Learner:
    """Owns the trainable model and its optimiser (and, for KL, a frozen reference copy)."""

    def __init__(self, model, config: LearnerConfig, pad_id: int, extra_parameters=(), reference: bool = False):
        self.config = config
        self.device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        bf16 = config.bf16 if config.bf16 is not None else self.device.type == "cuda"
        torch.manual_seed(config.seed)
        model = model.to(self.device, dtype=torch.bfloat16 if bf16 else torch.float32)
        if config.gradient_checkpointing:
            # transformers renamed it; the old name warns.
            (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
            model.config.use_cache = False
        if config.lora is not None:
            from peft import LoraConfig as PeftLora, get_peft_model

            lc = config.lora
            model = get_peft_model(model, PeftLora(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                                                   target_modules=lc.target_modules, task_type="CAUSAL_LM"))
        self.model = model.train()
        self.reference = None
        if reference:
            self.refresh_reference()
        self.extra = [p for p in extra_parameters]
        for p in self.extra:
            p.data = p.data.to(self.device)
        self.reset_optimizer()
        self.pad_id = pad_id
        self.steps = 0

    def refresh_reference(self) -> None:
        """The KL reference becomes a frozen copy of the model as it is now (after a warm start, the SFT policy)."""
        self.reference = copy.deepcopy(self.model).eval()
        for p in self.reference.parameters():
            p.requires_grad_(False)

    def reset_optimizer(self) -> None:
        """A fresh AdamW (no moments): for a new phase whose gradients differ in scale (SFT -> RL)."""
        params = [p for p in self.model.parameters() if p.requires_grad] + self.extra
        self.optimizer = torch.optim.AdamW(params, lr=self.config.lr, weight_decay=self.config.weight_decay,
                                           betas=tuple(self.config.betas))

    def train_step(self, samples: list[Sample], algorithm: Algorithm) -> dict[str, float]:
        """One optimiser step per epoch (``algorithm.epochs``) over ``samples`` with its loss; averaged metrics."""
        if not samples:
            raise ValueError("train_step got no samples")
        epochs = algorithm.epochs
        chunks = micro_batches(samples, self.config.micro_batch_size, self.config.max_tokens_per_micro_batch)
        batches = [collate(c, self.pad_id, self.device) for c in chunks]
        denominator = normalizer([b.loss_mask for b in batches], algorithm.loss_agg, getattr(algorithm, "agg_length", None))
        needs_hidden = algorithm.needs_hidden
        totals: dict[str, float] = {}
        for _ in range(epochs):
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for batch in batches:
                out = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                 output_hidden_states=needs_hidden, use_cache=False)
                ref = None
                if self.reference is not None:
                    with torch.no_grad():
                        ref_logits = self.reference(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                                    use_cache=False).logits
                        ref = token_logprobs(ref_logits, batch.input_ids, algorithm.temperature)
                loss, metrics = algorithm.loss(out.logits, batch, denominator, ref,
                                               hidden=out.hidden_states[-1] if needs_hidden else None)
                loss.backward()
                loss_sum += float(loss.detach())
                for k, v in metrics.items():
                    totals[k] = totals.get(k, 0.0) + v / (len(batches) * epochs)
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            norm = torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
            self.optimizer.step()
            totals["losses/loss"] = loss_sum
            totals["losses/grad_norm"] = float(norm)
        self.steps += 1
        totals["losses/tokens"] = float(sum(b.tokens for b in batches))
        return totals

    def policy_state(self) -> dict[str, torch.Tensor]:
        """The full policy weights on CPU (LoRA merged in) for the inference engines."""
        model = self.model
        if self.config.lora is not None:
            model = copy.deepcopy(model).merge_and_unload()
        return {k: v.detach().to("cpu", dtype=torch.float32).clone() for k, v in model.state_dict().items()}

    def export(self, out_dir, tokenizer=None) -> None:
        """Save the policy as a model folder ``from_pretrained`` loads (LoRA merged in), with its tokenizer."""
        model = self.model
        if self.config.lora is not None:
            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(out_dir)
        if tokenizer is not None:
            tokenizer.save_pretrained(out_dir)

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs: weights, optimiser, extra parameters, step count."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "extra": [p.detach().cpu() for p in self.extra], "steps": self.steps,
                "reference": self.reference.state_dict() if self.reference is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for p, saved in zip(self.extra, state["extra"]):
            p.data.copy_(saved.to(p.device))
        if self.reference is not None and state.get("reference") is not None:
            self.reference.load_state_dict(state["reference"])
        self.steps = state["steps"]


def micro_batches(samples: list[Sample], size: int, max_tokens: int | None = None) -> list[list[Sample]]:
    """``samples`` in micro-batches: ``size`` at a time, or, with ``max_tokens``, bucketed by length (longest
    first) so each padded micro-batch holds at most ``max_tokens`` tokens."""
    if not max_tokens:
        size = max(1, size)
        return [samples[i:i + size] for i in range(0, len(samples), size)]
    chunks: list[list[Sample]] = []
    for sample in sorted(samples, key=lambda s: len(s.ids), reverse=True):
        # Longest first: a chunk's first sample is its longest, so its padded size is rows x that length.
        if chunks and (len(chunks[-1]) + 1) * len(chunks[-1][0].ids) <= max_tokens:
            chunks[-1].append(sample)
        else:
            chunks.append([sample])
    return chunks
