"""The task record and its JSONL files.

A task is a SWE-bench instance (``instance_id``, ``repo``, ``base_commit``, ``problem_statement``, ``patch``,
``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ...) plus repogym's own fields (``difficulty``, ``setup``,
``test_command``). SWE-bench and SWE-Gym files load unchanged: list fields given as JSON-encoded strings
are decoded, our fields take defaults when missing, and unknown fields are kept in ``extra`` so that
saving a loaded file loses nothing.

Guaranteed: no task loads that cannot fail. A record with no FAIL_TO_PASS test is refused
(:class:`TaskCannotFail`): grading would resolve it for any patch, the empty one included, once its PASS_TO_PASS
tests pass. Loaders skip such records instead, with one warning that counts them, when told to (``skip_no_f2p``).
An unknown field spelt like a known one (``fail_to_pass``, ``FAIL_TO_PAS``, ``test_comand``: the same letters up
to case and ``_``/``-``, or a close misspelling of a field the record lacks) is an error naming the field it
resembles, since keeping it as an extra would silently drop its value; other unknown fields are kept.

``difficulty`` is an integer 1..5, or one of SWE-bench Verified's time buckets (:data:`DIFFICULTY_BUCKETS`),
which loads as its integer with the text kept in ``extra["difficulty_text"]``: a saved record holds both, so it
loads back to the same task. Other datasets' row shapes (SWE-smith, R2E-Gym, ...) are converted by
:mod:`repogym.envs.tasks.datasets`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from repogym.envs.core.errors import TaskCannotFail, TaskFileError

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
MISSPELLING_CUTOFF = 0.85
"""difflib ratio from which an unknown field counts as a misspelling of a known field the record lacks."""

log = logging.getLogger(__name__)


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

        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        for name in record:
            meant = None if name in known or record[name] is None else misspelt_field(name, known, record)
            if meant is not None:
                raise fail(name, f"unknown field {name!r}: did you mean {meant!r}? (an unknown field's value is "
                                 f"ignored, so the task would not mean what it says)")
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
        kwargs["extra"] = {k: v for k, v in record.items() if k not in known and k != "extra"}
        if difficulty_text is not None:
            kwargs["extra"]["difficulty_text"] = difficulty_text
        if not kwargs["FAIL_TO_PASS"]:
            raise TaskCannotFail(path, line, "FAIL_TO_PASS", f"task {record['instance_id']!r} has no FAIL_TO_PASS test, "
                                 "so no patch can fail it (even the empty one would be resolved); list the tests the "
                                 "fix must make pass, or load with skip_no_f2p=True (--skip-no-f2p) to leave it out")
        return cls(**kwargs)


def _normalized(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.lower())


def misspelt_field(name: str, known: Iterable[str], record: dict[str, Any]) -> str | None:
    """The known field that unknown field ``name`` of ``record`` is a misspelling of, or None.

    The same letters up to case and separators always count; a close spelling (difflib, :data:`MISSPELLING_CUTOFF`,
    at most two letters longer or shorter) only when the record lacks that field, since real datasets carry fields
    named after ours beside them (``problem_statement_raw``, ``difficulty_text``, ``versions``)."""
    by_key = {_normalized(k): k for k in known}
    key = _normalized(name)
    if key in by_key:
        return by_key[key]
    for close in difflib.get_close_matches(key, by_key, n=3, cutoff=MISSPELLING_CUTOFF):
        if abs(len(close) - len(key)) <= 2 and by_key[close] not in record:
            return by_key[close]
    return None


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


def load_tasks(path: str | Path, *, skip_no_f2p: bool = False) -> list[Task]:
    """Load a JSONL (or a JSON array) task file; errors name the line and the field.

    A task with no FAIL_TO_PASS test is refused (:class:`TaskCannotFail`); ``skip_no_f2p`` leaves such tasks out
    instead, with one warning on this module's logger that counts and names them."""
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
    tasks, seen, skipped = [], {}, []
    for lineno, record in numbered:
        try:
            task = Task.from_dict(record, path=str(path), line=lineno)
        except TaskCannotFail:
            if not skip_no_f2p:
                raise
            skipped.append(f"{record['instance_id']} (line {lineno})" if lineno else record["instance_id"])
            continue
        if task.instance_id in seen:
            raise TaskFileError(str(path), lineno, "instance_id",
                                f"duplicate id {task.instance_id!r} (first on line {seen[task.instance_id]})")
        seen[task.instance_id] = lineno
        tasks.append(task)
    if skipped:
        shown = ", ".join(skipped[:5]) + (f", ... ({len(skipped) - 5} more)" if len(skipped) > 5 else "")
        log.warning("skipped %d task%s with no FAIL_TO_PASS in %s: %s", len(skipped),
                    "" if len(skipped) == 1 else "s", path, shown)
    return tasks


def save_tasks(tasks: Iterable[Task], path: str | Path) -> None:
    """Write tasks as JSONL, one record a line, atomically."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(path)
