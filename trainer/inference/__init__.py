"""Inference engines for rollouts: a registry by name, and a client for an engine living in a Ray actor.

``hf`` is transformers ``generate`` (CPU, or one GPU), in-process in each rollout worker. ``vllm`` is a
vLLM engine on GPU, run as Ray actors that rollout workers share; the learner pushes new weights to them
after each update. Both implement :class:`repogym.agents.policy.Engine`.
"""

from __future__ import annotations

from typing import Any

from repogym.agents.policy import Completion, SamplingParams
from repogym.envs.registry import Registry

ENGINES: Registry[Any] = Registry("inference engine", {
    "hf": "repogym.agents.hf:HFEngine.from_pretrained",
    "vllm": "repogym.trainer.inference.vllm_engine:VLLMEngine.from_config",
})


def make_engine(name: str, **kwargs: Any):
    """An in-process engine by registry name (``hf`` takes ``path``; ``vllm`` a ``VLLMEngineConfig``)."""
    return ENGINES.resolve(name)(**kwargs)


class RayEngineClient:
    """The :class:`~agents.policy.Engine` protocol over a Ray actor handle of an engine.

    Each call blocks on the actor; many rollout workers may share one engine actor (vLLM batches their
    concurrent requests when the actor has ``max_concurrency`` > 1 and the engine is async, else it
    serves them in turn).
    """

    def __init__(self, handle):
        import ray

        self._ray, self.handle = ray, handle

    @property
    def version(self) -> int:
        """The engine's policy version now (asked each time: the learner may have pushed new weights)."""
        return self._ray.get(self.handle.get_version.remote())

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return self._ray.get(self.handle.generate.remote(prompts, params))

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        self._ray.get(self.handle.update_weights.remote(state_dict, version))


def push_weights(handles: list, state_dict: dict[str, Any], version: int) -> None:
    """Send new weights to engine actors (one copy in the Ray object store, shared) and wait for all."""
    if not handles:
        return
    import ray

    ref = ray.put(state_dict)
    ray.get([h.update_weights.remote(ref, version) for h in handles])


__all__ = ["ENGINES", "RayEngineClient", "make_engine", "push_weights"]
