"""Benchmark metrics over stored episodes: resolved rate, pass@k, confidence intervals and process metrics.

Guarantees:
- excluded episodes (:func:`repogym.envs.core.status.excluded`: ``infra_error``, ``internal_error``, or no reward)
  count in ``episodes`` and ``infra_errors`` / ``infra_error_rate`` (or, for a bug of repogym's,
  ``internal_errors``) and nowhere else: every rate and mean is over the other ("valid") episodes, so a broken
  sandbox or a bug of ours never reads as a failed agent.
- Rates are means over tasks of each task's c/n (c resolved of n valid samples), so a task run more often
  does not weigh more. A task whose every episode was an infra error is left out of the rates.
- ``pass_at_k`` is the unbiased estimator of Chen et al. (2021), computed as a product (no huge binomials),
  reported for every k from 1 to the smallest n over the tasks.
- A group is one (agent, suite, checkpoint): episodes of different checkpoints are never pooled.
- Where a rate has nothing to be over it is NaN (``resolved_rate``, means) or None (the optional ones).
- Best-of-n trials (:func:`summarize_best_of_n`) are summarized on their own, per n, and never enter pass@1.
- Every excluded episode's cause is kept: ``errors`` groups them by (status, where, message) with a count
  (:func:`error_causes`), and :func:`error_causes_text` prints them, so an infra error never reads as a bare count.
- :func:`summaries_json` is the same numbers as one JSON object (NaN written as null).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from repogym.bench.db import BestOfNRow, EpisodeRow, Outcome
from repogym.envs.core.rates import pass_at_k, wilson
from repogym.envs.core.status import Status


@dataclass(frozen=True)
class ErrorCause:
    """Excluded episodes (or trials) that ended the same way: same status, same ``where``, same message."""

    status: str
    """``infra_error`` or ``internal_error``."""
    where: str
    """The step that failed (``llm``, ``sandbox.start``, ``env.step``, ...); ``?`` when the row recorded none."""
    message: str
    count: int


def error_causes(rows: Iterable[Outcome]) -> list[ErrorCause]:
    """The causes of the excluded rows, grouped, most frequent first (then infra before internal, by where)."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for row in rows:
        if row.excluded:
            error = row.error or {}
            status = Status.INTERNAL_ERROR if row.internal_error else Status.INFRA_ERROR
            counts[(str(status), str(error.get("where") or "?"),
                    str(error.get("message") or "no cause recorded (the reward was missing or NaN)"))] += 1
    return [ErrorCause(status, where, message, count)
            for (status, where, message), count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


@dataclass
class Summary:
    """What one agent (at one checkpoint) achieved on one suite."""

    agent: str
    suite: str
    checkpoint: str
    episodes: int
    """Every stored episode, infra errors included."""
    tasks: int
    """Distinct tasks with at least one episode."""
    resolved_rate: float
    """pass@1: the mean over tasks of resolved / valid samples (NaN when no episode was valid)."""
    ci_low: float
    """Lower end of the 95% Wilson interval of the resolved rate (pooled over valid episodes)."""
    ci_high: float
    """Upper end of that interval."""
    pass_at_k: dict[int, float] = field(default_factory=dict)
    """k -> unbiased pass@k, for k from 1 to the fewest valid samples of any task."""
    by_difficulty: dict[int, float] = field(default_factory=dict)
    """Task difficulty -> resolved rate over the tasks of that difficulty."""
    long_horizon: float | None = None
    """Resolved rate over long-horizon tasks (``horizon: long`` or 10+ turns); None when the suite has none."""
    short_horizon: float | None = None
    """Resolved rate over the other tasks, to read beside it; None when every task is long."""
    long_horizon_tasks: int = 0
    format_adherence: float | None = None
    """Well-formed tool calls / tool calls; None when no calls were made."""
    self_correction: float | None = None
    """Resolved after a failing ``run_tests`` / resolved; None when nothing was resolved."""
    mean_turns: float = math.nan
    mean_tokens: float = math.nan
    """Prompt plus completion tokens per episode."""
    infra_errors: int = 0
    """Excluded episodes other than internal errors: infrastructure failures, episodes with no reward."""
    infra_error_rate: float = 0.0
    """Infra errors / all episodes."""
    internal_errors: int = 0
    """Episodes a bug of repogym's ended (``internal_error``): excluded, and not the agent's or the machine's."""
    resolved: int = 0
    """Resolved episodes (all valid)."""
    errors: list[ErrorCause] = field(default_factory=list)
    """Why the excluded episodes (infra and internal errors) ended, grouped (:func:`error_causes`)."""


def summarize(rows: Iterable[EpisodeRow]) -> list[Summary]:
    """One Summary per (agent, suite, checkpoint), best resolved rate first, then by agent name."""
    groups: dict[tuple[str, str, str], list[EpisodeRow]] = defaultdict(list)
    for row in rows:
        groups[(row.agent, row.suite, row.checkpoint)].append(row)
    summaries = [summarize_group(group) for group in groups.values()]
    return sorted(summaries, key=lambda s: (-s.resolved_rate if not math.isnan(s.resolved_rate) else math.inf,
                                            s.agent, s.suite, s.checkpoint))


def summarize_group(rows: list[EpisodeRow]) -> Summary:
    """The Summary of the episodes of one agent, suite and checkpoint."""
    valid = [r for r in rows if not r.excluded]
    per_task = _by_task(valid)
    resolved = sum(r.resolved for r in valid)
    low, high = wilson(resolved, len(valid))
    long_tasks = {t: rs for t, rs in per_task.items() if rs[0].long_horizon}
    calls = sum(r.tool_calls for r in valid)
    internal = sum(r.internal_error for r in rows)
    infra = len(rows) - len(valid) - internal
    return Summary(
        agent=rows[0].agent, suite=rows[0].suite, checkpoint=rows[0].checkpoint,
        episodes=len(rows), tasks=len({r.task_id for r in rows}),
        resolved_rate=_task_mean_rate(per_task.values()), ci_low=low, ci_high=high,
        pass_at_k=_pass_at_ks(per_task.values()), by_difficulty=_by_difficulty(per_task),
        long_horizon=_task_mean_rate(long_tasks.values()) if long_tasks else None,
        short_horizon=_task_mean_rate(short) if (short := [rs for t, rs in per_task.items() if t not in long_tasks])
        else None, long_horizon_tasks=len(long_tasks),
        format_adherence=sum(r.well_formed for r in valid) / calls if calls else None,
        self_correction=sum(r.self_corrected for r in valid if r.resolved) / resolved if resolved else None,
        mean_turns=_mean([r.turns for r in valid]),
        mean_tokens=_mean([r.prompt_tokens + r.completion_tokens for r in valid]),
        infra_errors=infra, infra_error_rate=infra / len(rows) if rows else 0.0, internal_errors=internal,
        resolved=resolved, errors=error_causes(rows))


def summary_table(summaries: list[Summary]) -> str:
    """A markdown table: resolved rate with its interval, pass@k, by difficulty, process metrics, infra errors."""
    ks = sorted({k for s in summaries for k in s.pass_at_k if k > 1})
    header = (["agent", "suite", "checkpoint", "tasks", "episodes", "resolved (95% CI)"]
              + [f"pass@{k}" for k in ks]
              + ["by difficulty", "long-horizon (tasks)", "short-horizon", "format", "self-correction", "turns", "tokens", "infra errors"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in summaries:
        cells = [s.agent, s.suite, s.checkpoint or "-", str(s.tasks), str(s.episodes),
                 f"{_pct(s.resolved_rate)} ({_pct(s.ci_low)}-{_pct(s.ci_high)})"]
        cells += [_pct(s.pass_at_k.get(k)) for k in ks]
        cells += [" ".join(f"{level}:{_pct(rate)}" for level, rate in s.by_difficulty.items()) or "-",
                  f"{_pct(s.long_horizon)} ({s.long_horizon_tasks})", _pct(s.short_horizon), _pct(s.format_adherence), _pct(s.self_correction),
                  f"{s.mean_turns:.1f}", f"{s.mean_tokens:.0f}", _errors(s.infra_errors, s.infra_error_rate, s.internal_errors)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass
class BestOfNSummary:
    """Best-of-n trials of one agent (at one checkpoint) on one suite for one n: a rate of its own, never pass@1."""

    agent: str
    suite: str
    checkpoint: str
    n: int
    trials: int
    """Every stored trial, infra errors included."""
    tasks: int
    rate: float
    """The mean over tasks of resolved / valid trials, the chosen branch graded (NaN when no trial was valid)."""
    ci_low: float
    ci_high: float
    fallbacks: int = 0
    """Trials that could not fork and ran one plain episode (counted in the rate)."""
    infra_errors: int = 0
    internal_errors: int = 0
    """Trials a bug of repogym's ended (excluded, counted apart from ``infra_errors``)."""
    mean_turns: float = math.nan
    """Turns of the chosen branches."""
    resolved: int = 0
    """Resolved trials (all valid)."""
    errors: list[ErrorCause] = field(default_factory=list)
    """Why the excluded trials ended, grouped (:func:`error_causes`)."""


def summarize_best_of_n(rows: Iterable[BestOfNRow]) -> list[BestOfNSummary]:
    """One BestOfNSummary per (agent, suite, checkpoint, n), best rate first, then by agent name and n."""
    groups: dict[tuple[str, str, str, int], list[BestOfNRow]] = defaultdict(list)
    for row in rows:
        groups[(row.agent, row.suite, row.checkpoint, row.n)].append(row)
    out = []
    for (agent, suite, checkpoint, n), group in groups.items():
        valid = [r for r in group if not r.excluded]
        internal = sum(r.internal_error for r in group)
        resolved = sum(r.resolved for r in valid)
        low, high = wilson(resolved, len(valid))
        out.append(BestOfNSummary(agent, suite, checkpoint, n, len(group), len({r.task_id for r in group}),
                                  _task_mean_rate(_by_task(valid).values()), low, high,
                                  fallbacks=sum(r.fallback is not None for r in group),
                                  infra_errors=len(group) - len(valid) - internal, internal_errors=internal,
                                  mean_turns=_mean([r.turns for r in valid]), resolved=resolved,
                                  errors=error_causes(group)))
    return sorted(out, key=lambda s: (-s.rate if not math.isnan(s.rate) else math.inf, s.agent, s.suite,
                                      s.checkpoint, s.n))


def best_of_n_table(best: list[BestOfNSummary], pass1: list[Summary] = ()) -> str:
    """A markdown table of best-of-n rates, each beside the same agent's pass@1 (from ``pass1``; '-' without)."""
    by_group = {(s.agent, s.suite, s.checkpoint): s for s in pass1}
    header = ["agent", "suite", "checkpoint", "n", "tasks", "trials", "pass@1", "best-of-n (95% CI)", "fallbacks",
              "turns", "infra errors"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in best:
        plain = by_group.get((s.agent, s.suite, s.checkpoint))
        cells = [s.agent, s.suite, s.checkpoint or "-", str(s.n), str(s.tasks), str(s.trials),
                 _pct(plain.resolved_rate) if plain else "-", f"{_pct(s.rate)} ({_pct(s.ci_low)}-{_pct(s.ci_high)})",
                 str(s.fallbacks), f"{s.mean_turns:.1f}",
                 str(s.infra_errors) + (f" + {s.internal_errors} internal" if s.internal_errors else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def error_causes_text(summaries: Iterable[Summary | BestOfNSummary]) -> str:
    """Per agent (and checkpoint, and n for best-of-n) with excluded episodes, each cause on a line with its count;
    '' when nothing was excluded."""
    blocks = []
    for s in summaries:
        if not s.errors:
            continue
        name = s.agent + (f" @ {s.checkpoint}" if s.checkpoint else "") + (
            f" (best-of-{s.n})" if isinstance(s, BestOfNSummary) else "")
        lines = [f"errors of {name} on {s.suite} (excluded from every rate):"]
        lines += [f"  {c.count} x {c.status} at {c.where}: {c.message}" for c in s.errors]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def summaries_json(summaries: Iterable[Summary], best_of_n: Iterable[BestOfNSummary] = (),
                   **fields: Any) -> str:
    """``fields`` (what the caller adds: the database, the run's counts) with ``summaries`` and ``best_of_n`` as
    lists of objects, as one line of strict JSON: a NaN rate is null, pass@k's keys are strings."""
    document = {**fields, "summaries": [_plain(asdict(s)) for s in summaries],
                "best_of_n": [_plain(asdict(s)) for s in best_of_n]}
    return json.dumps(document, allow_nan=False)


def _plain(value: Any) -> Any:
    """``value`` with NaN floats as None and every dict key a string (JSON's own rules, made explicit)."""
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _by_task(rows: list[EpisodeRow]) -> dict[str, list[EpisodeRow]]:
    tasks: dict[str, list[EpisodeRow]] = defaultdict(list)
    for row in rows:
        tasks[row.task_id].append(row)
    return tasks


def _task_mean_rate(tasks: Iterable[list[EpisodeRow]]) -> float:
    rates = [sum(r.resolved for r in rows) / len(rows) for rows in tasks]
    return _mean(rates)


def _pass_at_ks(tasks: Iterable[list[EpisodeRow]]) -> dict[int, float]:
    counts = [(len(rows), sum(r.resolved for r in rows)) for rows in tasks]
    if not counts:
        return {}
    fewest = min(n for n, _ in counts)
    return {k: _mean([pass_at_k(n, c, k) for n, c in counts]) for k in range(1, fewest + 1)}


def _by_difficulty(per_task: dict[str, list[EpisodeRow]]) -> dict[int, float]:
    levels: dict[int, list[list[EpisodeRow]]] = defaultdict(list)
    for rows in per_task.values():
        if rows[0].difficulty is not None:
            levels[rows[0].difficulty].append(rows)
    return {level: _task_mean_rate(levels[level]) for level in sorted(levels)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _errors(infra: int, rate: float, internal: int) -> str:
    """The errors cell: infra errors and their rate, and internal errors (repogym's bugs) apart when there are any."""
    return f"{infra} ({_pct(rate)})" + (f" + {internal} internal" if internal else "")


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:.0f}%"


__all__ = ["BestOfNSummary", "ErrorCause", "Summary", "best_of_n_table", "error_causes", "error_causes_text",
           "pass_at_k", "summaries_json", "summarize", "summarize_best_of_n", "summarize_group", "summary_table",
           "wilson"]
