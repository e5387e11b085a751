"""Advantages and masked losses, checked against values computed by hand on small cases."""

import math

import pytest
import torch

from repogym.envs.core.errors import ConfigError
from repogym.trainer.algorithms.common import Sample, aggregate, collate, normalizer, token_logprobs
from repogym.trainer.algorithms.grpo import GRPO, GRPOConfig, group_advantages
from repogym.trainer.algorithms.ppo import gae
from repogym.trainer.algorithms.sft import SFT, SFTConfig


def test_group_advantages_by_hand():
    # rewards 1, 0, 0, 1: mean 0.5, population std 0.5
    assert group_advantages([1, 0, 0, 1]) == pytest.approx([1, -1, -1, 1], abs=1e-5)
    assert group_advantages([1, 0, 0, 1], normalize_std=False) == pytest.approx([0.5, -0.5, -0.5, 0.5])
    assert group_advantages([1, 1, 1]) == [0.0, 0.0, 0.0]  # no signal, no NaN
    # rewards 1, 0, 0, 0: mean 0.25, std sqrt(3)/4; negatives scaled by 0.5
    std = math.sqrt(3) / 4
    assert group_advantages([1, 0, 0, 0], negative_scale=0.5) == pytest.approx(
        [0.75 / std, -0.125 / std, -0.125 / std, -0.125 / std], abs=1e-5)
    assert group_advantages([1, 0], normalize_std=False, negative_scale=0.0) == pytest.approx([0.5, 0.0])


def test_collate_aligns_mask_and_logprobs_to_targets():
    s = Sample(ids=[5, 6, 7, 8], mask=[0, 0, 1, 1], logprobs=[0.0, 0.0, -0.5, -0.25], reward=1.0)
    t = Sample(ids=[5, 9], mask=[0, 1], logprobs=[0.0, -1.0])
    b = collate([s, t], pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    # target positions: token t+1 is predicted at t; mask and logprobs are shifted accordingly
    assert b.loss_mask.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert b.old_logprobs.tolist() == [[0.0, -0.5, -0.25], [-1.0, 0.0, 0.0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    with pytest.raises(ValueError):
        Sample(ids=[1, 2], mask=[1], logprobs=[0.0, 0.0])


def test_token_and_sequence_aggregation_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    # token: (1+2+3+4) / 4 tokens; sequence: (mean(1,2,3) + 4) / 2 sequences
    assert float(aggregate(values, mask, "token", normalizer([mask], "token"))) == pytest.approx(2.5)
    assert float(aggregate(values, mask, "sequence", normalizer([mask], "sequence"))) == pytest.approx(3.0)
    # split into two micro-batches with the whole batch's denominator: the same totals
    d = normalizer([mask[:1], mask[1:]], "token")
    assert float(aggregate(values[:1], mask[:1], "token", d) + aggregate(values[1:], mask[1:], "token", d)) \
        == pytest.approx(2.5)


def _logits_for(logps: list[float], vocab: int = 2) -> torch.Tensor:
    """Logits for one sequence whose next-token logprob of token 1 is each of ``logps`` (two-token vocab)."""
    rows = []
    for lp in logps:
        p = math.exp(lp)
        rows.append([math.log(1 - p), lp])  # log-probabilities are valid logits
    rows.append([0.0, 0.0])
    return torch.tensor([rows])


def _logprobs_for(logps: list[float], batch) -> torch.Tensor:
    """What the learner hands ``loss``: the logprob of each target token, here from :func:`_logits_for`."""
    return token_logprobs(_logits_for(logps), batch.input_ids[:1])


def test_grpo_clipped_loss_by_hand():
    # one sequence [0, 1, 1]: two targets (both token 1), both generated
    new_lp = [math.log(0.6), math.log(0.3)]
    old_lp = [math.log(0.4), math.log(0.3)]
    s = Sample(ids=[0, 1, 1], mask=[0, 1, 1], logprobs=[0.0] + old_lp, reward=1.0, advantage=2.0)
    batch = collate([s], pad_id=0)
    algo = GRPO(GRPOConfig(clip_low=0.2, clip_high=0.28, loss_agg="token"))
    loss, metrics = algo.loss(_logprobs_for(new_lp, batch), batch, normalizer([batch.loss_mask], "token"))
    # ratios 1.5 (clipped to 1.28 with A > 0) and 1.0; loss = -(1.28*2 + 1.0*2) / 2
    assert float(loss) == pytest.approx(-(1.28 * 2 + 2.0) / 2, rel=1e-5)
    assert metrics["losses/clip_fraction"] == pytest.approx(0.5)
    # negative advantage: min picks the unclipped 1.5 * -2 (pessimistic), the other ratio 1.0
    s.advantage = -2.0
    batch = collate([s], pad_id=0)
    loss, _ = algo.loss(_logprobs_for(new_lp, batch), batch, 2.0)
    assert float(loss) == pytest.approx(-(1.5 * -2 + 1.0 * -2) / 2, rel=1e-5)


def test_an_off_policy_token_costs_at_most_dual_clip_times_its_advantage():
    # The sampler drew the token at p = e^-30; the learner now gives it p = 0.5: a ratio of about e^29.
    new_lp, old_lp = [math.log(0.5)], [-30.0]
    s = Sample(ids=[0, 1], mask=[0, 1], logprobs=[0.0] + old_lp, reward=0.0, advantage=-1.0)
    batch = collate([s], pad_id=0)
    bounded, metrics = GRPO(GRPOConfig(dual_clip=3.0)).loss(_logprobs_for(new_lp, batch), batch, 1.0)
    assert float(bounded) == pytest.approx(3.0)  # dual_clip * |A|
    assert metrics["losses/sampler_gap_max"] == pytest.approx(30 + math.log(0.5), rel=1e-5)
    unbounded, _ = GRPO(GRPOConfig(dual_clip=None)).loss(_logprobs_for(new_lp, batch), batch, 1.0)
    assert math.isfinite(float(unbounded)) and float(unbounded) == pytest.approx(math.exp(20.0), rel=1e-4)  # clamped
    positive = collate([Sample(ids=[0, 1], mask=[0, 1], logprobs=[0.0, -30.0], reward=1.0, advantage=1.0)], pad_id=0)
    assert float(GRPO(GRPOConfig()).loss(_logprobs_for(new_lp, positive), positive, 1.0)[0]) == pytest.approx(-1.28)
    with pytest.raises(ConfigError, match="dual_clip must be > 1"):
        GRPO(GRPOConfig(dual_clip=1.0))


def test_on_policy_the_sampler_and_learner_agree():
    lp = [math.log(0.25), math.log(0.6)]
    batch = collate([Sample(ids=[0, 1, 1], mask=[0, 1, 1], logprobs=[0.0] + lp, reward=1.0, advantage=1.0)], pad_id=0)
    _, metrics = GRPO(GRPOConfig()).loss(_logprobs_for(lp, batch), batch, 2.0)
    assert metrics["losses/sampler_k3"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["losses/sampler_gap_max"] == pytest.approx(0.0, abs=1e-6)


def test_grpo_kl_penalty_by_hand():
    lp = [math.log(0.5)]
    s = Sample(ids=[0, 1], mask=[0, 1], logprobs=[0.0] + lp, advantage=0.0)
    batch = collate([s], pad_id=0)
    ref = torch.tensor([[math.log(0.25)]])
    loss, metrics = GRPO(GRPOConfig(kl_coef=0.1)).loss(_logprobs_for(lp, batch), batch, 1.0, ref)
    # k3 = exp(ref - logp) - (ref - logp) - 1 with ref - logp = log(0.5)
    k3 = 0.5 - math.log(0.5) - 1
    assert float(loss) == pytest.approx(0.1 * k3, rel=1e-5)
    assert metrics["losses/kl"] == pytest.approx(k3, rel=1e-5)


def test_masked_tokens_get_no_gradient():
    logits = torch.randn(1, 4, 5, requires_grad=True)
    s = Sample(ids=[1, 2, 3, 4], mask=[0, 0, 1, 0], logprobs=[0.0] * 4)
    batch = collate([s], pad_id=0)
    loss, _ = SFT(SFTConfig()).loss(token_logprobs(logits, batch.input_ids), batch, 1.0)
    loss.backward()
    # only position 1 (which predicts the one generated token, ids[2]) carries gradient
    assert [bool(logits.grad[0, t].abs().sum() > 0) for t in range(4)] == [False, True, False, False]
    expected = -float(torch.log_softmax(logits[0, 1].detach(), -1)[3])
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)


def test_token_logprobs_uses_temperature():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 0.0]]])
    ids = torch.tensor([[0, 0]])
    assert float(token_logprobs(logits, ids, 1.0)[0, 0]) == pytest.approx(math.log(math.e ** 2 / (math.e ** 2 + 1)))
    assert float(token_logprobs(logits, ids, 2.0)[0, 0]) == pytest.approx(math.log(math.e / (math.e + 1)))


def test_gae_over_generated_positions_only():
    # positions 0 and 2 are generated, 1 is tool output; reward 1 at the end; gamma 1, lambda 0.5
    values = torch.tensor([[0.2, 9.0, 0.6]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    adv, ret = gae(values, mask, torch.tensor([1.0]), gamma=1.0, lam=0.5)
    # last: delta = 1 - 0.6 = 0.4; first: delta = 0.6 - 0.2 = 0.4, adv = 0.4 + 0.5 * 0.4 = 0.6
    assert adv[0].tolist() == pytest.approx([0.6, 0.0, 0.4])
    assert ret[0, 0] == pytest.approx(0.8) and ret[0, 2] == pytest.approx(1.0)


def _gae_by_loop(values, mask, rewards, gamma, lam):
    adv = torch.zeros_like(values)
    for b in range(values.shape[0]):
        positions = [t for t in range(values.shape[1]) if mask[b, t] > 0]
        running, next_value = 0.0, 0.0
        for i, pos in enumerate(reversed(positions)):
            delta = (float(rewards[b]) if i == 0 else 0.0) + gamma * next_value - float(values[b, pos])
            running = delta + gamma * lam * running
            adv[b, pos], next_value = running, float(values[b, pos])
    return adv


def test_vectorised_gae_matches_the_per_token_loop():
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(5, 12, generator=generator)
    mask = (torch.rand(5, 12, generator=generator) > 0.4).float()
    mask[3] = 0.0  # a row with nothing generated
    rewards = torch.tensor([1.0, 0.0, -0.5, 1.0, 2.0])
    adv, ret = gae(values, mask, rewards, gamma=0.99, lam=0.9)
    assert torch.allclose(adv, _gae_by_loop(values, mask, rewards, 0.99, 0.9), atol=1e-5)
    assert torch.allclose(ret * mask, (adv + values) * mask, atol=1e-6)


def test_ppo_clips_values_against_the_values_of_the_old_pass():
    from repogym.trainer.algorithms.ppo import PPO, PPOConfig

    algo = PPO(PPOConfig(value_clip=0.2, value_coef=1.0, gamma=1.0, lam=1.0), hidden_size=2)
    s = Sample(ids=[0, 1, 1], mask=[0, 1, 1], logprobs=[0.0, math.log(0.5), math.log(0.5)], reward=1.0)
    batch = collate([s], pad_id=0)
    logp, hidden = _logprobs_for([math.log(0.5)] * 2, batch), torch.ones(1, 3, 2)
    with pytest.raises(ValueError, match="needs the old pass"):
        algo.loss(logp, batch, 2.0, hidden=hidden)
    assert algo.needs_old_pass
    with torch.no_grad():
        algo.old_pass(batch, logp, hidden)  # before the update: values 0 everywhere, recorded
        algo.finish_old_pass([batch])
    assert torch.equal(batch.old_values, torch.zeros(1, 2)) and batch.learner_logprobs is None  # no TIS
    assert batch.token_advantages.tolist() == [[1.0, 1.0]] and batch.returns.tolist() == [[1.0, 1.0]]
    with torch.no_grad():
        algo.value_head.bias.fill_(0.9)  # the update moved every value to 0.9
    _, metrics = algo.loss(logp, batch, 2.0, hidden=hidden)
    # returns are 1 (GAE from the old values); unclipped error (0.9 - 1)^2, clipped (0.2 - 1)^2: the max wins
    assert metrics["losses/value_loss"] == pytest.approx(0.5 * 0.8 ** 2, rel=1e-5)


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_tis_takes_the_ratio_to_the_learner_and_weights_by_the_truncated_sampler_ratio(name):
    from repogym.trainer.algorithms import make_algorithm

    # Two generated tokens. The sampler drew them at 0.4 and 0.25, the learner (before the update) gives 0.5 and 0.5:
    # TIS weights 1.25 and 2 -> capped at 1.5. The learner now gives 0.55 and 0.5: ratios 1.1 and 1.0.
    sampler, learner_old, new = [math.log(0.4), math.log(0.25)], [math.log(0.5)] * 2, [math.log(0.55), math.log(0.5)]
    batch = collate([Sample(ids=[0, 1, 1], mask=[0, 1, 1], logprobs=[0.0] + sampler, reward=1.0, advantage=1.0)], 0)
    options = {"tis_cap": 1.5, "dual_clip": None} | ({} if name == "grpo" else {"value_coef": 0.0, "lam": 1.0})
    algo = make_algorithm(name, options, hidden_size=2)
    hidden = torch.zeros(1, 3, 2) if algo.needs_hidden else None
    logp = _logprobs_for(new, batch).requires_grad_()
    with pytest.raises(ValueError, match="tis_cap needs the learner's old logprobs|needs the old pass"):
        algo.loss(logp, batch, 2.0, hidden=hidden)
    assert algo.needs_old_pass
    with torch.no_grad():
        algo.old_pass(batch, _logprobs_for(learner_old, batch), hidden)
        algo.finish_old_pass([batch])
    assert batch.learner_logprobs[0].tolist() == pytest.approx(learner_old)
    # PPO: values 0 and reward 1 at the end with gamma = lambda = 1: both advantages 1, like GRPO's
    loss, metrics = algo.loss(logp, batch, 2.0, hidden=hidden)
    assert float(loss.detach()) == pytest.approx(-(1.1 * 1.25 + 1.0 * 1.5) / 2, rel=1e-5)
    assert metrics["losses/tis_weight_mean"] == pytest.approx((1.25 + 1.5) / 2, rel=1e-5)
    assert metrics["losses/tis_clipped_fraction"] == pytest.approx(0.5)
    assert metrics["losses/ratio_mean"] == pytest.approx((1.1 + 1.0) / 2, rel=1e-5)
    assert metrics["losses/sampler_gap_max"] == pytest.approx(math.log(2), rel=1e-5)  # sampler vs learner-old
    loss.backward()  # the weight is a constant: d(-w * ratio * A / 2) / dlogp = -w * ratio / 2
    assert logp.grad[0].tolist() == pytest.approx([-1.25 * 1.1 / 2, -1.5 * 1.0 / 2], rel=1e-5)


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_tis_cap_must_be_positive(name):
    from repogym.trainer.algorithms import make_algorithm

    for cap in (0.0, -1.0):
        with pytest.raises(ConfigError, match="tis_cap must be > 0"):
            make_algorithm(name, {"tis_cap": cap}, hidden_size=2)


# -- the registry and the protocol ------------------------------------------------------------------------
def test_make_algorithm_resolves_by_name_and_a_miss_lists_every_algorithm():
    from repogym.envs.core.errors import ConfigError
    from repogym.trainer.algorithms import ALGORITHMS, make_algorithm

    assert ALGORITHMS.names() == ["grpo", "ppo", "sft"]
    with pytest.raises(ConfigError, match="unknown algorithm 'nope': expected one of grpo, ppo, sft"):
        make_algorithm("nope")
    with pytest.raises(ConfigError, match=r"algorithm 'grpo': .*group_sise"):
        make_algorithm("grpo", {"group_sise": 4})
    with pytest.raises(ConfigError, match="unknown algorithm 'nope'"):
        make_algorithm("nope", {"group_size": 4})  # the name first: no options to check against
    with pytest.raises(ConfigError, match="negative_scale"):
        make_algorithm("grpo", {"negative_scale": -1})
    with pytest.raises(ConfigError, match="hidden_size"):
        make_algorithm("ppo", {})
    assert make_algorithm("grpo", {"group_size": 3}).group_size == 3


@pytest.mark.parametrize("name, options, expected", [
    ("grpo", {"group_size": 4, "temperature": 0.7, "loss_agg": "sequence", "epochs": 2, "kl_coef": 0.1},
     {"group_size": 4, "temperature": 0.7, "loss_agg": "sequence", "agg_length": 1024, "epochs": 2,
      "needs_hidden": False, "needs_reference": True, "needs_old_pass": False}),
    ("grpo", {"tis_cap": 2.0, "loss_agg": "constant", "agg_length": 64},
     {"needs_hidden": False, "needs_old_pass": True, "agg_length": 64}),
    ("ppo", {"group_size": 2, "temperature": 0.9, "epochs": 3},
     {"group_size": 2, "temperature": 0.9, "loss_agg": "token", "agg_length": None, "epochs": 3, "needs_hidden": True,
      "needs_reference": False, "needs_old_pass": True}),
    ("sft", {"loss_agg": "sequence"},
     {"group_size": 1, "temperature": 1.0, "loss_agg": "sequence", "agg_length": None, "epochs": 1,
      "needs_hidden": False, "needs_reference": False, "needs_old_pass": False}),
])
def test_every_algorithm_provides_the_whole_protocol(name, options, expected):
    from repogym.trainer.algorithms import Algorithm, make_algorithm

    algorithm = make_algorithm(name, options, hidden_size=8)
    assert isinstance(algorithm, Algorithm) and algorithm.name == name
    assert {key: getattr(algorithm, key) for key in expected} == expected
    assert len(list(algorithm.parameters())) == (2 if name == "ppo" else 0)  # PPO's value head: weight and bias
    # One call sequence for all, as the learner makes it: the old pass when asked for, then the loss.
    batch = collate([Sample(ids=[5, 6, 7], mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], reward=1.0)], pad_id=0)
    logprobs = token_logprobs(torch.zeros(1, 3, 10), batch.input_ids)
    hidden = torch.zeros(1, 3, 8) if algorithm.needs_hidden else None
    if algorithm.needs_old_pass:
        with torch.no_grad():
            algorithm.old_pass(batch, logprobs, hidden)
            assert isinstance(algorithm.finish_old_pass([batch]), dict)
    loss, metrics = algorithm.loss(logprobs, batch, 2.0, torch.zeros(1, 2) if algorithm.needs_reference else None,
                                   hidden=hidden)
    assert loss.dim() == 0 and metrics


def test_an_option_typo_names_a_close_match_and_the_valid_options_and_a_constructor_bug_keeps_its_traceback(
        monkeypatch):
    from repogym.trainer.algorithms import ALGORITHMS, check_options, make_algorithm

    with pytest.raises(ConfigError) as typo:
        make_algorithm("grpo", {"group_sise": 4})
    message = str(typo.value)
    assert "unknown option 'group_sise' (did you mean 'group_size'?)" in message
    assert "valid options: agg_length, baseline, clip_high, clip_low" in message and "tis_cap" in message
    assert typo.value.__cause__ is None and typo.value.__context__ is None  # checked before anything is built
    with pytest.raises(ConfigError, match=r"unknown options 'gama' \(did you mean 'gamma'\?\), 'zzz'; valid"):
        check_options("ppo", {"gama": 1.0, "zzz": 2, "lam": 0.9})
    check_options("sft", {"steps": 3, "loss_agg": "sequence"})
    for name in ALGORITHMS:
        check_options(name, {})

    # A TypeError raised inside a constructor is a bug to read, not a config error: it propagates as it is.
    def broken(options, hidden_size=None):
        return GRPO(GRPOConfig(**options), hidden_size)  # GRPO takes no hidden_size: a TypeError of ours

    monkeypatch.setattr(GRPO, "from_options", broken)
    with pytest.raises(TypeError, match="positional argument") as bug:
        make_algorithm("grpo", {"group_size": 4})
    assert any(entry.name == "broken" for entry in bug.traceback)  # the traceback reaches into the constructor


def test_truncated_episodes_count_in_their_group_and_are_left_out_of_the_loss():
    from repogym.envs.core.status import Status
    from repogym.trainer.train import mask_reason, trainable

    assert mask_reason(Status.UNRESOLVED, 9000, 4096, True) == "overlong"
    assert mask_reason(Status.CONTEXT_OVERFLOW, 100, 4096, True) == "context_overflow"
    assert mask_reason(Status.CONTEXT_OVERFLOW, 100, 4096, False) == ""
    assert mask_reason(Status.RESOLVED, 100, None, True) == ""
    rewards, reasons = [1.0, 0.0, 0.0, 0.0], ["", "", "", "context_overflow"]
    group = [Sample(ids=[0, 1], mask=[0, 1], logprobs=[0.0, -1.0], reward=r, meta={"episode": k, "masked": why})
             for k, (r, why) in enumerate(zip(rewards, reasons))]
    kept = trainable(GRPO(GRPOConfig(normalize_std=False)), [group])
    assert [s.meta["episode"] for s in kept] == [0, 1, 2]
    assert [s.advantage for s in kept] == pytest.approx([0.75, -0.25, -0.25])  # the mean counted all four
    assert trainable(GRPO(GRPOConfig()), []) == []


def test_rloo_baseline_is_the_mean_of_the_other_episodes():
    rewards = [1.0, 0.0, 0.0, 0.0]
    loo = group_advantages(rewards, normalize_std=False, leave_one_out=True)
    assert loo == pytest.approx([1.0 - 0.0, 0.0 - 1 / 3, 0.0 - 1 / 3, 0.0 - 1 / 3])
    group = [Sample(ids=[0, 1], mask=[0, 1], logprobs=[0.0, -1.0], reward=r) for r in rewards]
    prepared = GRPO(GRPOConfig(baseline="leave_one_out", normalize_std=False)).prepare([group])
    assert [s.advantage for s in prepared] == pytest.approx(loo)
    with pytest.raises(ConfigError, match="baseline must be 'mean' or 'leave_one_out'"):
        GRPO(GRPOConfig(baseline="median"))


def test_dr_grpo_divides_token_sums_by_a_constant_length():
    lp = [math.log(0.5), math.log(0.5)]
    long_ = Sample(ids=[0, 1, 1], mask=[0, 1, 1], logprobs=[0.0] + lp, reward=1.0, advantage=1.0)
    short = Sample(ids=[0, 1, 0], mask=[0, 1, 0], logprobs=[0.0, lp[0], 0.0], reward=1.0, advantage=1.0)
    batch = collate([long_, short], pad_id=0)
    algo = GRPO(GRPOConfig(loss_agg="constant", agg_length=8))
    denominator = normalizer([batch.loss_mask], algo.loss_agg, algo.agg_length)
    assert denominator == 2 * 8
    loss, _ = algo.loss(token_logprobs(torch.cat([_logits_for(lp), _logits_for(lp)]), batch.input_ids), batch, denominator)
    assert float(loss) == pytest.approx(-(1.0 + 1.0 + 1.0) / 16, rel=1e-5)  # three generated tokens, ratio 1, A 1
    with pytest.raises(ValueError, match="needs a positive length"):
        normalizer([batch.loss_mask], "constant", None)
    with pytest.raises(ConfigError, match="loss_agg must be"):
        GRPO(GRPOConfig(loss_agg="mean"))
