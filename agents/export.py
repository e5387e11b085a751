"""Trajectories (``repogym.trajectory/1`` and ``/2`` files) as one row per episode, in JSONL or Parquet files that
Hugging Face ``datasets`` loads (``load_dataset("json" | "parquet", data_files=...)``).

A row (every key always present, ``None`` where the trajectory has no value; :func:`arrow_schema` is its Arrow
form):
``task_id``, ``agent``, ``status`` (the end line's, or ``unfinished``), ``reward`` (None when unfinished or
NaN: an infrastructure failure is no reward, never 0), ``turns``, ``seed``, ``format``, ``source`` (the file),
``messages`` and, for token-level agents (``hf``, TRL rollouts), ``input_ids``, ``loss_mask``, ``logprobs`` and
``context_starts`` (see :class:`repogym.agents.trajectory.TokenSequence`).

``messages`` is the episode in chat form: the first observation as the ``user`` message, then per step an
``assistant`` message and the observation that answered it. The assistant's ``content`` is the text the agent
wrote, verbatim (for text agents: with its ``<tool_call>`` block); ``tool_calls`` is the call repogym parsed and
ran, OpenAI style, ``arguments`` a JSON string (empty when the action did not parse: the answer is then the
error observation, as a ``user`` message). Every message has the keys ``role``, ``content``, ``tool_calls`` and
``tool_call_id``, so the rows share one schema.

Guaranteed: token fields are exactly the recorded ids (nothing re-tokenized); a trajectory with no tokens gets
None there. Not guaranteed: the agent's system prompt is not in a trajectory, so ``messages`` starts at the
task; re-rendering ``messages`` with a chat template need not give ``input_ids`` (train on the ids).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from repogym.agents.errors import TrajectoryFileError
from repogym.agents.trajectory import Trajectory, read_trajectory
from repogym.envs.actions import parse_action
from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.tools.base import ToolError

FORMATS = ("jsonl", "parquet")
TOKEN_FIELDS = ("input_ids", "loss_mask", "logprobs", "context_starts")


def arrow_schema():
    """The Arrow schema of a row (the Parquet file's schema)."""
    import pyarrow as pa

    call = pa.struct([("id", pa.string()), ("type", pa.string()),
                      ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(call)),
                         ("tool_call_id", pa.string())])
    return pa.schema([("task_id", pa.string()), ("agent", pa.string()), ("status", pa.string()),
                      ("reward", pa.float64()), ("turns", pa.int64()), ("seed", pa.int64()),
                      ("format", pa.string()), ("source", pa.string()), ("messages", pa.list_(message)),
                      ("input_ids", pa.list_(pa.int64())), ("loss_mask", pa.list_(pa.int8())),
                      ("logprobs", pa.list_(pa.float64())), ("context_starts", pa.list_(pa.int64()))])


@dataclass
class ExportSummary:
    """What an export wrote."""

    out: Path
    rows: int
    skipped: list[str] = field(default_factory=list)
    """Files found in folders that are not trajectories (no header line), left out."""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _calls(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's tool call, OpenAI style: as the agent's message recorded it, else parsed from the action."""
    message = (step.get("agent") or {}).get("message") or {}
    recorded = message.get("tool_calls") or []
    if recorded:
        out = []
        for i, call in enumerate(recorded):
            function = call.get("function") or {}
            out.append({"id": str(call.get("id") or f"call_{step.get('turn')}_{i}"), "type": "function",
                        "function": {"name": str(function.get("name", "")),
                                     "arguments": _text(function.get("arguments", {}))}})
        return out
    try:
        call = parse_action(step.get("action"))
    except ToolError:
        return []
    return [{"id": f"call_{step.get('turn')}", "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}]


def messages_of(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The episode as chat messages (see the module docstring)."""
    messages = [{"role": "user", "content": _text(trajectory.header.get("observation", "")), "tool_calls": [],
                 "tool_call_id": None}]
    for step in trajectory.steps:
        message = (step.get("agent") or {}).get("message") or {}
        content = message.get("content") if message.get("content") is not None else step.get("action")
        calls = _calls(step)
        messages.append({"role": "assistant", "content": _text(content if content is not None else ""),
                         "tool_calls": calls, "tool_call_id": None})
        messages.append({"role": "tool" if calls else "user", "content": _text(step.get("observation", "")),
                         "tool_calls": [], "tool_call_id": calls[0]["id"] if calls else None})
    return messages


def episode_row(trajectory: Trajectory, source: str | Path = "", tokens: bool = True) -> dict[str, Any]:
    """One trajectory as a row (see the module docstring); ``tokens=False`` leaves the token fields None."""
    end = trajectory.end or {}
    reward = end.get("reward")
    if not isinstance(reward, (int, float)) or math.isnan(reward):
        reward = None
    seq = trajectory.tokens() if tokens else None
    seed = trajectory.header.get("seed")
    return {"task_id": trajectory.header.get("task_id"), "agent": trajectory.header.get("agent"),
            "status": str(trajectory.status), "reward": None if reward is None else float(reward),
            "turns": len(trajectory.steps), "seed": seed if isinstance(seed, int) else None,
            "format": trajectory.header.get("format"), "source": str(source), "messages": messages_of(trajectory),
            "input_ids": seq.ids if seq else None, "loss_mask": seq.mask if seq else None,
            "logprobs": [lp if math.isfinite(lp) else None for lp in seq.logprobs] if seq else None,
            "context_starts": seq.starts if seq else None}


def trajectory_paths(inputs: Iterable[str | Path]) -> tuple[list[Path], list[Path]]:
    """Files named, plus every ``*.jsonl`` under folders named (sorted): (explicit files, files found in folders)."""
    named, found = [], []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        elif path.is_file():
            named.append(path)
        else:
            raise ConfigError(f"expected a trajectory file or a folder of them, got {str(item)!r} (not found)")
    return named, found


def _is_trajectory(path: Path) -> bool:
    """Whether ``path`` starts like a trajectory (a header line): folders also hold metrics.jsonl and the like."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
        return json.loads(first).get("type") == "header"
    except (OSError, ValueError, AttributeError):
        return False


def export_trajectories(inputs: Iterable[str | Path], out: str | Path, *, tokens: bool = True) -> ExportSummary:
    """Write one row per trajectory of ``inputs`` (files, or folders searched for ``*.jsonl``) to ``out``, a
    ``.jsonl`` or ``.parquet`` file. A malformed file that was named raises
    :class:`~repogym.agents.errors.TrajectoryFileError`; a file found in a folder that is not a trajectory at all
    is skipped and listed in the summary."""
    out = Path(out)
    kind = out.suffix.lstrip(".").lower()
    if kind not in FORMATS:
        raise ConfigError(f"expected --out to end in .jsonl or .parquet, got {str(out)!r}")
    named, found = trajectory_paths(inputs)
    skipped = [p for p in found if not _is_trajectory(p)]
    paths = named + [p for p in found if p not in skipped]
    if not paths:
        raise ConfigError("no trajectory files to export" + (f" (skipped {len(skipped)} files that are not "
                                                             "trajectories)" if skipped else ""))
    rows = [episode_row(read_trajectory(p), p, tokens) for p in paths]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if kind == "jsonl":
            with open(out, "w", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, allow_nan=False) + "\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), out)
    except OSError as exc:
        raise InfraError("repogym.agents.export", f"could not write {out}: {exc}") from exc
    return ExportSummary(out, len(rows), [str(p) for p in skipped])


__all__ = ["ExportSummary", "FORMATS", "TOKEN_FIELDS", "TrajectoryFileError", "arrow_schema", "episode_row",
           "export_trajectories", "messages_of", "trajectory_paths"]
