"""A vLLM engine on GPU behind the :class:`repogym.agents.policy.Engine` protocol, meant to run as a Ray actor.

Written against vLLM's documented offline API: ``vllm.LLM`` with ``TokensPrompt`` inputs (token ids in,
token ids out, so what the policy saw is exactly what the trainer trains on), ``SamplingParams`` with
``logprobs=0`` (the sampled token's logprob), and ``LLM.collective_rpc`` on a worker extension to load
new weights on every tensor-parallel rank. ``logprobs_mode="processed_logprobs"`` makes vLLM return
logprobs after temperature, the distribution the learner's importance ratios are taken against.

Rollout workers call ``generate`` concurrently; a batching thread gathers the requests that arrive
within ``batch_wait_s`` into one ``LLM.generate`` call, so vLLM batches across episodes.
"""

from __future__ import annotations

import dataclasses

import queue
import threading
from dataclasses import dataclass
from typing import Any

from repogym.agents.policy import Completion, SamplingParams

WORKER_EXTENSION = "repogym.trainer.inference.vllm_worker.WeightSyncExtension"


@dataclass
class VLLMEngineConfig:
    """One vLLM engine (one actor, ``tensor_parallel_size`` GPUs)."""

    model: str
    """A local model folder (Hugging Face layout); nothing is downloaded."""
    tensor_parallel_size: int = 1
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5
    """Share of each GPU's memory vLLM may take (weights + KV cache); leave room for a colocated learner."""
    max_model_len: int | None = None
    """Context length; None: the model's own."""
    enable_prefix_caching: bool = True
    """Multi-turn prompts share their history: cached prefixes skip most of the prefill."""
    seed: int = 0
    enforce_eager: bool = False
    """Skip CUDA graph capture (faster start, slower decoding); handy for tests and tiny models."""
    max_concurrency: int = 64
    """Concurrent ``generate`` calls the actor accepts (one per rollout environment that shares it)."""
    batch_wait_s: float = 0.005
    """How long the batching thread waits for more requests before calling vLLM."""

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.LLM``."""
        kwargs: dict[str, Any] = {
            "model": self.model, "tensor_parallel_size": self.tensor_parallel_size, "dtype": self.dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization, "enable_prefix_caching": self.enable_prefix_caching,
            "seed": self.seed, "enforce_eager": self.enforce_eager, "worker_extension_cls": WORKER_EXTENSION,
            "logprobs_mode": "processed_logprobs",
        }
        if self.max_model_len:
            kwargs["max_model_len"] = self.max_model_len
        if self.tensor_parallel_size > 1:
            kwargs["distributed_executor_backend"] = "ray"  # its workers go into this actor's placement group
        return kwargs


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    done: threading.Event
    result: Completion | None = None
    error: BaseException | None = None


class VLLMEngine:
    """``vllm.LLM`` serving token-id prompts, with per-request seeds and in-place weight updates."""

    def __init__(self, config: VLLMEngineConfig, llm=None):
        import vllm

        self.config = config
        self._vllm = vllm
        self.llm = llm if llm is not None else vllm.LLM(**config.engine_kwargs())
        self.max_model_len = self._max_model_len()
        self.version = 0
        self._lock = threading.Lock()  # vllm.LLM is not thread-safe: generate and weight loads take turns
        self._requests: queue.Queue[_Request] = queue.Queue()
        threading.Thread(target=self._serve, daemon=True, name="vllm-batcher").start()

    @classmethod
    def from_config(cls, **fields: Any) -> "VLLMEngine":
        """An engine from ``VLLMEngineConfig`` fields (the ``vllm`` entry of the engine registry)."""
        return cls(VLLMEngineConfig(**fields))

    def _max_model_len(self) -> int | None:
        try:
            return int(self.llm.llm_engine.model_config.max_model_len)
        except AttributeError:
            return self.config.max_model_len

    def get_version(self) -> int:
        """The policy version of the loaded weights."""
        return self.version

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt; concurrent callers are batched into one vLLM call."""
        requests = [_Request(list(p), params, threading.Event()) for p in prompts]
        for r in requests:
            self._requests.put(r)
        for r in requests:
            r.done.wait()
            if r.error is not None:
                raise r.error
        return [r.result for r in requests]

    def _serve(self) -> None:
        while True:
            batch = [self._requests.get()]
            try:
                while True:
                    batch.append(self._requests.get(timeout=self.config.batch_wait_s))
            except queue.Empty:
                pass
            try:
                with self._lock:
                    results = self._generate_batch(batch)
                    version = self.version  # the weights that made these tokens: a push waits for the lock
                for r, c in zip(batch, results):
                    r.result = dataclasses.replace(c, version=version)
            except BaseException as exc:  # handed to every waiting caller, never lost in this thread
                for r in batch:
                    r.error = exc
            for r in batch:
                r.done.set()

    def _generate_batch(self, batch: list[_Request]) -> list[Completion]:
        from vllm.inputs import TokensPrompt

        results: list[Completion | None] = [None] * len(batch)
        todo, inputs, params = [], [], []
        for i, r in enumerate(batch):
            room = r.params.max_new_tokens
            if self.max_model_len:
                room = min(room, self.max_model_len - len(r.prompt))
            if room <= 0:
                results[i] = Completion([], [], "length")
                continue
            todo.append(i)
            inputs.append(TokensPrompt(prompt_token_ids=r.prompt))
            params.append(self._vllm.SamplingParams(
                n=1, temperature=r.params.temperature, top_p=r.params.top_p, max_tokens=room,
                stop_token_ids=list(r.params.stop_token_ids), seed=r.params.seed, logprobs=0, detokenize=False))
        if todo:
            outputs = self.llm.generate(inputs, sampling_params=params, use_tqdm=False)
            for i, out in zip(todo, outputs):
                results[i] = _completion(out.outputs[0])
        return results  # type: ignore[return-value]

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """Load a full state dict (Hugging Face names) on every rank; cached prefixes of old weights go."""
        named = [(name, tensor.detach().cpu()) for name, tensor in state_dict.items()]
        with self._lock:
            self.llm.collective_rpc("load_named_weights", args=(named,))
            self.llm.reset_prefix_cache()
            self.version = version


def _completion(output) -> Completion:
    ids = list(output.token_ids)
    logprobs = [float(step[token].logprob) for step, token in zip(output.logprobs or [], ids)]
    if len(logprobs) != len(ids):
        raise RuntimeError(f"vLLM returned {len(logprobs)} logprobs for {len(ids)} tokens")
    return Completion(ids, logprobs, "stop" if output.finish_reason == "stop" else "length")


def vllm_placement_group(tensor_parallel_size: int):
    """A Ray placement group of one GPU per tensor-parallel rank, packed on as few nodes as possible."""
    import ray
    from ray.util.placement_group import placement_group

    group = placement_group([{"GPU": 1, "CPU": 1}] * tensor_parallel_size, strategy="PACK")
    ray.get(group.ready())
    return group


def make_vllm_actor(config: VLLMEngineConfig):
    """Start a :class:`VLLMEngine` as a Ray actor: one GPU, or a placement group for tensor parallelism."""
    import ray

    actor = ray.remote(VLLMEngine)
    if config.tensor_parallel_size == 1:
        return actor.options(num_gpus=1, max_concurrency=config.max_concurrency).remote(config)
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = vllm_placement_group(config.tensor_parallel_size)
    # The actor itself holds no GPU: vLLM's ray executor starts one worker per bundle of the captured group.
    strategy = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=0,
                                                placement_group_capture_child_tasks=True)
    return actor.options(num_cpus=0, num_gpus=0, scheduling_strategy=strategy,
                         max_concurrency=config.max_concurrency).remote(config)


__all__ = ["VLLMEngine", "VLLMEngineConfig", "make_vllm_actor", "vllm_placement_group"]
