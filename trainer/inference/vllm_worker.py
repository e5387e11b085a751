"""A vLLM worker extension that loads new weights in place (vLLM imports it by name in each worker).

Kept in its own module, free of vLLM imports, as vLLM's RLHF examples advise: vLLM mixes this class into
whatever worker class it runs (GPU or CPU), on each tensor-parallel rank, and ``collective_rpc`` calls its
methods. Method names carry a ``repogym_`` prefix because vLLM refuses an extension whose names clash with
the worker's own.

Tensors never travel inside ``collective_rpc`` arguments: there they reach the engine-core process as plain
lists (msgpack). Weights come either over a :mod:`~repogym.trainer.inference.weight_sync` group (the fast
path: the worker joins it as one rank) or as safetensors bytes (small models, tests). Both are fed to vLLM's
own in-place reload (``Worker.reload_weights``), which takes checkpoint-format (Hugging Face) names and
redoes the kernel-specific processing (the CPU build's repacked linear layers, quantisation); calling
``model.load_weights`` directly skips that processing, and is only the fallback for vLLM versions whose
``reload_weights`` takes no iterator (GPU, unquantised models).
"""

from __future__ import annotations

import logging


class WeightSyncExtension:
    """Methods vLLM adds to its worker (``self.reload_weights``, ``self.rank`` and ``self.device`` come from it)."""

    def repogym_receive_weights(self, group: dict, first_rank: int) -> int:
        """Join ``group`` (a ``SyncGroup`` as a dict) as rank ``first_rank + self.rank`` and load one sync's weights.

        The connection is made on the first call and kept on the worker for later syncs to the same group.
        Returns the number of tensors loaded.
        """
        from repogym.trainer.inference.weight_sync import SyncGroup, WeightReceiver

        sync_group = SyncGroup(**group)
        rank = first_rank + self.rank
        receiver = getattr(self, "_repogym_receiver", None)
        if receiver is None or receiver.group != sync_group or receiver.rank != rank:
            if receiver is not None:
                receiver.close()
            device = self.device if sync_group.backend == "nccl" else "cpu"
            receiver = self._repogym_receiver = WeightReceiver(sync_group, rank, device)
        return self._repogym_reload(receiver.receive())

    def repogym_load_safetensors(self, blob: bytes) -> int:
        """Load tensors serialised with ``safetensors.torch.save`` (full, unsharded, Hugging Face names)."""
        from safetensors.torch import load

        return self._repogym_reload(iter(load(blob).items()))

    def _repogym_reload(self, weights) -> int:
        import inspect

        import torch

        count = 0

        def counted():
            nonlocal count
            for item in weights:
                count += 1
                yield item

        stream = counted()
        try:
            # Worker.reload_weights passes *args on to the model runner's, whose signature tells the version apart
            runner_reload = getattr(getattr(self, "model_runner", None), "reload_weights", self.reload_weights)
            if "weights_iterator" in inspect.signature(runner_reload).parameters:
                self.reload_weights(weights_iterator=stream)
            else:  # vLLM before the in-place reload (< 0.12 or so): GPU models load checkpoint names directly
                self.model_runner.model.load_weights(weights=stream)
        finally:
            # A sync is read to its end marker whatever the model skipped or failed on: a sender left waiting
            # on this rank would hang until its timeout. A broken connection fails here too; the first error wins.
            try:
                for _ in stream:
                    pass
            except Exception as exc:  # noqa: BLE001 - torch.distributed/the network: the connection broke mid-sync
                logging.getLogger(__name__).warning("weight sync: reading the sync to its end marker failed: %s", exc)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return count
