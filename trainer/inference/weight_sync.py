"""Bucketed weight broadcast from the learner (rank 0) to inference engines, over a group of its own.

The group is built straight from a ``TCPStore`` and a ``ProcessGroupGloo``/``ProcessGroupNCCL``, never through
``torch.distributed.init_process_group``: the learner's default process group (FSDP's) is left alone, and the
engines' workers, which run vLLM's own groups, join this one beside them. Rank 0 is the learner; ranks 1.. are
the engines' workers.

What a sync guarantees: every receiver gets every tensor the sender was given, in order, cast to the sender's
``dtype`` (bf16 by default: the values are the learner's rounded to bf16). Tensors travel in flat buckets of at
most ``bucket_bytes`` (a tensor bigger than that travels alone); each bucket is a small header (names, shapes,
dtypes as JSON) and its payload as raw bytes, so any dtype goes over gloo. An empty header ends the sync.

What it does not do: it does not shard (engines take full tensors and shard them themselves), and it has no
recovery: a rank that dies mid-sync makes the others fail after ``timeout_s``; a new :class:`SyncGroup` (a new
port) is then needed. Connections are made on the first sync and kept for the next ones.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterable, Iterator

import torch

_ALIGN = 16  # every tensor starts at a multiple of this in a bucket, so a byte slice can be viewed as any dtype
_BACKENDS = ("gloo", "nccl")


@dataclass(frozen=True)
class SyncGroup:
    """Where and how the learner and the engines meet (picklable, comparable: a new one means reconnect)."""

    host: str
    """Address of rank 0 (the sender), where its ``TCPStore`` listens."""
    port: int
    """A free port on ``host`` (:func:`free_port`)."""
    world_size: int
    """1 (the sender) + every receiving rank of every engine."""
    backend: str = "gloo"
    """``gloo`` (CPU tensors) or ``nccl`` (CUDA tensors, on every rank)."""

    def __post_init__(self):
        if self.backend not in _BACKENDS:
            raise ValueError(f"SyncGroup.backend: expected one of {', '.join(_BACKENDS)}, got {self.backend!r}")
        if self.world_size < 2:
            raise ValueError(f"SyncGroup.world_size: expected at least 2 (a sender, a receiver), got {self.world_size}")


def free_port() -> int:
    """A TCP port free on this machine now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _connect(group: SyncGroup, rank: int, timeout_s: float):
    """This rank's process group of ``group`` (blocks until every rank has joined)."""
    from torch import distributed as dist

    if not 0 <= rank < group.world_size:
        raise ValueError(f"rank: expected 0..{group.world_size - 1}, got {rank}")
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(group.host, group.port, group.world_size, is_master=rank == 0, timeout=timeout)
    if group.backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        pg = dist.ProcessGroupNCCL(store, rank, group.world_size, options)
    else:
        pg = dist.ProcessGroupGloo(store, rank, group.world_size, timeout)
    return store, pg  # the store must outlive the group: rank 0's is the rendezvous server


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"weight sync header: unknown dtype {name!r}")
    return dtype


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class WeightSender:
    """Rank 0 of a :class:`SyncGroup`: broadcasts named tensors to every receiver, bucket by bucket."""

    def __init__(self, group: SyncGroup, device: str | torch.device = "cpu", bucket_bytes: int = 256 << 20,
                 timeout_s: float = 600):
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes: expected > 0, got {bucket_bytes}")
        self.group, self.device = group, torch.device(device)
        self.bucket_bytes, self.timeout_s = bucket_bytes, timeout_s
        self._pg = None
        self._store = None
        self._buffer: torch.Tensor | None = None

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self._pg.broadcast(tensor, 0).wait()

    def _send_bucket(self, header: list, payload: torch.Tensor) -> None:
        encoded = json.dumps(header).encode()
        self._broadcast(torch.tensor([len(encoded), payload.numel()], dtype=torch.int64, device=self.device))
        self._broadcast(torch.frombuffer(bytearray(encoded), dtype=torch.uint8).to(self.device))
        self._broadcast(payload)

    def send(self, named: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype = torch.bfloat16) -> dict[str, float]:
        """Broadcast ``named`` (consumed lazily) cast to ``dtype``; returns bytes sent, seconds taken, buckets."""
        start = time.perf_counter()
        if self._pg is None:  # the first sync connects; later ones reuse the connection
            self._store, self._pg = _connect(self.group, 0, self.timeout_s)
        if self._buffer is None:
            self._buffer = torch.empty(self.bucket_bytes, dtype=torch.uint8, device=self.device)
        header: list = []
        used = sent = buckets = 0
        itemsize = torch.empty((), dtype=dtype).element_size()
        for name, tensor in named:
            nbytes = tensor.numel() * itemsize
            if nbytes > self.bucket_bytes:  # too big for a bucket: alone, straight from a cast copy
                if header:
                    self._send_bucket(header, self._buffer[:used])
                    header, used, buckets = [], 0, buckets + 1
                flat = tensor.detach().to(self.device, dtype).contiguous().view(-1).view(torch.uint8)
                self._send_bucket([[name, list(tensor.shape), str(dtype).removeprefix("torch."), 0]], flat)
                sent, buckets = sent + nbytes, buckets + 1
                continue
            if used + nbytes > self.bucket_bytes:
                self._send_bucket(header, self._buffer[:used])
                header, used, buckets = [], 0, buckets + 1
            # copy_ casts and moves in one go, straight into the bucket: no intermediate copy of the tensor
            self._buffer[used:used + nbytes].view(dtype).view(tensor.shape).copy_(tensor.detach())
            header.append([name, list(tensor.shape), str(dtype).removeprefix("torch."), used])
            used, sent = _aligned(used + nbytes), sent + nbytes
            used = min(used, self.bucket_bytes)
        if header:
            self._send_bucket(header, self._buffer[:used])
            buckets += 1
        self._broadcast(torch.zeros(2, dtype=torch.int64, device=self.device))  # the end marker
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return {"weight_sync/bytes": float(sent), "weight_sync/seconds": time.perf_counter() - start,
                "weight_sync/buckets": float(buckets)}

    def close(self) -> None:
        """Drop the connection (the receivers' next sync then fails: give them a new group)."""
        self._pg = self._store = self._buffer = None


class WeightReceiver:
    """A receiving rank of a :class:`SyncGroup`; its connection is made on the first sync and kept."""

    def __init__(self, group: SyncGroup, rank: int, device: str | torch.device = "cpu", timeout_s: float = 600):
        if not 1 <= rank < group.world_size:
            raise ValueError(f"receiver rank: expected 1..{group.world_size - 1}, got {rank}")
        self.group, self.rank, self.device, self.timeout_s = group, rank, torch.device(device), timeout_s
        self._pg = None
        self._store = None

    def _broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        self._pg.broadcast(tensor, 0).wait()
        return tensor

    def receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        """One sync's tensors, in the sender's order. Each is a view into its bucket's own buffer (a fresh
        buffer per bucket), so a consumer may keep them. The iterator must be run to its end."""
        if self._pg is None:
            self._store, self._pg = _connect(self.group, self.rank, self.timeout_s)
        while True:
            sizes = self._broadcast(torch.empty(2, dtype=torch.int64, device=self.device)).tolist()
            header_len, payload_len = int(sizes[0]), int(sizes[1])
            if header_len == 0:
                return
            encoded = self._broadcast(torch.empty(header_len, dtype=torch.uint8, device=self.device))
            header = json.loads(bytes(encoded.cpu().numpy()))
            payload = self._broadcast(torch.empty(payload_len, dtype=torch.uint8, device=self.device))
            for name, shape, dtype_name, offset in header:
                dtype = _dtype(dtype_name)
                count = 1
                for d in shape:
                    count *= d
                nbytes = count * dtype.itemsize
                yield name, payload[offset:offset + nbytes].view(dtype).view(shape)

    def close(self) -> None:
        self._pg = self._store = None


_RECEIVERS: dict[tuple[SyncGroup, int, str], WeightReceiver] = {}


def receive_weights(group: SyncGroup, rank: int,
                    device: str | torch.device = "cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """One sync's tensors for ``rank``, over a connection kept per (group, rank, device) in this process."""
    key = (group, rank, str(device))
    if key not in _RECEIVERS:
        for old in [k for k in _RECEIVERS if k[1:] == key[1:]]:  # a new group for this rank replaces the old
            _RECEIVERS.pop(old).close()
        _RECEIVERS[key] = WeightReceiver(group, rank, device)
    return _RECEIVERS[key].receive()


__all__ = ["SyncGroup", "WeightReceiver", "WeightSender", "free_port", "receive_weights"]
