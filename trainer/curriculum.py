"""The curriculum: which tasks the next RL step trains on.

Tasks are bucketed by difficulty. The active level starts at the easiest and rises when the rolling
success rate at that level passes ``promote_threshold``. Within a level, tasks are weighted by
learnability p*(1-p) of their own smoothed success estimate: tasks solved sometimes (not always, not
never) carry the most gradient signal in GRPO. Several suites are mixed by weight. Callers must not
report infra-error episodes (they say nothing about the policy).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from repogym.envs.tasks.schema import Task


@dataclass
class CurriculumConfig:
    """Which tasks, and how the active difficulty and task weights move."""

    suites: dict[str, float] = field(default_factory=lambda: {"builtin": 1.0})
    """Suite name -> mixing weight."""
    task_ids: list[str] | None = None
    """Only these tasks (None: all tasks of the suites)."""
    max_difficulty: int | None = None
    """Drop tasks harder than this."""
    start_level: int | None = None
    """Starting difficulty (None: the lowest present)."""
    promote_threshold: float = 0.7
    """Rolling success rate of the active level that raises it to the next present difficulty."""
    window: int = 32
    """Episodes in the rolling window of each level."""
    min_episodes: int = 16
    """Episodes at a level before it can be left."""
    learnability: bool = True
    """Weight tasks by p*(1-p), p = (successes+1)/(attempts+2); False: uniform within a level."""
    min_weight: float = 0.05
    """Floor of a task's weight, so solved and unsolved tasks keep being revisited."""
    include_lower: float = 0.2
    """Share of samples drawn from levels below the active one (once there are any)."""
    seed: int = 0


class Curriculum:
    """Samples tasks and learns from episode outcomes; its whole state round-trips through ``state_dict``."""

    def __init__(self, config: CurriculumConfig | None = None, tasks_by_suite: dict[str, list[Task]] | None = None):
        self.config = c = config or CurriculumConfig()
        if tasks_by_suite is None:
            from repogym.envs.tasks.suites import load_suite

            tasks_by_suite = {name: load_suite(name) for name in c.suites}
        unknown = sorted(set(c.suites) - set(tasks_by_suite))
        if unknown:
            raise ValueError(f"no tasks given for suite(s) {unknown}")
        wanted = set(c.task_ids) if c.task_ids is not None else None
        self.buckets: dict[str, dict[int, list[Task]]] = {}
        self._tasks: dict[str, Task] = {}
        self._suite_of: dict[str, str] = {}
        for suite in c.suites:
            for task in tasks_by_suite[suite]:
                if wanted is not None and task.instance_id not in wanted:
                    continue
                if c.max_difficulty is not None and task.difficulty > c.max_difficulty:
                    continue
                self.buckets.setdefault(suite, {}).setdefault(task.difficulty, []).append(task)
                self._tasks[task.instance_id] = task
                self._suite_of[task.instance_id] = suite
        if wanted is not None and wanted - set(self._tasks):
            raise ValueError(f"task_ids not found in the suites (or above max_difficulty): "
                             f"{sorted(wanted - set(self._tasks))}")
        self.levels = sorted({t.difficulty for t in self._tasks.values()})
        start = c.start_level if c.start_level is not None else (self.levels[0] if self.levels else 1)
        self.level = min((lv for lv in self.levels if lv >= start), default=start)
        self.stats: dict[str, list[int]] = {tid: [0, 0] for tid in self._tasks}  # [successes, attempts]
        self.windows: dict[int, deque] = {lv: deque(maxlen=c.window) for lv in self.levels}
        self.samples_by_suite: dict[str, int] = {s: 0 for s in c.suites}
        self._rng = random.Random(c.seed)

    def all_tasks(self) -> list[Task]:
        """Every task the curriculum may pick, easiest first."""
        return sorted(self._tasks.values(), key=lambda t: (t.difficulty, t.instance_id))

    def task(self, task_id: str) -> Task:
        if task_id not in self._tasks:
            raise ValueError(f"unknown task {task_id!r} for this curriculum")
        return self._tasks[task_id]

    def weight(self, task_id: str) -> float:
        """The sampling weight of a task within its level."""
        if not self.config.learnability:
            return 1.0
        wins, tries = self.stats[task_id]
        p = (wins + 1) / (tries + 2)
        return max(p * (1 - p), self.config.min_weight)

    def sample(self, n: int) -> list[Task]:
        """``n`` tasks for the next step (deterministic given the seed and the history of calls)."""
        return [self._one() for _ in range(n)]

    def _one(self) -> Task:
        c = self.config
        suites = [s for s in c.suites if self.buckets.get(s)]
        suite = self._rng.choices(suites, weights=[c.suites[s] for s in suites])[0]
        levels = sorted(self.buckets[suite])
        active = [lv for lv in levels if lv <= self.level] or levels[:1]
        lower = [lv for lv in active if lv < self.level]
        if lower and self._rng.random() < c.include_lower:
            tasks = [t for lv in lower for t in self.buckets[suite][lv]]
        else:
            tasks = self.buckets[suite][max(active)]
        self.samples_by_suite[suite] += 1
        return self._rng.choices(tasks, weights=[self.weight(t.instance_id) for t in tasks])[0]

    def update(self, task_id: str, success: bool) -> None:
        """Record one finished (non-infra-error) episode; may raise the active level."""
        if task_id not in self._tasks:
            raise ValueError(f"unknown task {task_id!r} for this curriculum")
        stats = self.stats[task_id]
        stats[0] += int(bool(success))
        stats[1] += 1
        difficulty = self._tasks[task_id].difficulty
        self.windows[difficulty].append(int(bool(success)))
        window = self.windows.get(self.level)
        higher = [lv for lv in self.levels if lv > self.level]
        if window is not None and higher and len(window) >= self.config.min_episodes \
                and sum(window) / len(window) >= self.config.promote_threshold:
            self.level = higher[0]
            window.clear()

    def metrics(self) -> dict[str, float]:
        """Namespaced state for the metrics log."""
        window = self.windows.get(self.level) or []
        active = [t for t in self._tasks.values() if t.difficulty <= self.level]
        total = max(sum(self.samples_by_suite.values()), 1)
        out = {"curriculum/level": float(self.level),
               "curriculum/level_success_rate": sum(window) / len(window) if window else 0.0,
               "curriculum/tasks_active": float(len(active)),
               "curriculum/mean_learnability": (sum(self.weight(t.instance_id) for t in active) / len(active)
                                                if active else 0.0)}
        for suite, count in self.samples_by_suite.items():
            out[f"curriculum/share/{suite}"] = count / total
        return out

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state, RNG included."""
        version, internal, gauss = self._rng.getstate()
        return {"level": self.level, "stats": {k: list(v) for k, v in self.stats.items()},
                "windows": {str(k): list(v) for k, v in self.windows.items()},
                "samples_by_suite": dict(self.samples_by_suite), "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.level = state["level"]
        self.stats = {k: list(v) for k, v in state["stats"].items()}
        for k, values in state["windows"].items():
            self.windows[int(k)] = deque(values, maxlen=self.config.window)
        self.samples_by_suite = dict(state["samples_by_suite"])
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
