"""The learner end to end on small real models: GRPO learns a micro task; checkpoints resume exactly."""

from __future__ import annotations

import statistics

import pytest
import torch

from repogym.agents.hf import HFEngine
from repogym.agents.policy import SamplingParams
from repogym.trainer.algorithms import make_algorithm
from repogym.trainer.algorithms.common import Sample
from repogym.trainer.checkpoint import load_checkpoint, save_checkpoint
from repogym.trainer.learner import Learner, LearnerConfig
from repogym.trainer.tiny import TinyModelConfig, build_tiny_model, build_tokenizer

TINY = TinyModelConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                       num_kv_heads=1, max_position_embeddings=256)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(["pick a token: " + " ".join(str(i) for i in range(100))] * 3, TINY.vocab_size)


def _micro_reward(ids: list[int]) -> float:
    """The micro task: the first generated token's id must be a multiple of 5 (about 1 in 5 at random)."""
    return float(bool(ids) and ids[0] % 5 == 0)


def test_grpo_raises_mean_reward_on_a_micro_task(tokenizer):
    model = build_tiny_model(tokenizer, TINY)
    engine = HFEngine(build_tiny_model(tokenizer, TINY), device="cpu")
    grpo = make_algorithm("grpo", {"group_size": 8, "loss_agg": "token"})
    learner = Learner(model, LearnerConfig(lr=0.02, micro_batch_size=16, seed=0, device="cpu"),
                      tokenizer.pad_token_id)
    engine.update_weights(learner.policy_state(), 0)
    prompt = tokenizer.encode("pick a token: ")
    curve = []
    for step in range(30):
        groups = []
        for g in range(2):
            group = []
            for i in range(8):
                c = engine.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=2,
                                                             seed=1000 * step + 10 * g + i))[0]
                group.append(Sample(prompt + c.ids, [0] * len(prompt) + [1] * len(c.ids),
                                    [0.0] * len(prompt) + c.logprobs, reward=_micro_reward(c.ids), group=g))
            groups.append(group)
        curve.append(statistics.fmean(s.reward for grp in groups for s in grp))
        learner.train_step(grpo.prepare(groups), grpo)
        engine.update_weights(learner.policy_state(), step + 1)
    first, last = statistics.fmean(curve[:5]), statistics.fmean(curve[-5:])
    assert first < 0.4 and last > first + 0.3, curve


def _samples(tokenizer) -> list[Sample]:
    prompt = tokenizer.encode("pick a token: ")
    out = []
    for i, (completion, reward) in enumerate([([40, 41, 42], 1.0), ([50, 51], 0.0), ([60], 1.0), ([70, 71], 0.0)]):
        out.append(Sample(prompt + completion, [0] * len(prompt) + [1] * len(completion),
                          [0.0] * len(prompt) + [-1.5] * len(completion), reward=reward, group=i // 2))
    return out


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_resuming_from_a_checkpoint_gives_an_identical_next_step_loss(tokenizer, tmp_path, name):
    def fresh(seed):
        torch.manual_seed(seed)
        algorithm = make_algorithm(name, {"group_size": 2} if name == "grpo" else {}, TINY.hidden_size)
        extra = list(algorithm.parameters()) if hasattr(algorithm, "parameters") else []
        model = build_tiny_model(tokenizer, TinyModelConfig(**{**TINY.__dict__, "seed": seed}))
        return algorithm, Learner(model, LearnerConfig(lr=0.01, micro_batch_size=2, seed=seed, device="cpu"),
                                  tokenizer.pad_token_id, extra)

    samples = _samples(tokenizer)
    algorithm, learner = fresh(0)
    batch = algorithm.prepare([samples[:2], samples[2:]])
    learner.train_step(batch, algorithm)
    save_checkpoint(tmp_path, 1, {"learner": learner.state_dict()})
    expected = learner.train_step(batch, algorithm)

    algorithm2, resumed = fresh(123)  # different initial weights: everything must come from the checkpoint
    state = load_checkpoint(tmp_path / "checkpoints" / "step-000001.pt")
    resumed.load_state_dict(state["learner"])
    got = resumed.train_step(algorithm2.prepare([samples[:2], samples[2:]]), algorithm2)
    assert got["losses/loss"] == expected["losses/loss"]
    assert got["losses/grad_norm"] == expected["losses/grad_norm"]


def test_the_kl_reference_follows_a_warm_start_only_when_refreshed(tokenizer):
    model = build_tiny_model(tokenizer, TINY)
    learner = Learner(model, LearnerConfig(lr=0.01, micro_batch_size=4, seed=0, device="cpu"),
                      tokenizer.pad_token_id, reference=True)
    sft = make_algorithm("sft", {})
    learner.train_step(_samples(tokenizer), sft)  # stands in for the warm start

    def differs() -> bool:
        return any(not torch.equal(p, r) for p, r in zip(learner.model.parameters(), learner.reference.parameters()))

    assert differs()  # the reference is still the model the learner was built with
    learner.refresh_reference()
    assert not differs()
    assert not any(p.requires_grad for p in learner.reference.parameters())


@pytest.mark.slow
def test_copy_pretraining_teaches_reading_back_a_span(tokenizer):
    """The copy example masks all but the repeat (past its first token), and a few hundred updates of a 2-layer
    model bring the loss on the repeat well under what guessing the corpus's next token costs."""
    import random

    from repogym.trainer.tiny import copy_sequence, pretrain_copy

    stream = list(range(50, 150))
    ids, mask = copy_sequence(stream, random.Random(0), span=(5, 5), gap=(3, 3))
    assert ids[:5] == ids[8:] and len(mask) == len(ids) == 13 and mask == [0] * 9 + [1] * 4
    corpus = [" ".join(str(random.Random(i).randrange(100)) for _ in range(200)) for i in range(4)]
    model = build_tiny_model(tokenizer, TinyModelConfig(**{**TINY.__dict__, "num_layers": 2, "hidden_size": 64,
                                                           "intermediate_size": 128}))
    losses = pretrain_copy(model, tokenizer, corpus, steps=300, batch_size=8, lr=3e-3)
    assert statistics.fmean(losses[-20:]) < 0.5 * statistics.fmean(losses[:20])


def test_trainable_layers_trains_the_top_layers_only_and_rejects_a_count_the_model_lacks(tokenizer):
    from repogym.envs.core.errors import ConfigError

    two = TinyModelConfig(**{**TINY.__dict__, "num_layers": 2})
    model = build_tiny_model(tokenizer, two)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    grpo = make_algorithm("grpo", {"group_size": 2})
    learner = Learner(model, LearnerConfig(lr=0.05, micro_batch_size=4, seed=0, device="cpu", trainable_layers=1),
                      tokenizer.pad_token_id)
    samples = _samples(tokenizer)
    learner.train_step(grpo.prepare([samples[:2], samples[2:]]), grpo)
    moved = {k for k, v in learner.model.state_dict().items() if not torch.equal(v, before[k])}
    assert moved and all(k.startswith(("model.layers.1.", "model.norm.")) for k in moved), sorted(moved)
    with pytest.raises(ConfigError, match="between 1 and the model's decoder layers \\(2\\)"):
        Learner(build_tiny_model(tokenizer, two), LearnerConfig(device="cpu", trainable_layers=3), tokenizer.pad_token_id)


def test_the_learner_and_the_learner_group_share_one_protocol_and_the_learner_sends_over_a_kept_group(tokenizer):
    """``Learner`` is a ``PolicyLearner`` (as ``LearnerGroup`` is); ``send_weights`` streams its full weights as rank 0
    of a sync group, keeps the connection for the next sync of the same group, and reconnects to a new group."""
    import threading

    from repogym.trainer.inference.weight_sync import SyncGroup, WeightReceiver, free_port
    from repogym.trainer.learner import PolicyLearner
    from repogym.trainer.learner_group import LearnerGroup

    learner = Learner(build_tiny_model(tokenizer, TINY), LearnerConfig(device="cpu"), tokenizer.pad_token_id)
    assert isinstance(learner, PolicyLearner)
    for member in ("train_step", "set_lr", "finish_warm_start", "policy_state", "send_weights", "export", "state_dict",
                   "load_state_dict", "close"):
        assert callable(getattr(LearnerGroup, member)), member
    expected = {name: t.to(torch.bfloat16) for name, t in learner.model.state_dict().items()}
    senders = []
    for group in [SyncGroup("127.0.0.1", free_port(), world_size=2)] * 2 + [SyncGroup("127.0.0.1", free_port(), 2)]:
        receiver = WeightReceiver(group, 1, timeout_s=30) if not senders or group != senders[-1][0] else receiver
        got: dict = {}
        thread = threading.Thread(target=lambda: got.update((n, t.clone()) for n, t in receiver.receive()))
        thread.start()
        metrics = learner.send_weights(group, version=1)
        thread.join(30)
        senders.append((group, learner._sender))
        assert set(got) == set(expected) and all(torch.equal(got[n], expected[n]) for n in expected)
        assert metrics["weight_sync/bytes"] == 2 * sum(t.numel() for t in expected.values())
    assert senders[0][1] is senders[1][1] and senders[2][1] is not senders[1][1]  # kept, then a new group's
    learner.close()
    assert learner._sender is None
