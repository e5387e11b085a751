"""The shape of ``info``: every key :meth:`repogym.envs.repo_env.RepoTaskEnv.reset` and ``step`` may put in it.

``info`` is a plain dict (Gymnasium's contract, and vector envs stack it by key), so what it holds is declared
here as :class:`StepInfo`, a ``TypedDict`` with every key optional: ``reset`` writes the episode's keys, ``step``
the turn's, and a key whose value would be ``None`` is left out rather than set to ``None``. Readers index it by
these names; the library's own records become dicts only where ``info`` is built and are rebuilt from them with
:meth:`repogym.envs.rewards.evaluate.EvalRecord.from_dict` (``info["eval"]``).

This module imports nothing of repogym's, so every layer may import it.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ErrorInfo(TypedDict):
    """Where a failure happened and what it was (``LocatedError.record()``)."""

    where: str
    message: str


class EpisodeUsage(TypedDict, total=False):
    """The episode's running totals (``info["usage"]["episode"]``)."""

    observation_chars: int
    observation_tokens: int
    """Only with ``EnvConfig.tokenizer``."""
    turns: int
    wall_s: float
    """Seconds since ``reset``."""


class UsageInfo(TypedDict, total=False):
    """This observation's size and the episode's totals (``info["usage"]``)."""

    observation_chars: int
    observation_tokens: int
    """Only with ``EnvConfig.tokenizer``."""
    episode: EpisodeUsage


class TruncationInfo(TypedDict):
    """The budget that ended the episode (``info["truncation"]``)."""

    reason: str
    """``turn_limit``, ``observation_token_budget`` or ``wall_time_budget``."""
    limit: float
    used: float
    message: str


class ForkInfo(TypedDict):
    """What :meth:`repogym.envs.repo_env.RepoTaskEnv.fork` made of this environment (``fork_info``, ``info["fork"]``)."""

    source_turn: int
    """The source episode's turn when it was forked."""
    forks: int
    not_copied: list[str]
    """What could not be copied (unreadable files, sockets, message queues), with why."""
    processes: str
    """Always ``"not copied"``: running processes stay behind."""
    state_bytes: int
    latency_s: float


class StepInfo(TypedDict, total=False):
    """Every key of ``info``. ``reset`` writes the first group; ``step`` the rest, each only where it applies."""

    # -- reset ----------------------------------------------------------------------------------------------------
    task_id: str
    """The task's ``instance_id`` (every ``reset`` and ``step``)."""
    repo: str
    """The task's repository (``owner/name``)."""
    difficulty: int
    """The task's difficulty, 1..5."""
    tools: list[dict[str, Any]]
    """The OpenAI tools JSON of the tools this environment offers."""
    max_turns: int
    sandbox: str
    """The sandbox backend: ``docker`` or ``local``."""
    horizon: str
    """The task's horizon (``short`` unless the task says otherwise)."""
    sandbox_restarts: int
    """Sandboxes replaced during this ``reset`` before one loaded clean."""
    usage: UsageInfo
    """The observation's size and the episode's running totals (every ``reset`` and ``step``)."""

    # -- every step -----------------------------------------------------------------------------------------------
    turn: int
    """This step's turn, from 1."""
    tool: str
    """The tool the action named (absent when the action did not parse)."""
    exit_code: int
    """The tool's exit code, when it has one."""
    error: str
    """The kind of failure of this call: ``bad_arguments``, ``unknown_tool``, ``path_outside_repo``, ``timeout``,
    ``patch_failed``, ``sandbox_refused``, ``sandbox_killed``, ``internal_error``, ..."""
    duration_s: float
    """Wall-clock seconds of this step."""
    fork: ForkInfo
    """On a fork's first step only: what the fork copied and what it could not."""

    # -- a tool's own facts (``ToolResult.data``) -----------------------------------------------------------------
    timed_out: bool
    """``bash``: whether the command ran past its timeout."""
    command_duration_s: float
    """``bash``: the command's own seconds."""
    files: list[str]
    """``apply_patch``: the files the patch names."""
    counts: dict[str, int]
    """``run_tests``: outcome -> how many tests had it."""
    failed: list[str]
    """``run_tests``: the tests that did not pass (at most 200)."""
    lines: int
    """``view``: the file's lines."""
    matches: int
    """``search``: the matching lines."""
    line: int
    """``edit``: the line the edit starts at."""
    covering_run: int
    """``inspect_diff``: covering tests run since the last edit."""
    covering_total: int
    """``inspect_diff``: tests that reach the changed code."""
    analysis: dict[str, Any]
    """``inspect_diff``, and the episode's end: ``DiffAnalysis.to_dict()`` of the diff (``changed``, ``dependents``,
    ``tests``, ``syntax_errors``, ``unresolved``). At the end, ``{"error": "<Type>: <message>"}`` when the analysis
    failed and the reward does not need it."""

    # -- the episode's end ----------------------------------------------------------------------------------------
    eval: dict[str, Any]
    """The grading: ``EvalRecord.to_dict()`` (rebuild it with ``EvalRecord.from_dict``); only ``status`` (and
    ``error``) when nothing was graded: ``not_submitted``, ``infra_error``, ``internal_error``."""
    reward_components: dict[str, float]
    """Each reward component's value before weighting (absent for excluded statuses)."""
    exclude: bool
    """``True``: leave the episode out of training (an infrastructure failure, a bug of ours, or a NaN reward)."""
    infra_error: ErrorInfo
    """The infrastructure failure that ended the episode (``eval.status == "infra_error"``)."""
    internal_error: ErrorInfo
    """The bug of repogym's that ended the episode (``eval.status == "internal_error"``)."""
    truncation: TruncationInfo
    """The budget that ended the episode, when one did."""
    well_formed_calls: int
    """Calls of the episode that parsed and named a known tool with valid arguments."""


__all__ = ["EpisodeUsage", "ErrorInfo", "ForkInfo", "StepInfo", "TruncationInfo", "UsageInfo"]
