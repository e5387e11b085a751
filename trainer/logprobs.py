"""The policy as the learner sees it: token log-probs (and last hidden states) from a causal LM, in chunks.

A 150k-token vocabulary at 32k positions is 19 GB of fp32 logits per sequence; the learner needs one number
per position (the log-prob of the token that came next). :class:`PolicyLogprobs` runs the decoder, then the
output head over ``chunk`` positions at a time. Under autograd each chunk is checkpointed, so at most one
chunk's logits exist at once, in the forward and again in the backward.

It is one ``nn.Module`` whose forward covers the output head too: FSDP2 gathers a sharded root's parameters
(embeddings, final norm, head, tied or not) for its forward, so the head must be called inside it.
Final-logit soft-capping and logit scaling of some architectures are not applied (Llama, Qwen and Mistral
families have neither).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def _chunk_logprobs(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(hidden).float()
    if temperature not in (0, 1):
        logits = logits / temperature
    return torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]


def chunked_token_logprobs(head: nn.Module, hidden: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0,
                           chunk: int = 4096) -> torch.Tensor:
    """Log-prob of each next token [B, T-1] from the decoder's last hidden states [B, T, H], ``chunk`` positions
    at a time (checkpointed under autograd). Equal to ``token_logprobs(head(hidden), input_ids, temperature)``."""
    hidden, targets = hidden[:, :-1], input_ids[:, 1:]
    chunk = max(1, int(chunk))
    parts = []
    for start in range(0, hidden.shape[1], chunk):
        h, t = hidden[:, start:start + chunk], targets[:, start:start + chunk]
        if torch.is_grad_enabled() and h.requires_grad:
            parts.append(checkpoint(_chunk_logprobs, head, h, t, temperature, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(head, h, t, temperature))
    if not parts:
        return hidden.new_zeros(hidden.shape[0], 0, dtype=torch.float32)
    return torch.cat(parts, 1)


class PolicyLogprobs(nn.Module):
    """A Hugging Face causal LM whose forward returns token log-probs [B, T-1] and, on request, last hidden states."""

    def __init__(self, model: nn.Module, chunk: int = 4096):
        super().__init__()
        self.model = model
        self.chunk = chunk

    @property
    def decoder(self) -> nn.Module:
        """The model without its output head (``model.model`` for Llama-like models)."""
        return self.model.get_decoder()

    @property
    def head(self) -> nn.Module:
        return self.model.get_output_embeddings()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
                return_hidden: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden = self.decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        logprobs = chunked_token_logprobs(self.head, hidden, input_ids, temperature, self.chunk)
        return logprobs, (hidden if return_hidden else None)


__all__ = ["PolicyLogprobs", "chunked_token_logprobs"]
