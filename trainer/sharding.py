"""FSDP2 for the learner: shard a policy over the default process group, and the few collectives the learner needs.

Each decoder layer is its own ``fully_shard`` unit (gathered just before it runs, freed after), then the
root (embeddings, final norm, output head). Parameters stay fp32 on every rank (the master copy the optimiser
steps); with ``bf16`` the mixed-precision policy gathers them as bf16 for compute and reduces gradients in
fp32. One rank or no process group: nothing here is used.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def distributed() -> bool:
    """Whether a default process group exists (the learner then shards, even over one rank)."""
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size of the default process group ((0, 1) when there is none)."""
    if distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of transformer blocks: its ``ModuleList`` with ``num_hidden_layers`` entries."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) and (n is None or len(module) == n):
            return module
    raise ValueError(f"no list of {n} decoder layers found in {type(model).__name__}")


def shard(policy: nn.Module, model: nn.Module, device: torch.device, bf16: bool) -> None:
    """``fully_shard`` each decoder layer of ``model`` and then ``policy`` (its root) in place, over all ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(policy, mesh=mesh, mp_policy=mp)


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind a sharded one (a collective: every rank must call it), or ``tensor`` itself."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def total_grad_norm(parameters: list[nn.Parameter]) -> float:
    """The 2-norm of all gradients over every rank: sharded ones summed over their shards (one all-reduce),
    replicated ones counted once."""
    from torch.distributed.tensor import DTensor

    sharded = replicated = None
    device = next((p.grad.device for p in parameters if p.grad is not None), torch.device("cpu"))
    for p in parameters:
        if p.grad is None:
            continue
        if isinstance(p.grad, DTensor):
            s = p.grad.to_local().detach().double().pow(2).sum()
            sharded = s if sharded is None else sharded + s
        else:
            s = p.grad.detach().double().pow(2).sum()
            replicated = s if replicated is None else replicated + s
    total = 0.0
    if rank_and_world()[1] > 1:  # every rank joins the all-reduce, with or without sharded gradients of its own
        sharded = sharded if sharded is not None else torch.zeros((), dtype=torch.float64, device=device)
        dist.all_reduce(sharded)
    if sharded is not None:
        total += float(sharded)
    if replicated is not None:
        total += float(replicated)
    return total ** 0.5


def combine_metrics(local: dict[str, float], world: int) -> dict[str, float]:
    """Per-rank metrics as one dict: keys ending ``_max`` take the largest, others are summed (each rank's
    values are already its share of the whole batch's average)."""
    if world == 1:
        return local
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, local)
    out: dict[str, float] = {}
    for metrics in gathered:
        for key, value in metrics.items():
            out[key] = max(out.get(key, value), value) if key.endswith("_max") else out.get(key, 0.0) + value
    return out


__all__ = ["combine_metrics", "decoder_layers", "distributed", "full", "rank_and_world", "shard", "total_grad_norm"]
