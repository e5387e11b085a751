"""Weight sync over a group of its own: a sender (this process) and two receivers in spawned processes."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from repogym.trainer.inference.weight_sync import (
    SyncGroup,
    WeightReceiver,
    WeightSender,
    free_port,
    receive_weights,
)


def _receiver(group: SyncGroup, rank: int, syncs: int, out: str) -> None:
    receiver = WeightReceiver(group, rank)
    got = []
    for _ in range(syncs):  # the same receiver (one connection) for every sync
        got.append([(name, t.clone(), t.dtype) for name, t in receiver.receive()])
    torch.save(got, out)


def _weights(seed: int) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [("embed.weight", torch.randn(64, 32, generator=g)),        # 4 KiB in bf16: bigger than a bucket
            ("layer.0.weight", torch.randn(16, 16, generator=g)),      # 512 B
            ("layer.0.bias", torch.randn(16, generator=g)),            # 32 B
            ("layer.1.weight", torch.randn(8, 16, generator=g).t()),   # not contiguous
            ("scale", torch.tensor(3.14159)),                          # 0-d
            ("layer.1.bias", torch.randn(7, generator=g)),             # odd size: the next one starts aligned
            ("norm.weight", torch.randn(33, generator=g).to(torch.float64))]


@pytest.mark.slow
def test_two_syncs_reach_every_receiver_exactly_in_buckets():
    group = SyncGroup("127.0.0.1", free_port(), world_size=3)
    ctx = multiprocessing.get_context("spawn")
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp())
    procs = [ctx.Process(target=_receiver, args=(group, r, 2, str(tmp / f"{r}.pt"))) for r in (1, 2)]
    for p in procs:
        p.start()
    sender = WeightSender(group, bucket_bytes=600, timeout_s=60)
    syncs = [_weights(0), _weights(1)]
    metrics = []
    for weights in syncs:
        consumed = []

        def lazy(ws=weights):  # the sender pulls tensors one at a time
            for item in ws:
                consumed.append(item[0])
                yield item

        metrics.append(sender.send(lazy()))
        assert consumed == [n for n, _ in weights]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    expected_bytes = sum(t.numel() * 2 for _, t in syncs[0])
    assert metrics[0]["weight_sync/bytes"] == expected_bytes
    # embed alone (4 KiB > 600 B); 512 + 32 fill one bucket; 256 + 2 + 14 + 66 (+ alignment) another
    assert metrics[0]["weight_sync/buckets"] == 3
    assert metrics[0]["weight_sync/seconds"] > 0
    for r in (1, 2):
        got = torch.load(tmp / f"{r}.pt")
        assert len(got) == 2
        for weights, received in zip(syncs, got):
            assert [name for name, _, _ in received] == [name for name, _ in weights]
            for (_, sent), (_, tensor, dtype) in zip(weights, received):
                assert dtype == torch.bfloat16 and tensor.shape == sent.shape
                assert torch.equal(tensor, sent.to(torch.bfloat16))
    assert not torch.equal(got[0][0][1], got[1][0][1])  # the second sync carried the new weights


def test_fp32_sync_is_exact_and_arguments_are_checked():
    with pytest.raises(ValueError, match="backend"):
        SyncGroup("127.0.0.1", 1, 2, backend="mpi")
    with pytest.raises(ValueError, match="world_size"):
        SyncGroup("127.0.0.1", 1, 1)
    group = SyncGroup("127.0.0.1", free_port(), world_size=2)
    with pytest.raises(ValueError, match="receiver rank"):
        WeightReceiver(group, 0)
    import threading

    received = []  # through the connection kept per (group, rank) in this process
    thread = threading.Thread(target=lambda: received.extend((n, t.clone()) for n, t in receive_weights(group, 1)))
    thread.start()
    weights = _weights(2)
    metrics = WeightSender(group, bucket_bytes=1 << 20, timeout_s=60).send(iter(weights), dtype=torch.float32)
    thread.join(60)
    assert metrics["weight_sync/buckets"] == 1
    assert metrics["weight_sync/bytes"] == sum(t.numel() * 4 for _, t in weights)
    for (name, sent), (got_name, got) in zip(weights, received, strict=True):
        assert name == got_name and got.dtype == torch.float32 and torch.equal(got, sent.float())
