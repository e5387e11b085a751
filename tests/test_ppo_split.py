"""PPO's GAE over episodes split into several samples: the same advantages as the episode in one piece."""

import pytest
import torch

from repogym.trainer.algorithms.common import Sample, collate
from repogym.trainer.algorithms.ppo import PPO, PPOConfig, gae

GAMMA, LAM = 0.9, 0.8


def _sample(prompt: int, turns: list[tuple[int, int]], reward: float = 1.0, **meta) -> Sample:
    """A sequence of ``prompt`` context tokens then (generated, tool output) token counts per turn."""
    mask = [0] * prompt
    for generated, tool in turns:
        mask += [1] * generated + [0] * tool
    return Sample(ids=list(range(3, 3 + len(mask))), mask=mask, logprobs=[-0.5 * m for m in mask], reward=reward,
                  meta=meta)


def _joined(*parts: Sample) -> Sample:
    """The parts as one sequence: a later part's prompt reads like tool output between turns."""
    return Sample(ids=[i for p in parts for i in p.ids], mask=[m for p in parts for m in p.mask],
                  logprobs=[lp for p in parts for lp in p.logprobs], reward=parts[-1].reward)


def _random_values(batch, generator):
    batch.old_values = torch.randn(batch.loss_mask.shape, generator=generator)


def _generated(batch, row, field):
    return getattr(batch, field)[row][batch.loss_mask[row] > 0]


def _ppo() -> PPO:
    return PPO(PPOConfig(gamma=GAMMA, lam=LAM), hidden_size=2)


def test_a_split_episode_gets_the_advantages_of_the_joined_episode():
    generator = torch.Generator().manual_seed(0)
    first = _sample(3, [(2, 2), (3, 0)], episode=1, part=0, parts=2)
    second = _sample(4, [(2, 1), (2, 1)], episode=1, part=1, parts=2)
    others = [_sample(2, [(3, 0)], episode=0), _sample(1, [(2, 1), (1, 0)], reward=0.0, episode=2),
              _sample(2, [(2, 0)])]  # a sample without any episode meta: a whole episode
    # The parts in different micro-batches, the later part first, among other episodes of the same group.
    split = [collate([others[0], second], pad_id=0), collate([others[1], first, others[2]], pad_id=0)]
    for batch in split:
        _random_values(batch, generator)
    assert split[0].episode_keys == [(0, 0), (0, 1)] and split[1].episode_keys == [(0, 2), (0, 1), (0, -1)]
    assert split[0].parts == [(0, 1), (1, 2)] and split[1].parts == [(0, 1), (0, 2), (0, 1)]

    joined = collate([_joined(first, second)], pad_id=0)
    joined.old_values = torch.randn(joined.loss_mask.shape, generator=generator)  # arbitrary off the generated tokens
    joined.old_values[joined.loss_mask > 0] = torch.cat([_generated(split[1], 1, "old_values"),
                                                         _generated(split[0], 1, "old_values")])
    algo = _ppo()
    metrics = algo.finish_old_pass(split)
    algo.finish_old_pass([joined])
    assert set(metrics) == {"losses/explained_variance"}
    for field in ("token_advantages", "returns"):
        expected = _generated(joined, 0, field)
        got = torch.cat([_generated(split[1], 1, field), _generated(split[0], 1, field)])
        assert torch.allclose(got, expected, atol=1e-6), field
        # the whole episodes are untouched by the split one: as gae() gives them one row at a time
        for batch, row in ((split[0], 0), (split[1], 0), (split[1], 2)):
            adv, ret = gae(batch.old_values[row:row + 1], batch.loss_mask[row:row + 1], batch.rewards[row:row + 1],
                           GAMMA, LAM)
            assert torch.allclose(getattr(batch, field)[row], (adv if field == "token_advantages" else ret)[0],
                                  atol=1e-6)
    # nothing outside the generated tokens
    for batch in split:
        assert not batch.token_advantages[batch.loss_mask == 0].any()
    # the first part gets no reward of its own: with every value 0 its advantage is the discounted final reward
    for batch in split:
        batch.old_values = torch.zeros_like(batch.old_values)
    algo.finish_old_pass(split)
    steps_after = len(_generated(split[0], 1, "old_values"))
    assert float(_generated(split[1], 1, "token_advantages")[-1]) == pytest.approx((GAMMA * LAM) ** steps_after)


@pytest.mark.parametrize("missing", [1, 2])
def test_a_missing_part_is_skipped_and_the_last_present_part_gets_the_reward(missing):
    generator = torch.Generator().manual_seed(missing)
    parts = [_sample(2, [(2, 1), (1, 0)], episode=0, part=k, parts=3) for k in range(3)]
    present = [p for k, p in enumerate(parts) if k != missing]
    split = collate(present, pad_id=0)
    _random_values(split, generator)
    joined = collate([_joined(*present)], pad_id=0)
    joined.old_values = torch.zeros(joined.loss_mask.shape)
    joined.old_values[joined.loss_mask > 0] = torch.cat([_generated(split, r, "old_values") for r in range(2)])
    _ppo().finish_old_pass([split])
    _ppo().finish_old_pass([joined])
    got = torch.cat([_generated(split, r, "token_advantages") for r in range(2)])
    assert torch.allclose(got, _generated(joined, 0, "token_advantages"), atol=1e-6)


def test_a_part_given_twice_or_out_of_range_is_an_error():
    twice = collate([_sample(1, [(1, 0)], episode=0, part=0, parts=2)] * 2, pad_id=0)
    twice.old_values = torch.zeros(twice.loss_mask.shape)
    with pytest.raises(ValueError, match=r"episode \(0, 0\) has a part twice"):
        _ppo().finish_old_pass([twice])
    with pytest.raises(ValueError, match="expected 0 <= part < parts, got part 2 of 2"):
        collate([_sample(1, [(1, 0)], episode=0, part=2, parts=2)], pad_id=0)
    with pytest.raises(ValueError, match="old_pass was not called"):
        _ppo().finish_old_pass([collate([_sample(1, [(1, 0)])], pad_id=0)])


def test_old_pass_reads_the_value_head_on_the_hidden_states():
    algo = _ppo()
    with torch.no_grad():
        algo.value_head.weight.copy_(torch.tensor([[1.0, -1.0]]))
        algo.value_head.bias.fill_(0.5)
    batch = collate([_sample(1, [(2, 0)])], pad_id=0)
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [9.0, 9.0]]])
    algo.old_pass(batch, torch.zeros(1, 2), hidden)
    # the value of the state before each target: positions 0 and 1 of the hidden states
    assert batch.old_values.tolist() == [[1.5, -1.5]]
