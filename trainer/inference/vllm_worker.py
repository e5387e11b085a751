"""A vLLM worker extension that loads new weights in place (vLLM imports it by name in each worker).

Kept in its own module, free of vLLM imports, as vLLM's RLHF examples advise: vLLM mixes this class into
whatever worker class it runs, on each tensor-parallel rank, and ``LLM.collective_rpc`` calls its methods.
"""

from __future__ import annotations


class WeightSyncExtension:
    """Methods vLLM adds to its GPU worker (``self.model_runner`` and ``self.device`` come from it)."""

    def load_named_weights(self, named_tensors: list[tuple[str, object]]) -> int:
        """Load full (unsharded) tensors by Hugging Face parameter name; the model shards them itself."""
        import torch

        weights = [(name, t.to(self.device, non_blocking=True)) for name, t in named_tensors]
        self.model_runner.model.load_weights(weights=weights)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return len(weights)
