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
    tokenizer = build_tokenizer(corpus, c.vocab_size)
    model = build_tiny_model(tokenizer, c)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    return out


__all__ = ["CHAT_TEMPLATE", "TinyModelConfig", "build_tiny", "build_tiny_model", "build_tokenizer"]
