"""The inference seam: an ``Engine`` turns prompt token ids into sampled completions with logprobs.

Token-level agents (``hf``) and the trainer's rollout fleet talk to any engine through this protocol:
transformers ``generate`` on CPU (``repogym.agents.hf.HFEngine``), a vLLM engine on GPU
(``repogym.trainer.inference.vllm_engine.VLLMEngine``), or a Ray actor handle wrapping either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class SamplingParams:
    """How to sample one completion."""

    temperature: float = 1.0
    """0 means greedy; logprobs are then those of the untempered distribution."""
    max_new_tokens: int = 512
    top_p: float = 1.0
    """Kept at 1.0 for RL so sampling logprobs are those of the distribution the learner trains."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Generation ends after any of these (the stop token is part of the completion)."""
    seed: int | None = None
    """Per-request seed: the same prompt, weights and seed give the same completion."""


@dataclass
class Completion:
    """One sampled completion: its token ids, the sampling logprob of each, and why it ended."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: str
    """``stop`` (a stop token was produced) or ``length`` (``max_new_tokens`` reached)."""
    version: int | None = None
    """The policy version of the weights that generated it, read under the engine's lock with the tokens (None:
    the engine does not say; the caller falls back to the engine's version now)."""


@runtime_checkable
class Engine(Protocol):
    """Generates completions for token-id prompts; takes new weights from the learner."""

    version: int
    """Policy version of the weights in use (0 for the initial weights)."""
    max_model_len: int | None
    """Prompt plus completion tokens the model takes (None: no known limit)."""

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt."""

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """Load new weights (a full state dict of tensors) and record their policy version."""


__all__ = ["Completion", "Engine", "SamplingParams"]
