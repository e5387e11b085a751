"""Evaluation: pristine-sandbox grading, the tamper filter, statuses and the reward of an episode."""

from repogym.envs.rewards.evaluate import INFRA_ERROR, PATCH_FAILED, RESOLVED, UNRESOLVED, EvalRecord, grade
from repogym.envs.sandbox.testrun import run_tests

__all__ = ["EvalRecord", "grade", "run_tests", "RESOLVED", "UNRESOLVED", "PATCH_FAILED", "INFRA_ERROR"]


def reward_of(record: EvalRecord) -> float:
    """1.0 resolved, 0.0 otherwise; NaN for ``infra_error`` so it can never be averaged in as a silent 0."""
    if record.status == INFRA_ERROR:
        return float("nan")
    return 1.0 if record.resolved else 0.0
