"""A tiny causal LM built from a config (random init) with a tokenizer trained locally: no hub, no download.

For the CPU path and tests. Real runs pass ``model.path`` to a model folder instead. The tokenizer is a
byte-level BPE trained on a corpus the caller gives (task prompts, tool schemas, oracle actions), with
a ChatML template that puts tool schemas in the system turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{%- if loop.first and m['role'] == 'system' and tools %}\n\nTools:\n"
    "{%- for t in tools %}\n{{ t | tojson }}{%- endfor %}{%- endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclass
class TinyModelConfig:
    """Shape of the tiny model (a Llama architecture)."""

    vocab_size: int = 2048
    """Target BPE vocabulary (the trained tokenizer may come out smaller on a small corpus)."""
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0
    copy_steps: int = 0
    """Updates of copy pretraining before the model is saved (0: none): a pretrained base model can copy what it
    reads and a random-init one cannot, and it learns that slowly from task data alone. See :func:`pretrain_copy`."""


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 2048):
    """A byte-level BPE tokenizer with a ChatML template, trained on ``corpus`` (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(corpus), trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_tiny_model(tokenizer, config: TinyModelConfig | None = None):
    """A randomly initialised Llama-architecture causal LM sized by ``config`` for ``tokenizer``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    c = config or TinyModelConfig()
    torch.manual_seed(c.seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                      num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
                      num_key_value_heads=c.num_kv_heads, max_position_embeddings=c.max_position_embeddings,
                      tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    return LlamaForCausalLM(cfg)


def build_tiny(out_dir: str | Path, corpus: Iterable[str], config: TinyModelConfig | None = None) -> Path:
    """Build and save a tiny model and its tokenizer to ``out_dir`` (a folder ``from_pretrained`` loads)."""
    c = config or TinyModelConfig()
    corpus = list(corpus)
    tokenizer = build_tokenizer(corpus, c.vocab_size)
    model = build_tiny_model(tokenizer, c)
    if c.copy_steps:
        pretrain_copy(model, tokenizer, corpus, c.copy_steps, seed=c.seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    return out


def copy_sequence(stream: list[int], rng, span: tuple[int, int] = (4, 24), gap: tuple[int, int] = (8, 96)
                  ) -> tuple[list[int], list[int]]:
    """One copy example cut from the token ``stream``: a span, unrelated text, the span again; returns the ids and
    the loss mask (the second showing, past its first token: the part only reading back can predict)."""
    n, g = rng.randint(*span), rng.randint(*gap)
    at, filler = rng.randrange(len(stream) - n), rng.randrange(len(stream) - g)
    first, between = stream[at:at + n], stream[filler:filler + g]
    ids = first + between + first
    mask = [0] * (n + g + 1) + [1] * (n - 1)
    return ids, mask


def pretrain_copy(model, tokenizer, corpus: list[str], steps: int, batch_size: int = 16, lr: float = 1e-3,
                  seed: int = 0) -> list[float]:
    """Train ``model`` to copy spans of the corpus's own text it saw earlier in the sequence (induction); returns
    the loss of each update."""
    import random

    import torch

    rng = random.Random(seed)
    stream = [i for text in dict.fromkeys(corpus) for i in tokenizer.encode(text)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        batch = [copy_sequence(stream, rng) for _ in range(batch_size)]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.tensor([b[0] + [tokenizer.pad_token_id] * (width - len(b[0])) for b in batch])
        mask = torch.tensor([b[1] + [0] * (width - len(b[1])) for b in batch], dtype=torch.float)
        logits = model(input_ids=ids).logits[:, :-1]
        token_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1),
                                                       reduction="none").view(ids.size(0), -1)
        loss = (token_loss * mask[:, 1:]).sum() / mask[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


__all__ = ["CHAT_TEMPLATE", "TinyModelConfig", "build_tiny", "build_tiny_model", "build_tokenizer", "copy_sequence",
           "pretrain_copy"]
