"""The curriculum: difficulty buckets, learnability weights, promotion, suite mixing, exact state round trip."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from repogym.envs.tasks.schema import Task
from repogym.trainer.curriculum import Curriculum, CurriculumConfig


def _tasks(prefix: str, difficulties: dict[str, int]) -> list[Task]:
    return [Task(instance_id=f"{prefix}{name}", repo="o/r", base_commit="0" * 40, problem_statement="p",
                 difficulty=d) for name, d in difficulties.items()]


SUITES = {"a": _tasks("a-", {"e1": 1, "e2": 1, "m1": 2, "h1": 3}), "b": _tasks("b-", {"e1": 1, "m1": 2})}


def test_sampling_starts_at_the_easiest_level_and_respects_filters():
    cur = Curriculum(CurriculumConfig(suites={"a": 1.0}), SUITES)
    assert cur.level == 1
    assert {t.difficulty for t in cur.sample(50)} == {1}
    capped = Curriculum(CurriculumConfig(suites={"a": 1.0}, max_difficulty=2), SUITES)
    assert [t.instance_id for t in capped.all_tasks()] == ["a-e1", "a-e2", "a-m1"]
    with pytest.raises(ValueError, match="a-nope"):
        Curriculum(CurriculumConfig(suites={"a": 1.0}, task_ids=["a-e1", "a-nope"]), SUITES)
    with pytest.raises(ValueError, match="suite"):
        Curriculum(CurriculumConfig(suites={"zzz": 1.0}), SUITES)


def test_learnability_weights_favour_tasks_solved_sometimes():
    cur = Curriculum(CurriculumConfig(suites={"a": 1.0}, min_weight=0.01, min_episodes=1000), SUITES)
    for _ in range(10):
        cur.update("a-e1", True)   # always solved: p = 11/12
    for success in [True, False] * 5:
        cur.update("a-e2", success)  # half: p = 1/2, the most learnable
    assert cur.weight("a-e2") == pytest.approx(0.25)
    assert cur.weight("a-e1") == pytest.approx(11 / 12 * 1 / 12)
    counts = Counter(t.instance_id for t in cur.sample(2000))
    assert counts["a-e2"] > 2.5 * counts["a-e1"]
    uniform = Curriculum(CurriculumConfig(suites={"a": 1.0}, learnability=False), SUITES)
    uniform.stats = cur.stats
    assert uniform.weight("a-e1") == uniform.weight("a-e2") == 1.0


def test_level_rises_when_the_rolling_success_rate_passes_the_threshold():
    cur = Curriculum(CurriculumConfig(suites={"a": 1.0}, promote_threshold=0.75, window=8, min_episodes=8), SUITES)
    for success in [True, True, True, False, True, True, False]:  # 7 episodes: too few to leave
        cur.update("a-e1", success)
    assert cur.level == 1
    cur.update("a-e2", False)  # 8 episodes at 5/8 = 0.625: below the threshold
    assert cur.level == 1
    history = [True, True, True, False, True, True, False, False]
    while cur.level == 1:
        assert sum(history[-8:]) / 8 < 0.75  # not promoted while the last 8 are below the threshold
        cur.update("a-e1", True)
        history.append(True)
    assert sum(history[-8:]) == 6  # promoted on the first episode that took the window to 6/8
    assert cur.metrics()["curriculum/level"] == 2.0
    drawn = Counter(t.difficulty for t in cur.sample(1000))
    assert set(drawn) == {1, 2} and 0.1 < drawn[1] / 1000 < 0.3  # include_lower = 0.2


def test_suites_are_mixed_by_weight_and_shares_are_logged():
    cur = Curriculum(CurriculumConfig(suites={"a": 3.0, "b": 1.0}), SUITES)
    suites = Counter(t.instance_id[0] for t in cur.sample(2000))
    assert 0.7 < suites["a"] / 2000 < 0.8
    metrics = cur.metrics()
    assert metrics["curriculum/share/a"] == pytest.approx(suites["a"] / 2000)
    assert metrics["curriculum/tasks_active"] == 3.0  # a-e1, a-e2, b-e1


def test_state_round_trips_through_json_and_continues_the_same_sequence():
    config = CurriculumConfig(suites={"a": 1.0, "b": 1.0}, window=4, min_episodes=4, promote_threshold=0.5)
    cur = Curriculum(config, SUITES)
    for task in cur.sample(12):
        cur.update(task.instance_id, task.instance_id.endswith("e1"))
    restored = Curriculum(config, SUITES)
    restored.load_state_dict(json.loads(json.dumps(cur.state_dict())))
    assert restored.level == cur.level and restored.metrics() == cur.metrics()
    assert [t.instance_id for t in restored.sample(30)] == [t.instance_id for t in cur.sample(30)]
