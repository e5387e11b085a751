"""The learner over several ranks: ``learner.world_size`` Ray actors training one FSDP2-sharded policy.

Each rank is a Ray actor holding one GPU (CPU and gloo where there is none), so the learner's devices are
Ray resources and no inference engine is placed on them. The ranks sit in one placement group (packed on as
few nodes as possible) and join a default process group at rank 0's address. Every call goes to all ranks
(FSDP's collectives need each of them); results come from rank 0. :class:`LearnerGroup` is a
:class:`~repogym.trainer.learner.PolicyLearner`, as :class:`~repogym.trainer.learner.Learner` is.

The algorithm is built once, by the trainer, and handed to every rank at setup: each rank trains its own copy (its
parameters, PPO's value head, are trained beside the rank's policy shard). Any other algorithm given to
``train_step`` (the SFT warm start's) must have no parameters of its own, and travels with the step.
"""

from __future__ import annotations

import os
from typing import Any

from repogym.trainer.algorithms.base import Algorithm
from repogym.trainer.algorithms.common import Sample
from repogym.trainer.learner import Learner, LearnerConfig


class LearnerRank:
    """One rank (run as a Ray actor): its model shard, its copy of the algorithm, its optimiser shard."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.learner: Learner | None = None
        self.algorithm: Algorithm | None = None

    def address(self) -> tuple[str, int]:
        """This actor's node address and a free port there (rank 0's become the process group's rendezvous)."""
        import ray

        from repogym.trainer.inference.weight_sync import free_port

        return ray.util.get_node_ip_address(), free_port()

    def setup(self, host: str, port: int, model_path: str, config: LearnerConfig, algorithm: Algorithm,
              pad_id: int, reference: bool) -> int:
        """Join the process group, load the model in fp32 and shard it; ``algorithm`` (this rank's copy of the
        trainer's) is the one :meth:`train_step` uses. Returns the rank."""
        import torch
        import torch.distributed as dist
        from transformers import AutoModelForCausalLM

        os.environ.update(MASTER_ADDR=host, MASTER_PORT=str(port))
        cuda = torch.cuda.is_available() and config.device != "cpu"
        if cuda:
            torch.cuda.set_device(0)  # Ray made this actor's one GPU the only visible one
        else:
            torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        dist.init_process_group("nccl" if cuda else "gloo", rank=self.rank, world_size=self.world)
        model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True, dtype=torch.float32)
        self.algorithm = algorithm
        self.learner = Learner(model, config, pad_id, list(algorithm.parameters()), reference=reference)
        return self.rank

    def train_step(self, samples: list[Sample], algorithm: Algorithm | None = None) -> dict[str, float]:
        """One update with this rank's algorithm, or with ``algorithm`` (one without parameters of its own)."""
        return self.learner.train_step(samples, self.algorithm if algorithm is None else algorithm)

    def call(self, method: str, *args: Any) -> Any:
        """A learner method on this rank; only rank 0's result is kept (the others' are None)."""
        result = getattr(self.learner, method)(*args)
        return result if self.rank == 0 else None

    def shutdown(self) -> None:
        import torch.distributed as dist

        if self.learner is not None:
            self.learner.close()
        if dist.is_initialized():
            dist.destroy_process_group()


class LearnerGroup:
    """``world_size`` :class:`LearnerRank` actors behind the
    :class:`~repogym.trainer.learner.PolicyLearner` protocol."""

    def __init__(self, model_path: str, config: LearnerConfig, algorithm: Algorithm, pad_id: int,
                 reference: bool, num_cpus_per_rank: float = 1.0):
        import ray
        import torch
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.config, self._ray = config, ray
        self.world = config.world_size
        gpu = torch.cuda.is_available() and config.device != "cpu"
        gpus = config.gpus_per_rank if gpu else 0
        bundle = {"CPU": num_cpus_per_rank, **({"GPU": gpus} if gpus else {})}
        self.placement = placement_group([bundle] * self.world, strategy="PACK")
        ray.get(self.placement.ready())
        actor = ray.remote(LearnerRank)
        self.ranks = [actor.options(num_cpus=num_cpus_per_rank, num_gpus=gpus,
                                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                                        placement_group=self.placement, placement_group_bundle_index=r)
                                    ).remote(r, self.world) for r in range(self.world)]
        host, port = ray.get(self.ranks[0].address.remote())
        self.sync_host = host  # rank 0 sends the weights to the engines
        self.device = "cuda" if gpu else "cpu"
        self.algorithm = algorithm
        ray.get([a.setup.remote(host, port, model_path, config, algorithm, pad_id, reference) for a in self.ranks])

    def _all(self, method: str, *args: Any) -> Any:
        return self._ray.get([getattr(a, method).remote(*args) for a in self.ranks])[0]

    def _call(self, method: str, *args: Any) -> Any:
        return self._all("call", method, *args)

    def train_step(self, samples: list[Sample], algorithm: Algorithm) -> dict[str, float]:
        """One update on every rank. The algorithm the group was built with: each rank trains its own copy of it.
        Any other (the SFT warm start's) travels with the step, and must have no parameters of its own (the
        ranks' optimisers would not hold them)."""
        ref = self._ray.put(samples)
        if algorithm is self.algorithm:
            return self._all("train_step", ref)
        if list(algorithm.parameters()):
            raise ValueError(f"LearnerGroup.train_step: algorithm {algorithm.name!r} has parameters of its own; "
                             f"only the group's algorithm ({self.algorithm.name!r}) may")
        return self._all("train_step", ref, algorithm)

    def send_weights(self, group, version: int) -> dict[str, float]:
        """Rank 0 streams the gathered weights to ``group``; the others help gather each tensor."""
        return self._all("call", "send_weights", group, version)

    def policy_state(self):
        return self._call("policy_state")

    def set_lr(self, lr: float | None) -> float:
        return self._call("set_lr", lr)

    def finish_warm_start(self) -> None:
        self._call("finish_warm_start")

    def export(self, out_dir, tokenizer=None) -> None:
        self._call("export", str(out_dir))
        if tokenizer is not None:
            tokenizer.save_pretrained(out_dir)

    def state_dict(self) -> dict[str, Any]:
        return self._call("state_dict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ref = self._ray.put(state)
        self._all("call", "load_state_dict", ref)

    def close(self) -> None:
        try:
            self._ray.get([a.shutdown.remote() for a in self.ranks], timeout=30)
        finally:
            for a in self.ranks:
                self._ray.kill(a)
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement)


__all__ = ["LearnerGroup", "LearnerRank"]
