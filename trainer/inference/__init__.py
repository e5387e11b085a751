"""Inference engines for rollouts: a registry by name, a client for an engine in a Ray actor, and weight sync.

``hf`` is transformers ``generate`` (CPU, or one GPU), in-process in each rollout worker. ``vllm`` is vLLM's
async engine (GPU, or vLLM's CPU build), run as Ray actors that rollout workers share. Both implement
:class:`repogym.agents.policy.Engine`. Who brings them the learner's weights is one object per engine kind
(:mod:`repogym.trainer.inference.weights`).

After each update the learner's weights go to the vLLM actors through :class:`EngineSync`: one
:class:`~repogym.trainer.inference.weight_sync.SyncGroup` (rank 0 the sender, then every tensor-parallel
rank of every engine), made on the first sync and kept; each sync is a bucketed broadcast.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from repogym.agents.policy import Completion, SamplingParams
from repogym.envs.core.errors import InfraError
from repogym.envs.core.registry import Registry

ENGINES: Registry[Any] = Registry("inference engine", {
    "hf": "repogym.agents.hf:HFEngine.from_pretrained",
    "vllm": "repogym.trainer.inference.vllm_engine:VLLMEngine.from_config",
})


def make_engine(name: str, **kwargs: Any):
    """An in-process engine by registry name (``hf`` takes ``path``; ``vllm`` ``VLLMEngineConfig`` fields)."""
    return ENGINES.resolve(name)(**kwargs)


_UNKNOWN = object()  # not asked yet


class RayEngineClient:
    """The :class:`~repogym.agents.policy.Engine` protocol over a Ray actor handle of an engine.

    Each call blocks on the actor; many rollout workers may share one engine actor (a threaded actor with
    ``max_concurrency`` > 1; vLLM batches their requests continuously). A call that gets no answer within
    ``timeout_s`` raises :class:`~repogym.envs.core.errors.InfraError` (a hung engine is an error, not a hang). When
    the actor has died, ``replace`` (if given) is asked for a new handle and the lost call is retried once on
    it; without ``replace`` the death is an ``InfraError``. ``replace`` is the owner's: it starts (or returns an
    already started) replacement and brings it to the current weights; a weight-sync group that included the
    dead actor must be made anew (a new :class:`EngineSync` over the new handles).
    """

    def __init__(self, handle, replace: Callable[[], Any] | None = None, timeout_s: float | None = 600):
        import ray

        self._ray, self.handle = ray, handle
        self.replace, self.timeout_s = replace, timeout_s
        self._lock = threading.Lock()
        self._max_model_len: Any = _UNKNOWN

    def _call(self, method: str, *args: Any) -> Any:
        from ray.exceptions import GetTimeoutError, RayActorError

        handle = self.handle
        for attempt in (0, 1):
            try:
                return self._ray.get(getattr(handle, method).remote(*args), timeout=self.timeout_s)
            except GetTimeoutError as exc:
                raise InfraError("vllm engine actor", f"{method} got no answer within {self.timeout_s} s") from exc
            except RayActorError as exc:
                if self.replace is None or attempt == 1:
                    raise InfraError("vllm engine actor", f"{method}: the engine actor died: {exc}") from exc
                handle = self._replaced(handle)

    def _replaced(self, dead) -> Any:
        """A live handle in place of ``dead`` (one replacement however many threads saw it die)."""
        with self._lock:
            if self.handle is dead:
                self.handle = self.replace()
            return self.handle

    @property
    def version(self) -> int:
        """The engine's policy version now (asked each time: the learner may have sent new weights)."""
        return self._call("get_version")

    @property
    def max_model_len(self) -> int | None:
        """The engine's context limit (asked once: it does not change)."""
        if self._max_model_len is _UNKNOWN:
            self._max_model_len = self._call("get_max_model_len")
        return self._max_model_len

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return self._call("generate", prompts, params)

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        self._call("update_weights", state_dict, version)

    def check_health(self) -> bool:
        """True when the engine answers and its engine core is alive (raises ``InfraError`` otherwise)."""
        return self._call("check_health")


class EngineSync:
    """Weight sync from a sender (rank 0) to vLLM engine actors over one kept :class:`SyncGroup`.

    The group is made on first use: its world size is 1 + the engines' ranks (each engine's ``num_ranks()``).
    This side starts the engines' receives; the sender, rank 0, is whoever holds the weights (the learner, or its
    rank 0 actor: :meth:`sync_with` is given the function that sends), on ``host`` (default: this node). The
    sender keeps its connection while the group is the same. The handles are fixed: after an engine is replaced,
    make a new ``EngineSync`` (a new group).
    """

    def __init__(self, handles: list, *, backend: str | None = None, host: str | None = None, port: int | None = None,
                 device: str = "cpu", timeout_s: float = 600):
        self.handles = list(handles)
        self.backend, self.host, self.port = backend, host, port
        self.device, self.timeout_s = device, timeout_s
        """``device``: where the sender's tensors are (``cuda...``: an NCCL group, else gloo)."""
        self._group = None
        self._first_ranks: list[int] = []

    @property
    def group(self):
        """The :class:`SyncGroup` (asks the engines for their rank counts the first time)."""
        if self._group is None:
            import ray

            from repogym.trainer.inference.weight_sync import SyncGroup, free_port

            ranks = ray.get([h.num_ranks.remote() for h in self.handles], timeout=self.timeout_s)
            self._first_ranks = [1 + sum(ranks[:i]) for i in range(len(ranks))]
            host = self.host or (ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1")
            backend = self.backend or ("nccl" if str(self.device).startswith("cuda") else "gloo")
            self._group = SyncGroup(host, self.port or free_port(), 1 + sum(ranks), backend)
        return self._group

    def sync_with(self, send: Callable[[Any], dict[str, float]], version: int) -> dict[str, float]:
        """Start every engine's receive, call ``send(group)`` (it sends as rank 0 and returns its metrics), wait."""
        import ray

        group = self.group
        receiving = [h.receive_weights.remote(group, first, version)
                     for h, first in zip(self.handles, self._first_ranks)]
        metrics = dict(send(group))  # if it fails, the engines' receives fail too, after the group's timeout
        counts = ray.get(receiving, timeout=self.timeout_s)
        metrics["weight_sync/tensors"] = float(min(counts)) if counts else 0.0
        return metrics


__all__ = ["ENGINES", "EngineSync", "RayEngineClient", "make_engine"]
