"""Named suites: JSONL task files found by name (``builtin``) or given by path."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
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
    """One task of a suite by id; a miss names the closest ids and how to list them all."""
    return select_tasks(load_suite(suite), [task_id], suite)[0]


def select_tasks(tasks: Sequence[Task], task_ids: Sequence[str], suite: str = "builtin") -> list[Task]:
    """The tasks of ``tasks`` (one suite, called ``suite`` in messages) whose ids are in ``task_ids``, in the
    suite's order; an id the suite lacks is a :class:`ConfigError` naming the closest ids (see
    :func:`close_task_ids`) and the command that lists them all."""
    known = [t.instance_id for t in tasks]
    present = set(known)
    unknown = [task_id for task_id in dict.fromkeys(task_ids) if task_id not in present]
    if unknown:
        raise ConfigError(unknown_tasks_message(unknown, known, suite))
    wanted = set(task_ids)
    return [t for t in tasks if t.instance_id in wanted]


def close_task_ids(task_id: str, known: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` ids of ``known`` closest to ``task_id``, best first: by the whole id, then by the part after
    ``__`` (``tablekit-wrap`` finds ``repogym__tablekit-wrap-long-word-order``, a full id with the wrong owner
    finds the right one)."""
    found = difflib.get_close_matches(task_id, known, n=n, cutoff=0.6)
    by_tail: dict[str, list[str]] = {}
    for full in known:
        by_tail.setdefault(full.rpartition("__")[2], []).append(full)
    tail = task_id.rpartition("__")[2]
    for near in difflib.get_close_matches(tail, list(by_tail), n=n, cutoff=0.6):
        found += [full for full in by_tail[near] if full not in found]
    # A tail the user typed in part (a prefix of a long id) is close to nothing difflib scores high enough.
    found += [full for full in known if tail and full.rpartition("__")[2].startswith(tail) and full not in found]
    return found[:n]


def unknown_tasks_message(unknown: Sequence[str], known: Sequence[str], suite: str) -> str:
    """The error text for ids a suite lacks: each with its closest ids, then how to list the suite's ids."""
    def near(task_id: str) -> str:
        close = close_task_ids(task_id, known)
        return f"closest: {', '.join(close)}" if close else "no close match"

    listing = f"list its ids with `repogym tasks list --suite {suite}`"
    if len(unknown) == 1:
        return f"no task {unknown[0]!r} in suite {suite!r} ({len(known)} tasks; {near(unknown[0])}); {listing}"
    each = "; ".join(f"{task_id!r} ({near(task_id)})" for task_id in unknown)
    return f"no tasks {', '.join(map(repr, unknown))} in suite {suite!r} ({len(known)} tasks): {each}; {listing}"
