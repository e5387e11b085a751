"""Evaluation: pristine-sandbox grading, the tamper filter, task validation and the reward of an episode.

The outcome of a grading is a :class:`repogym.envs.core.status.Status`; the facts reward components read live in
:mod:`repogym.envs.rewards.facts`.
"""

from repogym.envs.rewards.evaluate import EvalRecord, grade
from repogym.envs.sandbox.testrun import run_tests

__all__ = ["EvalRecord", "grade", "run_tests"]
