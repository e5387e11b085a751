"""Named suites: JSONL task files found by name (``builtin``) or given by path."""

from __future__ import annotations

from pathlib import Path

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.paths import cache_dir, task_repos_dir
from repogym.envs.core.registry import Registry
from repogym.envs.tasks.schema import Task, load_tasks

_REGISTERED: dict[str, Path] = {}


def register_suite(name: str, path: str | Path) -> None:
    """Make ``name`` resolve to a JSONL file."""
    _REGISTERED[name] = Path(path)


def list_suites() -> dict[str, Path]:
    """Every suite name known: registered ones and each ``task_repos/*.jsonl``."""
    found = {p.stem: p for p in sorted(task_repos_dir().glob("*.jsonl"))}
    # Suites generated from recipes (`repogym tasks build NAME`) live in the cache.
    found.update({p.stem: p for p in sorted((cache_dir() / "suites").glob("*.jsonl")) if p.stem not in found})
    found.update(_REGISTERED)
    return found


def suite_path(name_or_path: str) -> Path:
    """The file behind a suite name, or the path itself when it is a file."""
    suites = Registry("suite", list_suites(), error=lambda message: ConfigError(f"{message}, or a path to a JSONL file"))
    if name_or_path not in suites and Path(name_or_path).is_file():
        return Path(name_or_path)
    return suites.resolve(name_or_path)


def load_suite(name_or_path: str = "builtin", *, skip_no_f2p: bool = False) -> list[Task]:
    """Load a suite's tasks; one with no FAIL_TO_PASS test is refused, or skipped and counted with ``skip_no_f2p``
    (see :func:`repogym.envs.tasks.schema.load_tasks`)."""
    return load_tasks(suite_path(name_or_path), skip_no_f2p=skip_no_f2p)


def find_task(task_id: str, suite: str = "builtin") -> Task:
    """One task of a suite by id; a miss lists a few valid ids."""
    tasks = load_suite(suite)
    for task in tasks:
        if task.instance_id == task_id:
            return task
    sample = ", ".join(t.instance_id for t in tasks[:5])
    raise ConfigError(f"no task {task_id!r} in suite {suite!r} ({len(tasks)} tasks, e.g. {sample})")
