"""repogym's vLLM engine on the real vLLM (its CPU build), with a tiny random Llama made here, in fp32.

Run in .venv-vllm (scripts/setup_vllm.sh): ``.venv-vllm/bin/python -m pytest -m vllm tests/test_vllm_real.py``;
skipped where vLLM is not installed. vLLM's async engine always runs its engine core (and worker) in processes
of their own, so every weight update here crosses the process boundary where tensors inside RPC arguments
would arrive as plain lists. Reference logprobs come from a transformers forward pass over the same tokens.
"""

from __future__ import annotations

import threading

import pytest
import torch

pytest.importorskip("vllm")

from repogym.agents.policy import Completion, SamplingParams  # noqa: E402
from repogym.trainer.inference.vllm_engine import VLLMEngine, VLLMEngineConfig  # noqa: E402
from repogym.trainer.inference.weight_sync import SyncGroup, WeightSender, free_port  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]
MAX_LEN = 512
CORPUS = ["def add(a, b):\n    return a + b\n", "import os\nprint(os.getcwd())\n", "hello world, " * 20,
          "class Stack:\n    def push(self, x):\n        self.items.append(x)\n"] * 5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from repogym.trainer.tiny import TinyModelConfig, build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny"), CORPUS, TinyModelConfig(hidden_size=128, num_layers=2))


@pytest.fixture(scope="module")
def config(model_dir) -> VLLMEngineConfig:
    return VLLMEngineConfig(model=str(model_dir), dtype="float32", max_model_len=MAX_LEN, enforce_eager=True,
                            max_concurrency=8)


@pytest.fixture(scope="module")
def engine(config):
    engine = VLLMEngine(config)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def reference(model_dir):
    """The same model in transformers (fp32), its initial weights, and a sharper set of new weights."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    old = {name: t.detach().clone() for name, t in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    # A bigger final norm sharpens the next-token distribution (greedy picks far from ties: margins > 0.01
    # here), and noise bigger than the init moves generation off the random model's repeat-the-last-token.
    new = {name: (t * 8.0 if name == "model.norm.weight" else t if "norm" in name
                  else t + 0.1 * torch.randn(t.shape, generator=g)) for name, t in old.items()}
    new["lm_head.weight"] = new["model.embed_tokens.weight"]
    return model, old, new


def _load(model, state: dict[str, torch.Tensor]) -> None:
    model.load_state_dict(state, strict=False)
    model.tie_weights()


@torch.no_grad()
def _reference_logprobs(model, prompt: list[int], c: Completion, temperature: float) -> tuple[torch.Tensor, list]:
    """Logprobs of the completion's tokens under ``model`` at ``temperature`` (0: untempered), and its greedy picks."""
    ids = torch.tensor([prompt + c.ids])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(c.ids)].float()
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return logp.gather(1, torch.tensor(c.ids)[:, None])[:, 0], logp.argmax(-1).tolist()


def _prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (length,), generator=g).tolist() for _ in range(n)]


def _sync(engine: VLLMEngine, sender: WeightSender, state: dict, version: int, dtype=torch.bfloat16) -> dict:
    """The test process is the learner (rank 0); the engine's worker receives in its own process."""
    received = []
    thread = threading.Thread(target=lambda: received.append(engine.receive_weights(sender.group, 1, version)))
    thread.start()
    metrics = sender.send(iter(state.items()), dtype=dtype)
    thread.join(120)
    assert received == [len(state)] and engine.get_version() == version
    return metrics


def _check_matches(engine, model, prompts, temperature: float, greedy: bool = False, tol: float = 1e-4) -> None:
    params = SamplingParams(temperature=temperature, max_new_tokens=24, seed=7)
    for prompt, c in zip(prompts, engine.generate(prompts, params)):
        assert c.ids and len(c.logprobs) == len(c.ids)
        expected, picks = _reference_logprobs(model, prompt, c, temperature)
        assert torch.allclose(torch.tensor(c.logprobs), expected, atol=tol), (c.logprobs, expected.tolist())
        if greedy:
            assert c.ids == picks


def test_generation_returns_token_ids_logprobs_and_versions(engine, reference):
    model, _, _ = reference
    prompts = _prompts(3, 12, model.config.vocab_size, seed=0)
    out = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=16, seed=3))
    assert len(out) == 3
    for c in out:
        assert 0 < len(c.ids) <= 16 and len(c.logprobs) == len(c.ids) and c.version == 0
        assert all(lp <= 0 for lp in c.logprobs) and c.finish_reason in ("stop", "length")
    again = engine.generate(prompts[:1], SamplingParams(temperature=1.0, max_new_tokens=16, seed=3))
    assert again[0].ids == out[0].ids  # a per-request seed reproduces the sample
    too_long = engine.generate([[5] * MAX_LEN], SamplingParams(max_new_tokens=4))
    assert too_long[0].ids == [] and too_long[0].finish_reason == "length"
    assert engine.check_health() is True


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_processed_logprobs_match_a_transformers_forward_pass(engine, reference, temperature):
    model, old, _ = reference
    _load(model, old)
    _check_matches(engine, model, _prompts(4, 20, model.config.vocab_size, seed=1), temperature)


def test_a_weight_sync_moves_generation_to_the_new_weights_and_back(engine, reference):
    model, old, new = reference
    prompts = _prompts(3, 16, model.config.vocab_size, seed=2)
    sender = WeightSender(SyncGroup("127.0.0.1", free_port(), 1 + engine.num_ranks()), bucket_bytes=64 << 10)
    before = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=24))

    metrics = _sync(engine, sender, new, version=1)  # bf16 on the wire: the engine gets the bf16-rounded weights
    assert metrics["weight_sync/buckets"] > 1
    assert metrics["weight_sync/bytes"] == sum(t.numel() * 2 for t in new.values())
    _load(model, {name: t.to(torch.bfloat16).float() for name, t in new.items()})
    _check_matches(engine, model, prompts, temperature=0, greedy=True)
    _check_matches(engine, model, prompts, temperature=1.0)
    moved = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=24))
    assert [c.ids for c in moved] != [c.ids for c in before] and moved[0].version == 1

    _sync(engine, sender, old, version=2, dtype=torch.float32)  # back, exactly, over the same connection
    _load(model, old)
    _check_matches(engine, model, prompts, temperature=0, greedy=True)
    after = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=24))
    assert [c.ids for c in after] == [c.ids for c in before] and after[0].version == 2


def test_a_cached_prompt_is_recomputed_with_the_new_weights(engine, reference):
    model, old, new = reference
    prompt = _prompts(1, 300, model.config.vocab_size, seed=3)  # many KV blocks, all cached after the first call
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    _load(model, old)
    engine.update_weights(old, version=3)  # the small path: safetensors bytes through vLLM's RPC
    old_out = engine.generate(prompt, params)[0]
    assert torch.allclose(torch.tensor(old_out.logprobs), _reference_logprobs(model, prompt[0], old_out, 1.0)[0],
                          atol=1e-4)
    engine.update_weights(new, version=4)
    _load(model, new)
    new_out = engine.generate(prompt, params)[0]
    assert new_out.version == 4
    expected, _ = _reference_logprobs(model, prompt[0], new_out, 1.0)
    assert torch.allclose(torch.tensor(new_out.logprobs), expected, atol=1e-4)
    engine.update_weights(old, version=5)


def test_an_engine_in_a_ray_actor_serves_a_client_and_takes_synced_weights(config, reference):
    ray = pytest.importorskip("ray")
    from repogym.trainer.inference import EngineSync, RayEngineClient
    from repogym.trainer.inference.vllm_engine import make_vllm_actor
    from repogym.trainer.inference.weight_sync import WeightSender

    model, old, new = reference
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        handle = make_vllm_actor(config)  # no GPU in this cluster: the actor asks for none
        client = RayEngineClient(handle, timeout_s=240)
        prompts = _prompts(2, 10, model.config.vocab_size, seed=4)
        out = client.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=8, seed=1))
        assert all(c.ids and len(c.logprobs) == len(c.ids) for c in out) and client.check_health()
        sync = EngineSync([handle], host="127.0.0.1")
        metrics = sync.sync_with(lambda group: WeightSender(group).send(iter(new.items())), 1)
        assert metrics["weight_sync/tensors"] == len(new) and client.version == 1
        _load(model, {name: t.to(torch.bfloat16).float() for name, t in new.items()})
        _check_matches(client, model, prompts, temperature=0, greedy=True)
    finally:
        ray.shutdown()
