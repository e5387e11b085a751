"""The learner: a torch causal LM, its optimiser, and one update step of any algorithm.

Weights are fp32 always (the master copy AdamW steps: at lr 1e-6 a bf16 weight would not move); ``bf16``
is the compute precision (autocast on one process, FSDP2's mixed-precision policy over several). Log-probs
come from :class:`~repogym.trainer.logprobs.PolicyLogprobs` in chunks, never full-size fp32 logits.

One process, or one rank of many: when a default process group exists (even of one rank, as on one GPU), the
model is sharded with FSDP2 (:mod:`repogym.trainer.sharding`) and each rank trains on every ``world``-th
micro-batch.
A step splits the batch into micro-batches, divides every micro-batch's loss by the *whole* batch's token
(or sequence) count so accumulation (and the sum over ranks) equals one big batch, clips the gradient norm,
and steps AdamW.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist

from repogym.envs.core.errors import ConfigError
from repogym.trainer import sharding
from repogym.trainer.algorithms.base import Algorithm
from repogym.trainer.algorithms.common import Batch, Sample, collate, normalizer
from repogym.trainer.logprobs import PolicyLogprobs

OLD_PASS_FIELDS = ("learner_logprobs", "old_values")
"""Per-token tensors [B, T-1] an algorithm's ``old_pass`` may set on a batch; ranks share them."""


@dataclass
class LoraConfig:
    """LoRA adapters (peft) instead of full fine-tuning."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class LearnerConfig:
    """Optimiser, precision and placement settings of the learner."""

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
    """Compute in bfloat16 (None: on GPU only). Weights and optimiser state stay fp32 either way."""
    gradient_checkpointing: bool = False
    logprob_chunk: int = 4096
    """Positions per chunk of the output head when computing log-probs (memory: chunk x vocabulary floats)."""
    world_size: int = 1
    """Learner ranks. More than 1: FSDP2 over that many Ray actors (one GPU each on GPU machines, gloo on CPU).
    With vLLM engines on a GPU machine the learner is Ray actors even at 1, so its GPU is a Ray resource."""
    gpus_per_rank: float = 1.0
    """Ray GPU share each learner rank holds; below 1 only to share a device with an engine on purpose."""
    lora: LoraConfig | None = None
    trainable_layers: int | None = None
    """Train only the last N decoder layers and the final norm (None: every weight); embeddings stay frozen and
    the backward pass stops N layers down."""
    seed: int = 0


@runtime_checkable
class PolicyLearner(Protocol):
    """What the trainer needs of a learner: :class:`Learner` (this process) or
    :class:`~repogym.trainer.learner_group.LearnerGroup` (FSDP2 ranks as Ray actors) alike."""

    device: torch.device | str
    """Where the policy's weights are (rank 0's, over several ranks)."""
    sync_host: str | None
    """The node :meth:`send_weights` sends from (None: this one)."""

    def train_step(self, samples: list[Sample], algorithm: Algorithm) -> dict[str, float]:
        """One update of ``algorithm`` on ``samples``; the ``losses/`` metrics."""

    def set_lr(self, lr: float | None) -> float:
        """Set the learning rate (None: the configured one); returns the previous one."""

    def finish_warm_start(self) -> None:
        """After SFT, before RL: fresh optimiser moments, the KL reference becomes the current policy."""

    def policy_state(self) -> dict[str, torch.Tensor]:
        """The full policy weights on CPU in fp32 (for in-process engines)."""

    def send_weights(self, group: Any, version: int) -> dict[str, float]:
        """Stream the full weights as rank 0 of ``group`` (a
        :class:`~repogym.trainer.inference.weight_sync.SyncGroup`); the ``weight_sync/`` metrics."""

    def export(self, out_dir: Any, tokenizer: Any = None) -> None:
        """Save the policy as a model folder (with ``tokenizer``)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def close(self) -> None:
        """Release what the learner holds outside this object (ranks, connections)."""


class Learner:
    """Owns the trainable model and its optimiser (and, for KL, a frozen reference copy)."""

    def __init__(self, model, config: LearnerConfig, pad_id: int, extra_parameters=(), reference: bool = False):
        self.config = config
        self.rank, self.world = sharding.rank_and_world()
        self.sharded = sharding.distributed()
        if config.device:
            self.device = torch.device(config.device)
        elif torch.cuda.is_available():
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.bf16 = config.bf16 if config.bf16 is not None else self.device.type == "cuda"
        torch.manual_seed(config.seed)
        model = model.to(self.device, dtype=torch.float32)
        if config.gradient_checkpointing:
            # Non-reentrant: the one that composes with FSDP2 and with inputs that need no grad.
            kwargs = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 renamed it; the old name warns
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            model.config.use_cache = False
        if config.trainable_layers is not None:
            if config.lora is not None:
                raise ConfigError("learner.trainable_layers and learner.lora do not combine: choose one")
            freeze_below(model, config.trainable_layers)
        if config.lora is not None:
            if self.sharded:
                raise ConfigError("learner.lora is not supported with a sharded learner (learner.world_size > 1)")
            from peft import LoraConfig as PeftLora, get_peft_model

            lc = config.lora
            model = get_peft_model(model, PeftLora(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                                                   target_modules=lc.target_modules, task_type="CAUSAL_LM"))
        self.model = model.train()
        self.policy = PolicyLogprobs(model, config.logprob_chunk)
        if self.sharded:
            sharding.shard(self.policy, model, self.device, self.bf16)
        self.reference = None
        if reference:
            self.refresh_reference()
        self.extra = [p for p in extra_parameters]
        for p in self.extra:
            p.data = p.data.to(self.device)
        self.reset_optimizer()
        self.pad_id = pad_id
        self.steps = 0
        self._sender = None  # the weight-sync connection, made on the first send_weights

    def _compute(self):
        """bf16 autocast on one process (FSDP2's mixed-precision policy does it over several)."""
        if self.bf16 and not self.sharded:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def refresh_reference(self) -> None:
        """The KL reference becomes a frozen copy of the model as it is now (after a warm start, the SFT policy)."""
        self.reference = copy.deepcopy(self.policy).eval()
        for p in self.reference.parameters():
            p.requires_grad_(False)

    def reset_optimizer(self) -> None:
        """A fresh AdamW (no moments): for a new phase whose gradients differ in scale (SFT -> RL).

        Two optimisers, the same AdamW (per-parameter, so equal to one): the policy's may be sharded and is
        checkpointed through FSDP's state-dict helpers, which know nothing of the algorithm's own parameters."""
        c = self.config
        params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay, betas=tuple(c.betas))
        self.extra_optimizer = (torch.optim.AdamW(self.extra, lr=c.lr, weight_decay=c.weight_decay,
                                                  betas=tuple(c.betas)) if self.extra else None)

    def set_lr(self, lr: float | None) -> float:
        """Set the learning rate (None: the configured one); returns the previous one."""
        previous = self.optimizer.param_groups[0]["lr"]
        for optimizer in self._optimizers:
            for group in optimizer.param_groups:
                group["lr"] = self.config.lr if lr is None else lr
        return previous

    def finish_warm_start(self) -> None:
        """After SFT, before RL: fresh optimiser moments, the KL reference becomes the warm-started policy, step 0."""
        self.reset_optimizer()
        if self.reference is not None:
            self.refresh_reference()
        self.steps = 0

    @property
    def _optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for o in (self.optimizer, self.extra_optimizer) if o is not None]

    def _forward(self, module: torch.nn.Module, batch: Batch, algorithm: Algorithm):
        with self._compute():
            return module(batch.input_ids, batch.attention_mask, algorithm.temperature, algorithm.needs_hidden)

    def _rounds(self, batches: list[Batch]) -> Iterator[tuple[Batch, bool]]:
        """This rank's micro-batches (every ``world``-th), padded with repeats flagged not real: under FSDP every
        rank must run the same number of forward passes."""
        rounds = math.ceil(len(batches) / self.world)
        for r in range(rounds):
            i = r * self.world + self.rank
            yield (batches[i], True) if i < len(batches) else (batches[self.rank % len(batches)], False)

    def _old_pass(self, batches: list[Batch], algorithm: Algorithm) -> dict[str, float]:
        """The algorithm's look at the batch before this step's update (recomputed log-probs, values)."""
        with torch.no_grad():
            for batch, real in self._rounds(batches):
                logp, hidden = self._forward(self.policy, batch, algorithm)
                if real:
                    algorithm.old_pass(batch, logp.float(), hidden)
            if self.world > 1:
                # Every rank needs every batch's fields (PPO's GAE links the parts of an episode across batches).
                for i, batch in enumerate(batches):
                    owner = i % self.world
                    for name in OLD_PASS_FIELDS:
                        have = torch.tensor([int(getattr(batch, name) is not None)], device=self.device)
                        dist.broadcast(have, owner)
                        if not bool(have):
                            continue
                        if self.rank != owner:
                            setattr(batch, name, torch.empty(batch.loss_mask.shape, device=self.device))
                        dist.broadcast(getattr(batch, name).float().contiguous(), owner)
            return algorithm.finish_old_pass(batches)

    def train_step(self, samples: list[Sample], algorithm: Algorithm) -> dict[str, float]:
        """One optimiser step per epoch (``algorithm.epochs``) over ``samples`` with its loss; averaged metrics.

        Over several ranks every rank gets the same ``samples`` and the same metrics back."""
        if not samples:
            raise ValueError("train_step got no samples")
        epochs = algorithm.epochs
        chunks = micro_batches(samples, self.config.micro_batch_size, self.config.max_tokens_per_micro_batch)
        batches = [collate(c, self.pad_id, self.device) for c in chunks]
        denominator = normalizer([b.loss_mask for b in batches], algorithm.loss_agg, algorithm.agg_length)
        totals: dict[str, float] = {}
        if algorithm.needs_old_pass:
            totals.update(self._old_pass(batches, algorithm))
        share = 1.0 / (len(batches) * epochs)
        params = [p for o in self._optimizers for g in o.param_groups for p in g["params"]]
        for _ in range(epochs):
            for optimizer in self._optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for batch, real in self._rounds(batches):
                logp, hidden = self._forward(self.policy, batch, algorithm)
                ref = None
                if self.reference is not None:
                    with torch.no_grad():
                        ref = self._forward(self.reference, batch, algorithm)[0].float()
                loss, metrics = algorithm.loss(logp.float(), batch, denominator, ref, hidden=hidden)
                # FSDP averages gradients over ranks; the loss is already a share of the whole batch, so undo it.
                # A padding round still runs backward (every rank must), contributing nothing.
                (loss * (self.world if real else 0.0)).backward()
                if real:
                    loss_sum += float(loss.detach())
                    for k, v in metrics.items():
                        totals[k] = totals.get(k, 0.0) + v * share
            if self.world > 1:
                for p in self.extra:  # replicated parameters (a value head): their gradients summed by hand
                    if p.grad is not None:
                        dist.all_reduce(p.grad)
                        p.grad.div_(self.world)
            norm = sharding.total_grad_norm(params)
            scale = self.config.max_grad_norm / (norm + 1e-6)
            if scale < 1.0:
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(scale)
            for optimizer in self._optimizers:
                optimizer.step()
            totals["losses/loss"] = totals.get("losses/loss", 0.0) + loss_sum / epochs
            totals["losses/grad_norm"] = norm
        self.steps += 1
        totals = sharding.combine_metrics(totals, self.world)
        totals["losses/grad_norm"] = norm
        totals["losses/tokens"] = float(sum(b.tokens for b in batches))
        return totals

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The full policy weights one tensor at a time, by Hugging Face name (LoRA merged in), on this device.

        Over several ranks each tensor is gathered as it is reached: every rank must iterate to the end."""
        model = self.model
        if self.config.lora is not None:
            model = copy.deepcopy(model).merge_and_unload()
        for name, tensor in model.state_dict().items():
            yield name, sharding.full(tensor).detach()

    sync_host: str | None = None
    """Where :meth:`send_weights` sends from (None: this node)."""

    def send_weights(self, group, version: int) -> dict[str, float]:
        """Stream the full weights in bf16 buckets as rank 0 of ``group`` (a
        :class:`~repogym.trainer.inference.weight_sync.SyncGroup`; NCCL from this device, gloo from CPU); the
        ``weight_sync/`` metrics. The connection is kept while the group stays the same. Over several ranks every
        rank must call it (each tensor is gathered as it is reached); only rank 0 sends, the others return {}."""
        named = self.named_weights()
        if self.rank != 0:
            for _ in named:
                pass
            return {}
        from repogym.trainer.inference.weight_sync import WeightSender

        if self._sender is None or self._sender.group != group:
            if self._sender is not None:
                self._sender.close()  # the engines were replaced: a new group
            self._sender = WeightSender(group, device=self.device if group.backend == "nccl" else "cpu")
        return self._sender.send(named)

    def policy_state(self) -> dict[str, torch.Tensor]:
        """The full policy weights on CPU in fp32 (LoRA merged in), for in-process engines."""
        return {k: v.to("cpu", dtype=torch.float32).clone() for k, v in self.named_weights()}

    def export(self, out_dir, tokenizer=None) -> None:
        """Save the policy as a model folder ``from_pretrained`` loads (LoRA merged in), with its tokenizer."""
        if self.sharded:
            state = self.policy_state()
            if self.rank == 0:
                self.model.save_pretrained(out_dir, state_dict=state)
        else:
            model = copy.deepcopy(self.model).merge_and_unload() if self.config.lora is not None else self.model
            model.save_pretrained(out_dir)
        if tokenizer is not None and self.rank == 0:
            tokenizer.save_pretrained(out_dir)

    def close(self) -> None:
        """Drop the weight-sync connection, if any (a :class:`~repogym.trainer.learner_group.LearnerGroup` stops
        its ranks)."""
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs: weights, optimiser, extra parameters, step count (over several ranks:
        the full, unsharded state, complete on rank 0)."""
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            policy_state, optim_state = get_state_dict(self.policy, self.optimizer, options=options)
            model_state = {k.removeprefix("model."): v for k, v in policy_state.items()}
        else:
            model_state, optim_state = self.model.state_dict(), self.optimizer.state_dict()
        return {"model": model_state, "optimizer": optim_state,
                "extra_optimizer": self.extra_optimizer.state_dict() if self.extra_optimizer else None,
                "extra": [p.detach().cpu() for p in self.extra], "steps": self.steps,
                "reference": self.reference.state_dict() if self.reference is not None and not self.sharded else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

            set_state_dict(self.policy, self.optimizer,
                           model_state_dict={"model." + k: v for k, v in state["model"].items()},
                           optim_state_dict=state["optimizer"],
                           options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        else:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        if self.extra_optimizer is not None and state.get("extra_optimizer") is not None:
            self.extra_optimizer.load_state_dict(state["extra_optimizer"])
        for p, saved in zip(self.extra, state["extra"]):
            p.data.copy_(saved.to(p.device))
        if self.reference is not None and state.get("reference") is not None:
            self.reference.load_state_dict(state["reference"])
        self.steps = state["steps"]


def freeze_below(model, trainable_layers: int) -> None:
    """Leave only the last ``trainable_layers`` decoder layers and the final norm trainable."""
    layers = getattr(model.get_decoder(), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not 1 <= trainable_layers <= len(layers):
        count = len(layers) if isinstance(layers, torch.nn.ModuleList) else "no"
        raise ConfigError(f"learner.trainable_layers must be between 1 and the model's decoder layers ({count}), "
                          f"got {trainable_layers}")
    for p in model.parameters():
        p.requires_grad_(False)
    trainable = list(layers[len(layers) - trainable_layers:]) + [getattr(model.get_decoder(), "norm", None)]
    for module in filter(None, trainable):
        for p in module.parameters():
            p.requires_grad_(True)


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
