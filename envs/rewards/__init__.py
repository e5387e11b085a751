"""Evaluation: pristine-sandbox grading, the tamper filter, task validation and the reward of an episode.

The outcome of a grading is a :class:`repogym.envs.core.status.Status`; the facts reward components read live in
:mod:`repogym.envs.rewards.facts`.
"""

from repogym.envs.rewards.evaluate import EvalRecord, grade
from repogym.envs.sandbox.testrun import run_tests
from repogym.envs.core.status import Status

__all__ = ["EvalRecord", "grade", "reward_of", "run_tests"]


def reward_of(record: EvalRecord) -> float:
    """1.0 resolved, 0.0 otherwise; NaN for ``infra_error`` and ``internal_error`` so neither can ever be averaged in
    as a silent 0."""
    if record.status in (Status.INFRA_ERROR, Status.INTERNAL_ERROR):
        return float("nan")
    return 1.0 if record.resolved else 0.0
