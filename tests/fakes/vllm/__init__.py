"""A stand-in for the parts of vLLM's async API that repogym uses, for what vLLM's CPU build cannot show.

The real engine is tested in tests/test_vllm_real.py (vLLM's CPU build, in .venv-vllm): generation, logprobs,
weight reloads, the prefix cache. This stand-in is kept only for what that build cannot run or cannot run
deterministically: tensor-parallel engine arguments and the Ray executor choice, several tensor-parallel
workers joining one weight-sync group (each worker is a thread here), GPU placement of engine actors (Ray with
made-up GPUs), and requests held open on purpose to pin down when a weight update may run.

It checks arguments against vLLM's names (an unknown keyword is an error, as in vLLM), and "generates"
deterministically: token ``t`` of a completion is ``(last prompt id + t + 1 + seed + offset) % 97``, its
logprob ``-0.1 * (t + 1) / temperature``, where ``offset`` is the sum of the last loaded weights' first
elements (so a weight update shows in the tokens). ``AsyncLLMEngine.hold`` (an ``asyncio.Event`` or None)
keeps every request open until it is set.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

_ENGINE_ARGS = {"model", "tokenizer", "tensor_parallel_size", "dtype", "gpu_memory_utilization", "max_model_len",
                "enable_prefix_caching", "seed", "enforce_eager", "worker_extension_cls", "logprobs_mode",
                "distributed_executor_backend", "trust_remote_code", "disable_log_stats", "enable_chunked_prefill",
                "max_num_batched_tokens"}
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


class AsyncEngineArgs:
    def __init__(self, model: str, **kwargs):
        unknown = set(kwargs) - _ENGINE_ARGS
        if unknown:
            raise TypeError(f"AsyncEngineArgs got unexpected arguments {sorted(unknown)}")
        self.kwargs = {"model": model, **kwargs}


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
    finish_reason: str | None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool


class _Worker:
    """What vLLM mixes a worker extension into: ``rank``, ``device`` and ``reload_weights``."""

    def __init__(self, rank: int):
        self.rank, self.device = rank, "cpu"
        self.loaded: list[list[tuple[str, object]]] = []

    def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
        self.loaded.append([(name, tensor.clone()) for name, tensor in weights_iterator])


@dataclass
class _ModelConfig:
    max_model_len: int


class AsyncLLMEngine:
    instances: list = []

    def __init__(self, args: AsyncEngineArgs):
        kwargs = args.kwargs
        self.kwargs = kwargs
        self.model_config = _ModelConfig(kwargs.get("max_model_len") or 64)
        self.workers = []
        if kwargs.get("worker_extension_cls"):
            import importlib

            module, _, name = kwargs["worker_extension_cls"].rpartition(".")
            cls = type("Worker", (_Worker, getattr(importlib.import_module(module), name)), {})
            self.workers = [cls(rank) for rank in range(kwargs.get("tensor_parallel_size", 1))]
        self.requests: list[str] = []
        self.running = 0
        self.prefix_resets = 0
        self.offset = 0
        self.hold: asyncio.Event | None = None
        self.dead = False
        AsyncLLMEngine.instances.append(self)

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs):
        return cls(engine_args)

    async def generate(self, prompt, sampling_params, request_id):
        ids = prompt["prompt_token_ids"]
        params = sampling_params
        if len(ids) + params.max_tokens > self.model_config.max_model_len:
            raise ValueError("prompt + max_tokens exceeds max_model_len")
        if request_id in self.requests:
            raise ValueError(f"request id {request_id} already used")
        self.requests.append(request_id)
        self.running += 1
        try:
            if self.hold is not None:
                await self.hold.wait()
            tokens, logprobs, reason = [], [], "length"
            temp = params.temperature or 1.0
            for t in range(params.max_tokens):
                token = (ids[-1] + t + 1 + (params.seed or 0) + self.offset) % 97
                tokens.append(token)
                logprobs.append({token: Logprob(-0.1 * (t + 1) / temp, 1)})
                if token in params.stop_token_ids:
                    reason = "stop"
                    break
                yield RequestOutput(request_id, list(ids), [CompletionOutput(0, list(tokens), list(logprobs), None)],
                                    False)
                await asyncio.sleep(0)
            yield RequestOutput(request_id, list(ids), [CompletionOutput(0, tokens, logprobs, reason)], True)
        finally:
            self.running -= 1

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        # every worker at once, as vLLM's ranks do (they may all have to join one group)
        results = await asyncio.gather(*[asyncio.to_thread(getattr(w, method), *args, **(kwargs or {}))
                                         for w in self.workers])
        if self.workers and self.workers[0].loaded:
            self.offset = int(sum(float(t.flatten()[0]) for _, t in self.workers[0].loaded[-1]))
        return results

    async def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        self.prefix_resets += 1
        return True

    async def check_health(self):
        if self.dead:
            raise RuntimeError("EngineCore encountered an issue")

    def shutdown(self, timeout=None):
        pass


__all__ = ["AsyncEngineArgs", "AsyncLLMEngine", "Logprob", "SamplingParams"]
