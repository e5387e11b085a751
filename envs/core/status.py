"""How an episode ended: the one vocabulary of outcomes, used by grading, rollouts, the trainer and the bench.

A :class:`Status` is a ``str`` (``Status.RESOLVED == "resolved"``), so JSON, SQLite rows and trajectories
keep their plain strings; read one back with ``Status(text)``.
"""

from __future__ import annotations

import math
from enum import StrEnum


class Status(StrEnum):
    """The outcome of one episode."""

    RESOLVED = "resolved"
    """Every FAIL_TO_PASS and PASS_TO_PASS test passed on the agent's patch, and no guard tripped."""
    UNRESOLVED = "unresolved"
    """The patch applied and the tests ran, but did not all pass (or a guard tripped)."""
    PATCH_FAILED = "patch_failed"
    """The agent's patch did not apply to a fresh checkout."""
    INFRA_ERROR = "infra_error"
    """Infrastructure (never the agent) failed: the episode says nothing about the policy."""
    INTERNAL_ERROR = "internal_error"
    """A bug of repogym's own ended the episode (:mod:`repogym.envs.core.bugs`): excluded, counted, logged."""
    NOT_SUBMITTED = "not_submitted"
    """The turn limit came first and grading on truncation is off (``EnvConfig.grade_on_truncation``)."""
    CONTEXT_OVERFLOW = "context_overflow"
    """The policy's context ran out before it submitted (the agent's outcome, reward 0)."""

    @property
    def resolved(self) -> bool:
        return self is Status.RESOLVED



def excluded(status: str, reward: float | None) -> bool:
    """An episode to leave out of training and metrics: an infrastructure failure, a bug of ours, or no (NaN)
    reward."""
    return status in (Status.INFRA_ERROR, Status.INTERNAL_ERROR) or reward is None or math.isnan(reward)


__all__ = ["Status", "excluded"]
