"""Who moves the learner's weights to whoever generates: one object per ``inference.engine``, chosen once.

The trainer asks :data:`WEIGHT_MOVERS` for the ``inference.engine``'s class once, builds it, and then only calls the
:class:`WeightMover` protocol: ``engine_handles()`` and ``engine_pool()`` for the rollout workers' spec, ``push``
after every update, ``close`` at the end. It never branches on the engine's name.

- ``hf`` (:class:`HFWeights`): every rollout worker generates in-process with transformers, so every worker gets the
  learner's full state dict (through the fleet). There are no engine actors.
- ``vllm`` (:class:`VLLMWeights`): the engines are Ray actors owned by an
  :class:`~repogym.trainer.inference.engine_pool.EnginePool` (started on first use; it replaces an engine that dies).
  The learner (its rank 0) streams the weights in bf16 buckets over a kept
  :class:`~repogym.trainer.inference.EngineSync` group; rollout workers, which only call the engines, receive
  nothing. When an engine was replaced (or dies during the sync) the group is made anew over the live engines,
  which brings a new engine to the current weights; a sync that fails twice is an ``InfraError``.

What a push guarantees: when it returns, every engine generates with ``version`` (a replaced engine included).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from repogym.envs.core.errors import InfraError
from repogym.envs.core.registry import Registry

if TYPE_CHECKING:
    from repogym.trainer.fleet import Fleet
    from repogym.trainer.learner import LearnerConfig, PolicyLearner


@dataclass
class InferenceConfig:
    """Where rollouts are generated."""

    engine: str = "hf"
    """``hf`` (transformers generate inside each rollout worker) or ``vllm`` (GPU engines as Ray actors); see
    :data:`WEIGHT_MOVERS`."""
    num_engines: int = 1
    """vLLM engine actors (each on ``tensor_parallel_size`` GPUs); workers share them round-robin."""
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    dtype: str = "bfloat16"
    gpus_per_engine: float = 1.0
    """Ray GPU share each engine actor holds (tensor_parallel_size 1). Below 1 lets it share a device on purpose
    (one GPU: 0.5 here and ``learner.gpus_per_rank: 0.5``, with ``gpu_memory_utilization`` leaving the learner
    room); Ray then never places anything else there by accident."""


@runtime_checkable
class WeightMover(Protocol):
    """The owner of the inference engines' weights for one engine kind."""

    engine_actors: bool
    """Whether the engines are Ray actors that Ray places on GPUs (so a GPU learner beside them must hold its GPU
    as a Ray resource, and the fleet must be Ray's)."""

    def engine_handles(self) -> list[Any]:
        """The live engine actors' handles for the rollout workers (empty: each worker generates in-process)."""

    def engine_pool(self) -> Any:
        """The actor that replaces a dead engine (None: no engine actors)."""

    def push(self, learner: PolicyLearner, fleet: Fleet, version: int) -> dict[str, float]:
        """The learner's weights to whoever generates, as policy ``version``; the ``weight_sync/`` metrics (and
        ``charts/engine_restarts`` where engines can be replaced)."""

    def close(self) -> None:
        """Forget the weight-sync group, if any (the engines stay up until Ray shuts down)."""


class HFWeights:
    """``hf``: the fleet's in-process transformers engines get the learner's full state dict."""

    engine_actors = False

    def __init__(self, inference: InferenceConfig, learner: LearnerConfig, model_path: str, seed: int):
        """Nothing of the config is kept: the rollout workers load ``model_path`` themselves."""

    def engine_handles(self) -> list[Any]:
        return []

    def engine_pool(self) -> None:
        return None

    def push(self, learner: PolicyLearner, fleet: Fleet, version: int) -> dict[str, float]:
        start = time.monotonic()
        fleet.push_weights(learner.policy_state(), version)
        return {"weight_sync/seconds": time.monotonic() - start}

    def close(self) -> None:
        """Nothing is kept open."""


class VLLMWeights:
    """``vllm``: an engine pool of Ray actors, and a kept sync group from the learner's rank 0 to every engine."""

    engine_actors = True

    def __init__(self, inference: InferenceConfig, learner: LearnerConfig, model_path: str, seed: int):
        self.inference, self.learner_config = inference, learner
        self.model_path, self.seed = model_path, seed
        self._pool: Any = None
        self._sync = None
        self._restarts = 0
        """The pool's ``restarts`` when ``_sync`` was made: a change means an engine was replaced since."""

    def engine_pool(self) -> Any:
        """The pool actor owning the vLLM engines (started on first use)."""
        if self._pool is None:
            from repogym.trainer.inference.engine_pool import start_engine_pool
            from repogym.trainer.inference.vllm_engine import VLLMEngineConfig

            i = self.inference
            config = VLLMEngineConfig(model=self.model_path, tensor_parallel_size=i.tensor_parallel_size,
                                      dtype=i.dtype, gpu_memory_utilization=i.gpu_memory_utilization, seed=self.seed)
            self._pool = start_engine_pool(config, i.num_engines, num_gpus=i.gpus_per_engine)
        return self._pool

    def engine_handles(self) -> list[Any]:
        import ray

        return ray.get(self.engine_pool().handles.remote())

    def push(self, learner: PolicyLearner, fleet: Fleet, version: int) -> dict[str, float]:
        """Stream the weights over the kept group (made anew when an engine was replaced); one retry over a new
        group, after the pool has checked every engine."""
        import ray

        from repogym.trainer.inference import EngineSync

        pool = self.engine_pool()
        restarts = ray.get(pool.restarts.remote())
        for attempt in (0, 1):
            if self._sync is None or restarts != self._restarts:
                self.close()
                # NCCL cannot join two ranks on one device: a learner sharing its GPU with an engine syncs over gloo.
                shared = self.learner_config.gpus_per_rank < 1 or self.inference.gpus_per_engine < 1
                device = "cpu" if shared else str(learner.device)
                self._sync = EngineSync(self.engine_handles(), host=learner.sync_host, device=device)
                self._restarts = restarts
            send: Callable[[Any], dict[str, float]] = lambda group: learner.send_weights(group, version)  # noqa: E731
            try:
                return {**self._sync.sync_with(send, version), "charts/engine_restarts": restarts}
            except Exception as exc:  # noqa: BLE001 - a dead engine fails the sync in many ways (Ray, gloo, NCCL)
                if attempt == 1:
                    raise InfraError("weight sync", f"the engines did not take version {version}: {exc}") from exc
                restarts = ray.get(pool.check.remote())
                self.close()
        return {}  # not reached: the second attempt returns or raises

    def close(self) -> None:
        """Forget the group: the next push makes a new one (and the learner's sender reconnects to it)."""
        self._sync = None


WEIGHT_MOVERS: Registry[type[WeightMover]] = Registry("inference engine", {"hf": HFWeights, "vllm": VLLMWeights})
"""``inference.engine`` -> its :class:`WeightMover` class, built as ``cls(inference, learner, model_path, seed)``;
the class's ``engine_actors`` is known before anything starts."""


def make_weight_mover(inference: InferenceConfig, learner: LearnerConfig, model_path: str, seed: int) -> WeightMover:
    """The weight mover of ``inference.engine`` (starts nothing: vLLM's engines start on first use)."""
    return WEIGHT_MOVERS.resolve(inference.engine)(inference, learner, model_path, seed)


__all__ = ["HFWeights", "InferenceConfig", "VLLMWeights", "WEIGHT_MOVERS", "WeightMover", "make_weight_mover"]
