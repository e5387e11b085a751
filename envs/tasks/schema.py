"""The task record and its JSONL files.

A task is a SWE-bench instance (``instance_id``, ``repo``, ``base_commit``, ``problem_statement``, ``patch``,
``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ...) plus repogym's own fields (``difficulty``, ``setup``,
``test_command``). SWE-bench and SWE-Gym files load unchanged: list fields given as JSON-encoded strings
are decoded, our fields take defaults when missing, and unknown fields are kept in ``extra`` so that
saving a loaded file loses nothing.

``difficulty`` is an integer 1..5, or one of SWE-bench Verified's time buckets (:data:`DIFFICULTY_BUCKETS`),
which loads as its integer with the text kept in ``extra["difficulty_text"]``: a saved record holds both, so it
loads back to the same task. Other datasets' row shapes (SWE-smith, R2E-Gym, ...) are converted by
:mod:`repogym.envs.tasks.datasets`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from repogym.envs.errors import TaskFileError

DEFAULT_TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"
SWEBENCH_OPTIONAL = ("hints_text", "created_at", "version", "environment_setup_commit")
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement")
# SWE-bench Verified's annotators estimated the time an experienced engineer needs for the fix. The buckets
# widen (an hour, three hours, open-ended), so they map onto our 1..5 scale with gaps: 3 stays "unknown".
DIFFICULTY_BUCKETS = {
    "<15 min fix": 1,
    "15 min - 1 hour": 2,
    "1-4 hours": 4,
    ">4 hours": 5,
}
"""SWE-bench Verified's ``difficulty`` text -> our integer difficulty."""


@dataclass
class Task:
    """One bug-fix task over a repository at a base commit."""

    instance_id: str
    """Unique id, e.g. ``repogym__cfgparse-001``."""
    repo: str
    """Repository name (``owner/name``); resolved to a git source by :mod:`repogym.envs.tasks.repos`."""
    base_commit: str
    """Commit the agent starts from."""
    problem_statement: str
    """The issue text shown to the agent."""
    patch: str = ""
    """Gold patch (never shown to the agent)."""
    test_patch: str = ""
    """Tests added at evaluation time, hidden from the agent."""
    FAIL_TO_PASS: list[str] = field(default_factory=list)
    """Test ids that must fail at the base commit and pass after the fix."""
    PASS_TO_PASS: list[str] = field(default_factory=list)
    """Test ids that pass before and must still pass after the fix."""
    difficulty: int = 3
    """1 (one function) .. 5 (hardest); 3 when unknown."""
    setup: dict[str, Any] = field(default_factory=dict)
    """What the environment image needs, e.g. ``{"pip": ["requests==2.32"], "source": "builtin:cfgparse"}``."""
    test_command: str = DEFAULT_TEST_COMMAND
    """Command that runs the tests from the repository root; test ids are appended to it."""
    hints_text: str = ""
    created_at: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this schema does not know, kept verbatim for round trips."""

    @property
    def env_key(self) -> str:
        """Tasks with the same key share an environment image (same repo, same setup)."""
        return json.dumps({"repo": self.repo, "setup": self.setup}, sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record, with ``extra`` merged back at the top level."""
        record = {k: v for k, v in dataclasses.asdict(self).items() if k != "extra"}
        record.update(self.extra)
        return record

    def public_view(self) -> dict[str, Any]:
        """What an agent may see: no gold patch, no hidden tests."""
        return {"instance_id": self.instance_id, "repo": self.repo, "base_commit": self.base_commit,
                "problem_statement": self.problem_statement, "difficulty": self.difficulty}

    @classmethod
    def from_dict(cls, record: dict[str, Any], *, path: str = "<dict>", line: int | None = None) -> "Task":
        """Build a task from a JSON object; raises :class:`TaskFileError` naming the bad field."""
        if not isinstance(record, dict):
            raise TaskFileError(path, line, None, f"expected a JSON object, got {type(record).__name__}")

        def fail(name: str, msg: str) -> TaskFileError:
            return TaskFileError(path, line, name, msg)

        for name in REQUIRED:
            if name not in record:
                raise fail(name, "missing required field")
            if not isinstance(record[name], str) or not record[name].strip():
                raise fail(name, f"expected a non-empty string, got {record[name]!r:.60}")
        kwargs: dict[str, Any] = {name: record[name] for name in REQUIRED}
        for name in ("patch", "test_patch", "test_command", *SWEBENCH_OPTIONAL):
            if name in record and record[name] is not None:
                if not isinstance(record[name], str):
                    raise fail(name, f"expected a string, got {type(record[name]).__name__}")
                kwargs[name] = record[name]
        for name in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            kwargs[name] = test_list(record.get(name, []), name, path, line)
        difficulty_text = None
        if "difficulty" in record and record["difficulty"] is not None:
            kwargs["difficulty"], difficulty_text = _difficulty(record["difficulty"], fail)
        if "setup" in record and record["setup"] is not None:
            if not isinstance(record["setup"], dict):
                raise fail("setup", f"expected an object, got {type(record['setup']).__name__}")
            kwargs["setup"] = dict(record["setup"])
        if not kwargs.get("test_command", DEFAULT_TEST_COMMAND).strip():
            raise fail("test_command", "expected a non-empty command")
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs["extra"] = {k: v for k, v in record.items() if k not in known}
        if difficulty_text is not None:
            kwargs["extra"]["difficulty_text"] = difficulty_text
        return cls(**kwargs)


def _difficulty(value: Any, fail: Callable[[str, str], TaskFileError]) -> tuple[int, str | None]:
    """The integer difficulty, and the dataset's text when it was given as a bucket."""
    if isinstance(value, str):
        if value.strip() in DIFFICULTY_BUCKETS:
            return DIFFICULTY_BUCKETS[value.strip()], value
        known = ", ".join(repr(b) for b in DIFFICULTY_BUCKETS)
        raise fail("difficulty", f"unknown difficulty bucket {value!r:.60}: expected an integer 1..5 or one of "
                                 f"SWE-bench Verified's buckets {known}")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
        raise fail("difficulty", f"expected an integer 1..5, got {value!r:.60}")
    return value, None


def test_list(value: Any, name: str, path: str, line: int | None) -> list[str]:
    """A list of test ids from a record's field (a list, or its JSON string); :class:`TaskFileError` otherwise."""
    # SWE-bench's published files store these lists as JSON-encoded strings.
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise TaskFileError(path, line, name, f"expected a list of test ids or its JSON string: {exc}") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise TaskFileError(path, line, name, f"expected a list of strings, got {value!r:.80}")
    return list(value)


def load_tasks(path: str | Path) -> list[Task]:
    """Load a JSONL (or a JSON array) task file; errors name the line and the field."""
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(str(path), None, None, "no such task file")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskFileError(str(path), exc.lineno, None, f"invalid JSON: {exc.msg}") from None
        numbered = [(None, r) for r in records]
    else:
        numbered = []
        for lineno, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                numbered.append((lineno, json.loads(raw)))
            except json.JSONDecodeError as exc:
                raise TaskFileError(str(path), lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    tasks, seen = [], {}
    for lineno, record in numbered:
        task = Task.from_dict(record, path=str(path), line=lineno)
        if task.instance_id in seen:
            raise TaskFileError(str(path), lineno, "instance_id",
                                f"duplicate id {task.instance_id!r} (first on line {seen[task.instance_id]})")
        seen[task.instance_id] = lineno
        tasks.append(task)
    return tasks


def save_tasks(tasks: Iterable[Task], path: str | Path) -> None:
    """Write tasks as JSONL, one record a line, atomically."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(path)
