"""The trajectory format, ``repogym.trajectory/2``: JSONL written line by line as the episode runs.

Lines: a ``header`` (format, task, agent, first observation), one ``step`` per tool call (action,
observation, reward, flags, info, and ``agent``: what the agent recorded of its turn; for token-level
agents ``agent.tokens`` = ids fed since the last turn, generated ids, their sampling logprobs, policy
version), and an ``end`` line (status, reward, eval record). A crash loses at most the step in flight.

The token sequence of an episode is the concatenation over steps of ``prompt`` (loss mask 0) then
``completion`` (loss mask 1): exactly the tokens the model was fed and generated, nothing re-rendered.
Version 1 files (no ``agent`` field) still read; they just carry no tokens.

The ``status`` of the end line is a :class:`repogym.envs.core.status.Status` value, written as its plain string;
:func:`status_of` reads one back. What is not an outcome (a reader's ``unfinished`` for a file with no end
line, or a status written by another tool) stays a plain string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repogym.agents.errors import TrajectoryFileError
from repogym.envs.core.errors import InfraError
from repogym.envs.core.status import Status

TRAJECTORY_FORMAT = "repogym.trajectory/2"
READABLE_FORMATS = ("repogym.trajectory/1", TRAJECTORY_FORMAT)
UNFINISHED = "unfinished"
"""The status of a trajectory with no end line (the writer stopped mid-episode): not an outcome."""


def status_of(text: str) -> Status | str:
    """``text`` as a :class:`Status`, or unchanged when it names an outcome ``Status`` does not hold."""
    try:
        return Status(text)
    except ValueError:
        return text


class TrajectoryWriter:
    """Appends trajectory lines to ``path`` (or nowhere when ``path`` is None), flushing each."""

    def __init__(self, path: str | Path | None):
        self.path = path
        try:
            if path:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._out = open(path, "w", encoding="utf-8") if path else None
        except OSError as exc:  # a full or read-only disk is the machine's failure, not the episode's
            raise InfraError("repogym.agents.trajectory", f"could not open {path}: {exc}") from exc

    def write(self, record: dict[str, Any]) -> None:
        if self._out:
            try:
                self._out.write(json.dumps(record, default=str) + "\n")
                self._out.flush()
            except OSError as exc:
                raise InfraError("repogym.agents.trajectory", f"could not write {self.path}: {exc}") from exc

    def close(self) -> None:
        if self._out:
            out, self._out = self._out, None
            try:
                out.close()
            except OSError:  # the flush of a full disk failed already, and was raised from write
                pass


@dataclass
class TokenSequence:
    """An episode's tokens: ids, a loss mask (1 on generated tokens), sampling logprobs (0.0 where mask 0).

    A context policy that rebuilt the prompt (``window``, ``summary``) starts a new context: ``starts`` holds
    the offset of each one, and :meth:`contexts` splits the episode into one training sequence per context,
    each turn in exactly the tokens it was generated after.
    """

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    """Policy version of each generated turn."""
    starts: list[int] = field(default_factory=lambda: [0])
    """Offset in ``ids`` where each context begins (the first at 0)."""

    def add_turn(self, prompt: list[int], completion: list[int], logprobs: list[float], version: int,
                 new_context: bool = False) -> None:
        if new_context and self.ids:
            self.starts.append(len(self.ids))
        self.ids += prompt + completion
        self.mask += [0] * len(prompt) + [1] * len(completion)
        self.logprobs += [0.0] * len(prompt) + list(logprobs)
        self.versions.append(version)

    def add_record(self, tok: dict[str, Any]) -> None:
        """Add a turn from its trajectory record (``step["agent"]["tokens"]``)."""
        self.add_turn(tok["prompt"], tok["completion"], tok["logprobs"], tok.get("version", 0),
                      bool(tok.get("new_context")))

    def contexts(self) -> list["TokenSequence"]:
        """One sequence per context (just ``[self]`` when the prompt only ever grew)."""
        if len(self.starts) == 1:
            return [self]
        bounds = self.starts + [len(self.ids)]
        return [TokenSequence(self.ids[a:b], self.mask[a:b], self.logprobs[a:b]) for a, b in zip(bounds, bounds[1:])]


@dataclass
class Trajectory:
    """A read trajectory file."""

    header: dict[str, Any]
    steps: list[dict[str, Any]]
    end: dict[str, Any] | None
    """None when the episode did not finish (the writer crashed or was killed)."""

    @property
    def actions(self) -> list[Any]:
        return [s["action"] for s in self.steps]

    @property
    def status(self) -> Status | str:
        """The end line's status (see :func:`status_of`), or :data:`UNFINISHED` without one."""
        return status_of((self.end or {}).get("status", UNFINISHED))

    def tokens(self) -> TokenSequence | None:
        """The token sequence, or None when the agent recorded no tokens (oracle, llm, v1 files)."""
        seq = TokenSequence()
        for step in self.steps:
            tok = (step.get("agent") or {}).get("tokens")
            if tok is None:
                return None
            seq.add_record(tok)
        return seq if self.steps else None


def read_trajectory(path: str | Path) -> Trajectory:
    """Read a trajectory file; a torn last line (the writer was killed mid-write) is ignored.

    A malformed file raises :class:`repogym.agents.errors.TrajectoryFileError` (a ``ValueError``) naming the line.
    """
    header, steps, end = None, [], None
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise TrajectoryFileError(path, i + 1, "not a JSON line") from None
        if not isinstance(record, dict):
            raise TrajectoryFileError(path, i + 1, "a trajectory line must be a JSON object")
        kind = record.get("type")
        if kind == "header":
            if record.get("format") not in READABLE_FORMATS:
                raise TrajectoryFileError(path, i + 1, f"unknown trajectory format {record.get('format')!r}; "
                                                       f"readable: {', '.join(READABLE_FORMATS)}")
            header = record
        elif kind == "step":
            steps.append(record)
        elif kind == "end":
            end = record
    if header is None:
        raise TrajectoryFileError(path, None, "no header line; not a repogym trajectory")
    return Trajectory(header, steps, end)


__all__ = ["READABLE_FORMATS", "TRAJECTORY_FORMAT", "UNFINISHED", "TokenSequence", "Trajectory",
           "TrajectoryFileError", "TrajectoryWriter", "read_trajectory", "status_of"]
