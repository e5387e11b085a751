"""The vLLM engine against a stand-in of vLLM's async API (tests/fakes/vllm): no GPU, no vLLM needed.

Only what vLLM's CPU build cannot show is tested here (see the stand-in's docstring); the real engine is
tested in tests/test_vllm_real.py.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from repogym.agents.policy import SamplingParams
from repogym.envs.core.errors import ConfigError, InfraError

FAKES = str(Path(__file__).parent / "fakes")


@pytest.fixture
def fake_vllm(monkeypatch):
    """Import the stand-in as ``vllm`` (and drop it again afterwards)."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(FAKES)
    import vllm

    assert vllm.__file__.startswith(FAKES)
    vllm.AsyncLLMEngine.instances.clear()
    yield vllm
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        sys.modules.pop(name, None)


def _engine(**fields):
    from repogym.trainer.inference.vllm_engine import VLLMEngine, VLLMEngineConfig

    return VLLMEngine(VLLMEngineConfig(model="/models/tiny", **fields))


def test_engine_arguments_ask_for_processed_logprobs_the_extension_and_ray_for_tensor_parallelism(fake_vllm):
    engine = _engine(max_model_len=48)
    kwargs = engine.llm.kwargs
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["worker_extension_cls"] == "repogym.trainer.inference.vllm_worker.WeightSyncExtension"
    assert kwargs["max_model_len"] == 48 and "distributed_executor_backend" not in kwargs
    assert engine.max_model_len == 48 and engine.num_ranks() == 1
    tp = _engine(tensor_parallel_size=2)
    assert tp.llm.kwargs["tensor_parallel_size"] == 2 and tp.llm.kwargs["distributed_executor_backend"] == "ray"
    assert tp.num_ranks() == 2


def test_on_cpu_under_a_path_with_a_space_the_engine_runs_eagerly(fake_vllm, monkeypatch):
    """torch's C++ builder passes its folders unquoted to the linker: there vLLM must not compile kernels."""
    from repogym.trainer.inference import vllm_engine

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TORCHDYNAMO_DISABLE", raising=False)
    monkeypatch.setattr(vllm_engine, "_compiler_paths", lambda: ("/opt/env/torch", "/opt/env/include"))
    assert _engine().llm.kwargs["enforce_eager"] is False and "TORCHDYNAMO_DISABLE" not in os.environ
    monkeypatch.setattr(vllm_engine, "_compiler_paths", lambda: ("/opt/my env/torch", "/opt/env/include"))
    assert _engine().llm.kwargs["enforce_eager"] is True and os.environ["TORCHDYNAMO_DISABLE"] == "1"


def test_every_tensor_parallel_worker_joins_the_sync_group_at_its_own_rank(fake_vllm):
    from repogym.trainer.inference.weight_sync import SyncGroup, WeightReceiver, WeightSender, free_port

    engine = _engine(tensor_parallel_size=2)
    group = SyncGroup("127.0.0.1", free_port(), world_size=4)  # sender, a one-rank engine elsewhere, then these two
    other = threading.Thread(target=lambda: list(WeightReceiver(group, 1, timeout_s=30).receive()))
    other.start()
    counts = []
    receiving = threading.Thread(target=lambda: counts.append(engine.receive_weights(group, 2, version=5)))
    receiving.start()
    weights = [("model.embed_tokens.weight", torch.full((3, 2), 2.0)), ("lm_head.weight", torch.zeros(3, 2))]
    metrics = WeightSender(group, timeout_s=30).send(iter(weights))
    receiving.join(30)
    other.join(30)
    assert counts == [2] and engine.get_version() == 5 and engine.llm.prefix_resets == 1
    assert metrics["weight_sync/bytes"] == 24
    assert [w.rank for w in engine.llm.workers] == [0, 1]
    for worker in engine.llm.workers:  # both ranks got every tensor over the group (ranks 2 and 3)
        (loaded,) = worker.loaded
        assert [name for name, _ in loaded] == [name for name, _ in weights]
        assert torch.equal(loaded[0][1], torch.full((3, 2), 2.0, dtype=torch.bfloat16))


def test_a_failed_reload_still_reads_the_sync_to_its_end_and_keeps_the_old_version(fake_vllm):
    from repogym.trainer.inference.weight_sync import SyncGroup, WeightSender, free_port

    engine = _engine()

    def broken(weights_iterator=None, **kwargs):
        next(iter(weights_iterator))
        raise KeyError("model.unknown.weight")

    engine.llm.workers[0].reload_weights = broken
    group = SyncGroup("127.0.0.1", free_port(), world_size=2)
    errors = []

    def receive():
        try:
            engine.receive_weights(group, 1, version=3)
        except KeyError as exc:
            errors.append(exc)

    receiving = threading.Thread(target=receive)
    receiving.start()
    weights = [(f"w{i}", torch.full((64,), float(i))) for i in range(4)]  # 128 B each: one bucket apiece
    metrics = WeightSender(group, bucket_bytes=128, timeout_s=20).send(iter(weights))  # returns: no hang
    receiving.join(20)
    assert metrics["weight_sync/buckets"] == 4 and len(errors) == 1
    assert engine.get_version() == 0  # the failed update does not claim the new version
    assert engine.generate([[1]], SamplingParams(max_new_tokens=1, seed=0))[0].ids == [2]  # and lets requests in


def test_update_weights_goes_as_safetensors_bytes_to_every_rank(fake_vllm):
    engine = _engine(tensor_parallel_size=2)
    embed = torch.ones(3, 2)
    state = {"model.embed_tokens.weight": embed, "lm_head.weight": embed}  # tied: shared memory
    engine.update_weights(state, version=4)
    assert engine.get_version() == 4 and engine.llm.prefix_resets == 1
    for worker in engine.llm.workers:
        (loaded,) = worker.loaded
        assert sorted(name for name, _ in loaded) == sorted(state)
        assert all(torch.equal(t, embed) for _, t in loaded)


def test_an_update_waits_for_running_requests_and_holds_new_ones_back(fake_vllm):
    import asyncio

    engine = _engine(max_concurrency=8)
    hold = asyncio.Event()
    engine.llm.hold = hold
    first: list = []
    running = threading.Thread(target=lambda: first.extend(engine.generate([[5]], SamplingParams(max_new_tokens=2))))
    running.start()
    while engine.llm.running == 0:
        time.sleep(0.01)
    state = {"w": torch.full((2,), 1.0)}
    updating = threading.Thread(target=engine.update_weights, args=(state, 1))
    updating.start()
    time.sleep(0.2)
    assert engine.get_version() == 0  # the update waits for the running request
    later: list = []
    queued = threading.Thread(target=lambda: later.extend(engine.generate([[5]], SamplingParams(max_new_tokens=2))))
    queued.start()
    time.sleep(0.2)
    assert len(engine.llm.requests) == 1  # and holds the new one back
    engine.llm.hold = None
    engine._loop.call_soon_threadsafe(hold.set)
    for t in (running, updating, queued):
        t.join(10)
    assert first[0].ids == [6, 7] and first[0].version == 0  # old weights, recorded as such
    assert later[0].ids == [7, 8] and later[0].version == 1  # new weights (offset 1)


def test_generate_returns_tokens_logprobs_finish_reason_and_caps_length(fake_vllm):
    engine = _engine(max_model_len=10)
    stop = engine.generate([[5, 2]], SamplingParams(temperature=0.5, max_new_tokens=8, stop_token_ids=[5], seed=0))
    assert stop[0].ids == [3, 4, 5] and stop[0].finish_reason == "stop"
    assert stop[0].logprobs == pytest.approx([-0.2, -0.4, -0.6])
    capped = engine.generate([list(range(7))], SamplingParams(max_new_tokens=50))
    assert len(capped[0].ids) == 3 and capped[0].finish_reason == "length"
    full = engine.generate([list(range(10))], SamplingParams(max_new_tokens=5))
    assert full[0].ids == [] and full[0].finish_reason == "length" and full[0].version == 0


def test_a_failing_request_reaches_its_caller_and_the_engine_keeps_serving(fake_vllm):
    engine = _engine()
    real = engine.llm.generate

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    engine.llm.generate = broken
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.generate([[1]], SamplingParams(max_new_tokens=2))
    engine.llm.generate = real
    assert engine.generate([[1]], SamplingParams(max_new_tokens=2, seed=0))[0].ids == [2, 3]
    assert engine.check_health() is True
    engine.llm.dead = True
    with pytest.raises(RuntimeError, match="EngineCore"):
        engine.check_health()


def test_engine_registry_builds_by_name_and_lists_names_on_a_miss(fake_vllm):
    from repogym.trainer.inference import make_engine

    engine = make_engine("vllm", model="/models/tiny", enforce_eager=True)
    assert engine.llm.kwargs["enforce_eager"] is True
    with pytest.raises(ConfigError, match="unknown inference engine 'tgi': expected one of hf, vllm"):
        make_engine("tgi")


class _FlakyEngine:
    """An engine actor that can die or hang on request (for RayEngineClient; no vLLM involved)."""

    def __init__(self, name: str):
        self.name, self.version = name, 0

    def get_version(self) -> int:
        return self.version

    def generate(self, prompts, params):
        from repogym.agents.policy import Completion

        return [Completion([len(p)], [0.0], "length", version=self.version) for p in prompts]

    def die(self) -> None:
        os._exit(1)

    def hang(self, prompts, params):
        time.sleep(60)

    def check_health(self) -> bool:
        return True


def _workers_import_from(monkeypatch, folder: str) -> None:
    """Ray's workers (started by the next ray.init) find ``folder`` first on their path, through the environment they
    inherit: a runtime_env never starts a worker when the interpreter's path has a space (Ray 2.x)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")])))


@pytest.mark.ray
def test_the_client_replaces_a_dead_engine_once_and_turns_a_hang_into_an_error(monkeypatch):
    import ray

    from repogym.trainer.inference import RayEngineClient

    if ray.is_initialized():
        ray.shutdown()
    _workers_import_from(monkeypatch, str(Path(__file__).parent))  # actors import this module
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        actor = ray.remote(_FlakyEngine).options(num_cpus=0, max_restarts=0)
        started = []

        def replace():
            started.append(actor.remote("replacement"))
            return started[-1]

        # Generous timeouts where an answer is expected: on a loaded 2-core machine a fresh worker process can take
        # over 20 s to start (a CI run saw it), and that start counts against the first call's timeout.
        first = actor.remote("first")
        client = RayEngineClient(first, replace=replace, timeout_s=180)
        assert client.generate([[1, 2]], SamplingParams())[0].ids == [2] and client.check_health()
        first.die.remote()
        assert client.generate([[1, 2, 3]], SamplingParams())[0].ids == [3]  # retried on the replacement
        assert client.handle is started[0] and len(started) == 1
        bare = RayEngineClient(actor.remote("bare"), timeout_s=180)
        bare.handle.die.remote()
        with pytest.raises(InfraError, match="died"):
            bare.generate([[1]], SamplingParams())
        hung = RayEngineClient(actor.remote("hung"), timeout_s=1)
        with pytest.raises(InfraError, match="no answer within 1 s"):
            hung._call("hang", [[1]], SamplingParams())
    finally:
        ray.shutdown()


class _Rank0:
    """The sending side of a learner (:meth:`~repogym.trainer.learner.Learner.send_weights`): rank 0 of the group,
    its connection kept while the group is the same; it sends one tensor ``w`` filled with ``value``."""

    device, sync_host = "cpu", None

    def __init__(self, value: float = 0.0):
        self.value, self.sender, self.groups = value, None, []

    def send_weights(self, group, version: int) -> dict[str, float]:
        from repogym.trainer.inference.weight_sync import WeightSender

        if self.sender is None or self.sender.group != group:
            self.sender = WeightSender(group, timeout_s=60)
            self.groups.append(group)
        return self.sender.send(iter([("w", torch.full((4,), self.value))]))


@pytest.mark.ray
def test_engine_actors_on_one_gpu_and_a_tensor_parallel_group_take_weights_over_one_sync_group(monkeypatch):
    """Ray with made-up GPUs: actors are placed, serve RayEngineClient and take synced and pushed weights."""
    import ray

    from repogym.trainer.inference import EngineSync, RayEngineClient
    from repogym.trainer.inference.vllm_engine import VLLMEngineConfig, make_vllm_actor

    if ray.is_initialized():
        ray.shutdown()
    _workers_import_from(monkeypatch, FAKES)
    ray.init(num_cpus=4, num_gpus=3, include_dashboard=False, log_to_driver=False)
    try:
        single = make_vllm_actor(VLLMEngineConfig(model="/m", max_concurrency=4))
        client = RayEngineClient(single)
        out = client.generate([[3]], SamplingParams(max_new_tokens=2, seed=0))
        assert out[0].ids == [4, 5] and client.version == 0
        sharded = make_vllm_actor(VLLMEngineConfig(model="/m", tensor_parallel_size=2))
        assert ray.available_resources().get("GPU", 0) == 0  # 1 + a group of 2
        sync, rank0 = EngineSync([single, sharded]), _Rank0()
        for version, first in ((7, 2.0), (8, 3.0)):  # twice over the same group (world 1 + 1 + 2)
            rank0.value = first
            metrics = sync.sync_with(lambda group: rank0.send_weights(group, version), version)
            assert metrics["weight_sync/tensors"] == 1 and metrics["weight_sync/bytes"] == 8
            assert client.version == version and RayEngineClient(sharded).version == version
            assert client.generate([[3]], SamplingParams(max_new_tokens=1, seed=0))[0].ids == [4 + int(first)]
        assert sync.group.world_size == 4 and len(rank0.groups) == 1  # one connection for both syncs
        ref = ray.put({"w": torch.ones(2)})  # a whole state dict through Ray, one copy shared
        ray.get([h.update_weights.remote(ref, 9) for h in (single, sharded)])
        assert client.version == 9 and client.generate([[3]], SamplingParams(max_new_tokens=1, seed=0))[0].ids == [5]
    finally:
        ray.shutdown()


@pytest.mark.ray
def test_vllm_weights_own_the_engine_pool_and_sync_a_replaced_engine_over_a_new_group(monkeypatch):
    """The ``vllm`` weight mover starts the pool on first use, pushes over one kept group, and after the pool replaced
    an engine makes a new group that brings the replacement to the current version (``charts/engine_restarts``)."""
    import ray

    from repogym.trainer.inference import RayEngineClient
    from repogym.trainer.inference.weights import InferenceConfig, VLLMWeights, WeightMover
    from repogym.trainer.learner import LearnerConfig

    if ray.is_initialized():
        ray.shutdown()
    _workers_import_from(monkeypatch, FAKES)
    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        mover = VLLMWeights(InferenceConfig(engine="vllm", dtype="float32"), LearnerConfig(device="cpu"), "/m", 0)
        assert isinstance(mover, WeightMover) and mover.engine_actors
        [first] = mover.engine_handles()
        assert mover.engine_pool() is mover.engine_pool()  # started once
        rank0 = _Rank0(2.0)
        for version in (1, 2):
            metrics = mover.push(rank0, None, version)
            assert metrics["weight_sync/tensors"] == 1 and metrics["charts/engine_restarts"] == 0
            assert RayEngineClient(first).version == version
        assert len(rank0.groups) == 1
        ray.kill(first, no_restart=True)  # a rollout worker's client sees it die and asks the pool for another
        ray.get(mover.engine_pool().replace.remote(0, first._actor_id.hex()))
        [replacement] = mover.engine_handles()
        assert replacement._actor_id != first._actor_id and RayEngineClient(replacement).version == 0
        rank0.value = 3.0
        metrics = mover.push(rank0, None, 3)
        assert metrics["charts/engine_restarts"] == 1 and len(rank0.groups) == 2  # a new group over the live engine
        client = RayEngineClient(replacement)
        assert client.version == 3 and client.generate([[3]], SamplingParams(max_new_tokens=1, seed=0))[0].ids == [7]
        mover.close()
    finally:
        ray.shutdown()
