"""Composable rewards: named components, weighted from config, each reported.

``reward = sum(weight * component(facts))``; every component's raw value goes to
``info["reward_components"]``. The default config is ``tests`` alone, so the plain reward stays 1/0.
Components (values before weighting):

- ``tests``: 1.0 when resolved, else 0.0; with option ``fraction=True``, the share of FAIL_TO_PASS passed
  (0.0 when a PASS_TO_PASS test broke).
- ``dependents_checked``: the share of the visible tests covering the changed symbols and their dependents
  that the agent ran, and saw, after its last edit (a run of any of a test's parameters counts). With no covering
  tests: 1.0 when it ran any tests after its last edit. 0.0 with no change at all. Covering tests are the
  analysis's: measured ones where the task has a coverage map (:mod:`repogym.envs.analysis.coverage`), static ones
  for code the map has not seen; option ``sources=("measured",)`` counts only the measured.
- ``dependents_broken`` (a penalty, <= 0): minus the share of covering PASS_TO_PASS tests that fail at grading
  (same ``sources`` option).
- ``syntax`` (a penalty): -1.0 when the final diff introduces syntax errors.
- ``format``: the share of tool calls that were well formed.
- ``steps`` (a cost): minus the number of turns; give it a small weight (e.g. 0.01 per turn).

``infra_error`` and ``internal_error`` episodes get no components at all and a NaN reward: they are flagged for
exclusion. A component reads the episode's facts as objects (:class:`EpisodeFacts`: the
:class:`repogym.envs.rewards.evaluate.EvalRecord`, the :class:`repogym.envs.analysis.DiffAnalysis`), never ``info``.
Register your own with :func:`register_component`, and named weightings with :func:`register_preset`. The
facts components read come from :mod:`repogym.envs.rewards.facts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from repogym.envs.core.registry import Registry
from repogym.envs.core.status import Status
from repogym.envs.rewards.evaluate import EvalRecord

if TYPE_CHECKING:  # the analysis (tree-sitter) is imported on use
    from repogym.envs.analysis import DiffAnalysis


@dataclass
class EpisodeFacts:
    """What reward components may read about a finished episode."""

    eval: EvalRecord
    """The grading of the final diff."""
    turns: int
    """Steps taken (malformed calls and the submit included)."""
    well_formed: int
    """Of those, the calls that parsed and named a known tool with valid arguments."""
    analysis: DiffAnalysis | None = None
    """The analysis of the final diff, when it ran (an empty one for an empty diff)."""
    tests_after_last_edit: dict[str, str] = field(default_factory=dict)
    """Outcome of every test the agent ran after its last change to the repository."""
    changed_anything: bool = False
    """Whether the final diff is non-empty."""
    ran_tests_after_last_edit: bool = False
    """Whether the agent called ``run_tests`` (and it ran) after its last change."""
    pass_to_pass: list[str] = field(default_factory=list)
    """The task's PASS_TO_PASS ids."""


class Component(Protocol):
    """A reward component: the value of one named term of the reward, before weighting."""

    def __call__(self, facts: EpisodeFacts, **options: Any) -> float: ...


COMPONENTS: Registry[Component] = Registry("reward component")


def register_component(name: str, fn: Component) -> None:
    """Make ``fn(facts, **options) -> float`` available to reward configs as ``name``."""
    COMPONENTS.register(name, fn)


def component(name: str) -> Component:
    """A component by name; a miss lists the valid names."""
    return COMPONENTS.resolve(name)


def covering_tests(facts: EpisodeFacts, sources: tuple[str, ...] = ("measured", "static")) -> set[str]:
    """Test ids (parameters left out) the analysis names as covering the change: ``measured`` ones (a coverage map
    saw them run the changed code) and ``static`` ones (the reverse graph, for code the map has not seen)."""
    return {t["test_id"] for t in (facts.analysis.tests if facts.analysis else [])
            if t.get("test_id") and t.get("source", "static") in sources}


def _unparametrized(test_id: str) -> str:
    """``t.py::test_x[1-a]`` -> ``t.py::test_x``: covering tests are named without parameters."""
    if test_id.endswith("]"):
        head, sep, last = test_id.rpartition("::")
        return head + sep + last.partition("[")[0]
    return test_id


def _tests(facts: EpisodeFacts, fraction: bool = False) -> float:
    if not fraction:
        return 1.0 if facts.eval.resolved else 0.0
    if facts.eval.pass_to_pass.get("passed", 0) < facts.eval.pass_to_pass.get("total", 0):
        return 0.0
    return facts.eval.f2p_fraction


def _dependents_checked(facts: EpisodeFacts, sources: tuple[str, ...] = ("measured", "static")) -> float:
    if not facts.changed_anything:
        return 0.0
    covering = covering_tests(facts, tuple(sources))
    if not covering:
        return 1.0 if facts.ran_tests_after_last_edit else 0.0
    ran = {_unparametrized(t) for t in facts.tests_after_last_edit}  # a run of any parameter counts
    return len(covering & ran) / len(covering)


def _dependents_broken(facts: EpisodeFacts, sources: tuple[str, ...] = ("measured", "static")) -> float:
    covering = covering_tests(facts, tuple(sources))
    graded = sorted(t for t in set(facts.pass_to_pass) & set(facts.eval.tests) if _unparametrized(t) in covering)
    if not graded:
        return 0.0
    return -sum(facts.eval.tests[t] != "passed" for t in graded) / len(graded)


def _syntax(facts: EpisodeFacts) -> float:
    return -1.0 if facts.analysis and facts.analysis.syntax_errors else 0.0


def _format(facts: EpisodeFacts) -> float:
    return facts.well_formed / facts.turns if facts.turns else 0.0


def _steps(facts: EpisodeFacts) -> float:
    return -float(facts.turns)


for _name, _fn in {"tests": _tests, "dependents_checked": _dependents_checked, "dependents_broken": _dependents_broken,
                   "syntax": _syntax, "format": _format, "steps": _steps}.items():
    register_component(_name, _fn)


PRESETS: Registry[dict[str, float]] = Registry("reward preset", {
    "default": {"tests": 1.0},
    # The design's process reward: correctness first, a bonus for checking what the change might break,
    # and a small one for well-formed calls.
    "process": {"tests": 1.0, "dependents_checked": 0.3, "format": 0.1},
    # Correctness plus a bonus for well-formed calls: an episode that fixes the bug and then writes
    # malformed calls until the turn limit (it is graded all the same) earns less than a clean one, so RL
    # does not reinforce the malformed text.
    "shaped": {"tests": 1.0, "format": 0.2},
})
"""Named weightings (component name -> weight) that ``EnvConfig(reward=<name>)`` accepts."""


def register_preset(name: str, weights: dict[str, float]) -> None:
    """Make ``weights`` available to ``RewardConfig.preset`` and ``EnvConfig(reward=...)`` as ``name``."""
    PRESETS.register(name, dict(weights))


@dataclass
class RewardConfig:
    """Which components count, with what weight and options."""

    weights: dict[str, float] = field(default_factory=lambda: {"tests": 1.0})
    """Component name -> weight."""
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Component name -> keyword options (e.g. ``{"tests": {"fraction": True}}``)."""

    def __post_init__(self):
        for name in list(self.weights) + list(self.options):
            component(name)  # fail early on a typo

    @classmethod
    def preset(cls, name: str) -> RewardConfig:
        """A named preset of :data:`PRESETS` (``default``: tests only; ``process``; ``shaped``); a miss lists
        the valid names."""
        return cls(weights=dict(PRESETS.resolve(name)))

    @property
    def needs_analysis(self) -> bool:
        return bool({"dependents_checked", "dependents_broken", "syntax"} & set(self.weights))


def compute_reward(config: RewardConfig, facts: EpisodeFacts) -> tuple[float, dict[str, float] | None]:
    """``(total, {component: value})``; ``(nan, None)`` for infrastructure errors and bugs of ours."""
    if facts.eval.status in (Status.INFRA_ERROR, Status.INTERNAL_ERROR):
        return math.nan, None
    values = {name: float(component(name)(facts, **config.options.get(name, {}))) for name in config.weights}
    return sum(config.weights[n] * v for n, v in values.items()), values
