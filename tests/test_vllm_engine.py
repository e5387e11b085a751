"""The vLLM engine against a stand-in of vLLM's documented API (tests/fakes/vllm): no GPU needed."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import torch

from repogym.agents.policy import SamplingParams
from repogym.envs.errors import ConfigError

FAKES = str(Path(__file__).parent / "fakes")
REPO = str(Path(__file__).parent.parent)


@pytest.fixture
def fake_vllm(monkeypatch):
    """Import the stand-in as ``vllm`` (and drop it again afterwards)."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(FAKES)
    import vllm

    assert vllm.__file__.startswith(FAKES)
    vllm.LLM.calls.clear()
    yield vllm
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        sys.modules.pop(name, None)


def _engine(**fields):
    from repogym.trainer.inference.vllm_engine import VLLMEngine, VLLMEngineConfig

    return VLLMEngine(VLLMEngineConfig(model="/models/tiny", **fields))


def test_engine_arguments_ask_for_processed_logprobs_and_the_weight_extension(fake_vllm):
    engine = _engine(max_model_len=48)
    kwargs = engine.llm.kwargs
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["worker_extension_cls"] == "repogym.trainer.inference.vllm_worker.WeightSyncExtension"
    assert kwargs["max_model_len"] == 48 and "distributed_executor_backend" not in kwargs
    tp = _engine(tensor_parallel_size=2).llm.kwargs
    assert tp["tensor_parallel_size"] == 2 and tp["distributed_executor_backend"] == "ray"


def test_generate_returns_token_ids_logprobs_and_finish_reason(fake_vllm):
    engine = _engine(max_model_len=64)
    # token t is (last prompt id + t + 1 + seed) % 97: from prompt [..., 10] with seed 0 it is 11, 12, ...
    stop = engine.generate([[5, 10]], SamplingParams(temperature=0.5, max_new_tokens=8, stop_token_ids=[13], seed=0))
    assert stop[0].ids == [11, 12, 13] and stop[0].finish_reason == "stop"
    assert stop[0].logprobs == pytest.approx([-0.2, -0.4, -0.6])
    long = engine.generate([[5, 10]], SamplingParams(max_new_tokens=4, seed=1))
    assert long[0].ids == [12, 13, 14, 15] and long[0].finish_reason == "length"


def test_max_tokens_is_capped_by_the_context_and_a_full_context_gives_an_empty_completion(fake_vllm):
    engine = _engine(max_model_len=10)
    capped = engine.generate([list(range(7))], SamplingParams(max_new_tokens=50))
    assert len(capped[0].ids) == 3 and capped[0].finish_reason == "length"
    full = engine.generate([list(range(10))], SamplingParams(max_new_tokens=5))
    assert full[0].ids == [] and full[0].finish_reason == "length"


def test_concurrent_requests_are_batched_into_one_vllm_call(fake_vllm):
    engine = _engine(batch_wait_s=0.2)
    results = {}
    barrier = threading.Barrier(6)

    def ask(i):
        barrier.wait()
        results[i] = engine.generate([[i]], SamplingParams(max_new_tokens=2, seed=0))[0].ids

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {i: [i + 1, i + 2] for i in range(6)}
    assert sum(engine.llm.generate_calls) == 6 and len(engine.llm.generate_calls) < 6


def test_a_vllm_error_reaches_the_caller_and_the_engine_keeps_serving(fake_vllm):
    engine = _engine()

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    real, engine.llm.generate = engine.llm.generate, broken
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.generate([[1]], SamplingParams(max_new_tokens=2))
    engine.llm.generate = real
    assert engine.generate([[1]], SamplingParams(max_new_tokens=2, seed=0))[0].ids == [2, 3]


def test_update_weights_loads_named_cpu_tensors_on_every_rank(fake_vllm):
    engine = _engine(tensor_parallel_size=2)
    state = {"model.embed_tokens.weight": torch.ones(3, 2), "lm_head.weight": torch.zeros(3, 2)}
    engine.update_weights(state, version=4)
    assert engine.get_version() == 4 and engine.llm.prefix_resets == 1
    for worker in engine.llm.workers:
        (loaded,) = worker.model_runner.model.loaded
        assert [name for name, _ in loaded] == list(state)
        assert torch.equal(loaded[0][1], state["model.embed_tokens.weight"])


def test_engine_registry_builds_by_name_and_lists_names_on_a_miss(fake_vllm):
    from repogym.trainer.inference import make_engine

    engine = make_engine("vllm", model="/models/tiny", enforce_eager=True)
    assert engine.llm.kwargs["enforce_eager"] is True
    with pytest.raises(ConfigError, match="unknown inference engine 'tgi': expected one of hf, vllm"):
        make_engine("tgi")


@pytest.mark.ray
def test_engine_actors_on_one_gpu_and_on_a_tensor_parallel_placement_group():
    """Ray with made-up GPUs: actors are placed, serve RayEngineClient and take pushed weights."""
    import ray

    from repogym.trainer.inference import RayEngineClient, push_weights
    from repogym.trainer.inference.vllm_engine import VLLMEngineConfig, make_vllm_actor

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, num_gpus=3, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": f"{FAKES}:{REPO}"}})
    try:
        single = make_vllm_actor(VLLMEngineConfig(model="/m", max_concurrency=4))
        client = RayEngineClient(single)
        out = client.generate([[3]], SamplingParams(max_new_tokens=2, seed=0))
        assert out[0].ids == [4, 5] and client.version == 0
        sharded = make_vllm_actor(VLLMEngineConfig(model="/m", tensor_parallel_size=2))
        push_weights([single, sharded], {"w": torch.ones(2)}, version=7)
        assert client.version == 7 and RayEngineClient(sharded).version == 7
        assert ray.available_resources().get("GPU", 0) == 0  # 1 + a group of 2
    finally:
        ray.shutdown()
