"""What one episode has done so far, as the environment, its tools and the reward facts share it.

The environment makes a fresh :class:`EpisodeState` on every ``reset`` and keeps ``turn``, ``tree_id`` and
``last_edit_turn`` up to date; ``run_tests`` appends a :class:`TestRunRecord`; ``inspect_diff`` and the
reward facts (:mod:`repogym.envs.rewards.facts`) read it. It holds no sandbox and no task, and this module
imports nothing of repogym's, so every layer may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TestRunRecord:
    """One ``run_tests`` call that ran: when, what was asked for, and how each test came out."""

    __test__ = False  # a dataclass, not a pytest test class

    turn: int
    """The turn of the call."""
    tests: list[str]
    """The test ids or files asked for; empty for all."""
    outcomes: dict[str, str]
    """Test id -> outcome (``passed``, ``failed``, ``skipped``, ``error``, ...)."""


@dataclass
class EpisodeState:
    """The per-episode state the environment and its tools share."""

    turn: int = 0
    """The current turn (the step being taken; 0 before the first)."""
    last_edit_turn: int = 0
    """The last turn that changed the repository's content (0: none yet)."""
    tree_id: str | None = None
    """The git tree of the repository after the last editing call; ``None``: the base commit's tree."""
    test_runs: list[TestRunRecord] = field(default_factory=list)
    """Every ``run_tests`` call that ran, in order."""
