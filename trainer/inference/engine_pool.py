"""The run's vLLM engine actors, kept alive: a Ray actor that owns them and replaces one that died.

Rollout workers reach an engine through :class:`~repogym.trainer.inference.RayEngineClient`; when its actor
has died the client asks the pool for a replacement (:meth:`EnginePool.replace`), and however many clients saw
the same death, one new engine is started. A new engine starts from the model folder (policy version 0) and
says so in the version it records with each completion, so the trainer's staleness bound drops what it makes
until the next weight sync. ``restarts`` counts replacements: the trainer rebuilds its weight-sync group
(which included the dead actor's ranks) when it changes, and that sync brings the new engine up to date.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from repogym.trainer.inference.vllm_engine import VLLMEngineConfig, make_vllm_actor

log = logging.getLogger(__name__)


class EnginePool:
    """``count`` engine actors of one config; meant to run as a (threaded) Ray actor."""

    def __init__(self, config: VLLMEngineConfig, count: int, num_cpus: float | None = None, num_gpus: float = 1.0):
        self.config, self.num_cpus, self.num_gpus = config, num_cpus, num_gpus
        self._handles = [self._start() for _ in range(count)]
        self._restarts = 0
        self._lock = threading.Lock()

    def _start(self):
        return make_vllm_actor(self.config, self.num_cpus, self.num_gpus)

    def handles(self) -> list[Any]:
        """The live engine handles, in a fixed order (a replacement takes its predecessor's place)."""
        return list(self._handles)

    def restarts(self) -> int:
        """How many engines have been replaced so far."""
        return self._restarts

    def replace(self, index: int, dead_actor_id: str) -> Any:
        """The engine at ``index``, started anew if it is still the actor ``dead_actor_id`` (a client saw it die)."""
        import ray

        with self._lock:
            if self._handles[index]._actor_id.hex() == dead_actor_id:
                try:
                    ray.kill(self._handles[index], no_restart=True)
                except Exception as exc:  # noqa: BLE001 - Ray: the dead actor is already gone (the expected case)
                    log.debug("engine %d: killing the dead actor failed (%s); starting its replacement", index, exc)
                self._handles[index] = self._start()
                self._restarts += 1
            return self._handles[index]

    def check(self, timeout_s: float = 60) -> int:
        """Ask every engine whether it is alive; replace those that are not. Returns ``restarts``."""
        import ray

        for index, handle in enumerate(self.handles()):
            try:
                ray.get(handle.check_health.remote(), timeout=timeout_s)
            except Exception as exc:  # noqa: BLE001 - Ray/vLLM: dead, hung, or its engine core died (answers an error)
                log.warning("engine %d failed its health check (%s): replacing it", index, exc)
                self.replace(index, handle._actor_id.hex())
        return self._restarts


def start_engine_pool(config: VLLMEngineConfig, count: int, num_cpus: float | None = None, num_gpus: float = 1.0):
    """An :class:`EnginePool` as a Ray actor (it holds no resources itself; its engines hold theirs: ``num_gpus``
    each where the cluster has GPUs)."""
    import ray

    return ray.remote(EnginePool).options(num_cpus=0, max_concurrency=16).remote(config, count, num_cpus, num_gpus)


def pool_client(pool, index: int, handle, timeout_s: float | None = 600):
    """A :class:`~repogym.trainer.inference.RayEngineClient` on ``handle`` that asks ``pool`` for a replacement
    when the actor dies."""
    import ray

    from repogym.trainer.inference import RayEngineClient

    client = RayEngineClient(handle, timeout_s=timeout_s)
    client.replace = lambda: ray.get(pool.replace.remote(index, client.handle._actor_id.hex()))
    return client


__all__ = ["EnginePool", "pool_client", "start_engine_pool"]
