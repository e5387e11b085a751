"""The facts of an episode that reward components read, taken from its state and its sandbox.

:func:`tests_since_last_edit` and :func:`ran_tests_since_last_edit` read the episode's state
(:class:`repogym.envs.core.episode_state.EpisodeState`); :func:`analyze_sandbox` runs the tree-sitter analysis
(:mod:`repogym.envs.analysis`) of a sandbox's diff against the base commit's index, which is built once per
snapshot, on the host, from the snapshot's files. The environment reads these when it builds
:class:`repogym.envs.rewards.components.EpisodeFacts`; the ``inspect_diff`` tool shows the same facts to the
agent before it submits. Nothing here changes the sandbox.
"""

from __future__ import annotations

import io
import tarfile
import threading
from typing import TYPE_CHECKING

from repogym.envs.core.episode_state import EpisodeState, TestRunRecord
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.tasks.repos import snapshot
from repogym.envs.tasks.schema import Task

if TYPE_CHECKING:  # the analysis (tree-sitter) is imported on use
    from repogym.envs.analysis import DiffAnalysis, RepoIndex

_BASE_INDEXES: dict[str, RepoIndex] = {}
_MAX_BASE_INDEXES = 32
_LOCK = threading.Lock()


def base_index(task: Task) -> RepoIndex:
    """The index of the task's base commit (cached per snapshot)."""
    from repogym.envs.analysis import RepoIndex
    from repogym.envs.analysis.roots import PACKAGING_FILES
    snap = snapshot(task)
    with _LOCK:
        if snap.key not in _BASE_INDEXES:
            files = {}
            with tarfile.open(fileobj=io.BytesIO(snap.tar)) as tar:
                for member in tar.getmembers():
                    if member.isfile() and (member.name.endswith(".py") or member.name in PACKAGING_FILES):
                        files[member.name] = tar.extractfile(member).read()
            if len(_BASE_INDEXES) > _MAX_BASE_INDEXES:
                _BASE_INDEXES.clear()
            _BASE_INDEXES[snap.key] = RepoIndex.from_files(files)
        return _BASE_INDEXES[snap.key]


def analyze_sandbox(sandbox: Sandbox, task: Task, diff: str | None = None) -> DiffAnalysis:
    """The analysis of ``diff`` (default: the sandbox's current diff), reading changed files from ``sandbox``."""
    from repogym.envs.analysis import analyze_diff
    from repogym.envs.analysis.coverage import cached
    from repogym.envs.analysis.diffs import parse_diff
    diff = sandbox.diff() if diff is None else diff
    after: dict[str, bytes | None] = {}
    for path in (fd.new_path for fd in parse_diff(diff)):  # the paths as analyze_diff reads them
        if path and path.endswith(".py"):
            try:
                after[path] = sandbox.read_file(path, limit=8 << 20)
            except (FileNotFoundError, IsADirectoryError):
                after[path] = None
    # The covering tests of code the task's measured map saw are the measured ones (none before validation made it).
    return analyze_diff(base_index(task), diff, after, coverage=cached(snapshot(task).key))


def runs_since_last_edit(state: EpisodeState) -> list[TestRunRecord]:
    """The ``run_tests`` calls made after the last change to the repository, in order."""
    return [run for run in state.test_runs if run.turn > state.last_edit_turn]


def tests_since_last_edit(state: EpisodeState) -> dict[str, str]:
    """Outcome of each test the agent ran (with ``run_tests``) after its last change; later runs win."""
    outcomes: dict[str, str] = {}
    for run in runs_since_last_edit(state):
        outcomes.update(run.outcomes)
    return outcomes


def ran_tests_since_last_edit(state: EpisodeState) -> bool:
    """Whether the agent called ``run_tests`` (and it ran) after its last change, whatever tests it named."""
    return bool(runs_since_last_edit(state))


__all__ = ["analyze_sandbox", "base_index", "ran_tests_since_last_edit", "runs_since_last_edit",
           "tests_since_last_edit"]
