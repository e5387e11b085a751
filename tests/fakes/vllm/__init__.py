"""A stand-in for the parts of vLLM's documented offline API that repogym uses, for tests without a GPU.

It checks arguments against vLLM's documented names (an unknown keyword is an error, as in vLLM), and
"generates" deterministically: token ``t`` of a completion is ``(last prompt id + t + 1 + seed) % 97``,
its logprob ``-0.1 * (t + 1) / temperature``. Every call is recorded in ``LLM.calls``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_ENGINE_ARGS = {"model", "tokenizer", "tensor_parallel_size", "dtype", "gpu_memory_utilization", "max_model_len",
                "enable_prefix_caching", "seed", "enforce_eager", "worker_extension_cls", "logprobs_mode",
                "distributed_executor_backend", "trust_remote_code"}
_SAMPLING_ARGS = {"n", "temperature", "top_p", "top_k", "min_p", "max_tokens", "stop_token_ids", "seed",
                  "logprobs", "detokenize", "skip_special_tokens"}


class SamplingParams:
    def __init__(self, **kwargs):
        unknown = set(kwargs) - _SAMPLING_ARGS
        if unknown:
            raise TypeError(f"SamplingParams got unexpected arguments {sorted(unknown)}")
        self.n, self.temperature, self.top_p, self.max_tokens = 1, 1.0, 1.0, 16
        self.stop_token_ids, self.seed, self.logprobs = [], None, None
        self.__dict__.update(kwargs)


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class _Model:
    def __init__(self):
        self.loaded: list[list[tuple[str, object]]] = []

    def load_weights(self, weights):
        self.loaded.append(list(weights))
        return {name for name, _ in weights}


class _Worker:
    """What vLLM mixes a worker extension into: a model runner and a device."""

    def __init__(self, extension_cls):
        self.model_runner = type("ModelRunner", (), {})()
        self.model_runner.model = _Model()
        self.device = "cpu"
        self.extension = type("Worker", (extension_cls,), {})()
        self.extension.model_runner, self.extension.device = self.model_runner, self.device


@dataclass
class _ModelConfig:
    max_model_len: int


class LLM:
    calls: list = []

    def __init__(self, model: str, **kwargs):
        unknown = set(kwargs) - _ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs got unexpected arguments {sorted(unknown)}")
        self.kwargs = {"model": model, **kwargs}
        self.llm_engine = type("LLMEngine", (), {})()
        self.llm_engine.model_config = _ModelConfig(kwargs.get("max_model_len") or 64)
        self.workers = []
        if kwargs.get("worker_extension_cls"):
            import importlib

            module, _, name = kwargs["worker_extension_cls"].rpartition(".")
            cls = getattr(importlib.import_module(module), name)
            self.workers = [_Worker(cls) for _ in range(kwargs.get("tensor_parallel_size", 1))]
        self.generate_calls: list[int] = []
        self.prefix_resets = 0
        self.seed_offset = 0
        LLM.calls.append(self)

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        if not isinstance(sampling_params, list):
            sampling_params = [sampling_params] * len(prompts)
        self.generate_calls.append(len(prompts))
        outputs = []
        for prompt, params in zip(prompts, sampling_params):
            ids = prompt["prompt_token_ids"]
            if len(ids) + params.max_tokens > self.llm_engine.model_config.max_model_len:
                raise ValueError("prompt + max_tokens exceeds max_model_len")
            tokens, logprobs, reason = [], [], "length"
            temp = params.temperature or 1.0
            for t in range(params.max_tokens):
                token = (ids[-1] + t + 1 + (params.seed or 0) + self.seed_offset) % 97
                tokens.append(token)
                logprobs.append({token: Logprob(-0.1 * (t + 1) / temp, 1)})
                if token in params.stop_token_ids:
                    reason = "stop"
                    break
            outputs.append(RequestOutput(list(ids), [CompletionOutput(0, tokens, logprobs, reason)]))
        return outputs

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        return [getattr(w.extension, method)(*args, **(kwargs or {})) for w in self.workers]

    def reset_prefix_cache(self):
        self.prefix_resets += 1
        return True


__all__ = ["LLM", "Logprob", "SamplingParams"]
