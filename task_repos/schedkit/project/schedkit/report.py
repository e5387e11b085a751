"""Critical-path analysis and textual schedule reports."""

from __future__ import annotations

from dataclasses import dataclass

from .graph import JobGraph
from .simulator import Schedule

EPSILON = 1e-9


@dataclass(frozen=True)
class JobTiming:
    """Earliest/latest start and finish of a job ignoring resource limits."""

    name: str
    duration: float
    earliest_start: float
    earliest_finish: float
    latest_start: float
    latest_finish: float

    @property
    def slack(self) -> float:
        """How long the job can slip without delaying the whole project."""
        return self.latest_start - self.earliest_start

    @property
    def critical(self) -> bool:
        return abs(self.slack) < EPSILON


@dataclass(frozen=True)
class CriticalPath:
    """The longest dependency chain and its length."""

    jobs: list[str]
    length: float

    def __str__(self) -> str:
        return " -> ".join(self.jobs)


def analyze(graph: JobGraph) -> dict[str, JobTiming]:
    """Compute :class:`JobTiming` for every job, in topological order.

    Earliest start honours release times; the project end is the largest
    earliest finish.  Latest times are computed backwards from that end.
    """
    order = graph.topological_order()
    es: dict[str, float] = {}
    ef: dict[str, float] = {}
    for name in order:
        job = graph.get(name)
        start = max([job.release] + [ef[d] for d in job.deps])
        es[name] = start
        ef[name] = start + job.duration
    project_end = max(ef.values(), default=0)
    ls: dict[str, float] = {}
    lf: dict[str, float] = {}
    for name in reversed(order):
        children = graph.dependents(name)
        finish = min((ls[c] for c in children), default=project_end)
        lf[name] = finish
        ls[name] = finish - graph.get(name).duration
    return {
        name: JobTiming(
            name, graph.get(name).duration, es[name], ef[name], ls[name], lf[name]
        )
        for name in order
    }


def project_length(graph: JobGraph) -> float:
    """Length of the project with unlimited resources."""
    return max((t.earliest_finish for t in analyze(graph).values()), default=0)


def critical_path(graph: JobGraph) -> CriticalPath:
    """The chain of zero-slack jobs that determines the project length.

    Ties are broken by topological order, so the result is deterministic.
    """
    timings = analyze(graph)
    if not timings:
        return CriticalPath([], 0)
    length = max(t.earliest_finish for t in timings.values())
    order = list(timings)
    ends = [n for n in order if abs(timings[n].earliest_finish - length) < EPSILON]
    current = ends[-1]
    path = [current]
    while True:
        start = timings[current].earliest_start
        preds = [
            d
            for d in order
            if d in graph.get(current).deps
            and timings[d].critical
            and abs(timings[d].earliest_finish - start) < EPSILON
        ]
        if not preds:
            break
        current = preds[0]
        path.append(current)
    path.reverse()
    return CriticalPath(path, length)


def busy_time(schedule: Schedule) -> float:
    """Total worker time spent in attempts, failed ones included."""
    return sum(a.end - a.start for run in schedule for a in run.attempts)


def utilization(schedule: Schedule, workers: int) -> float:
    """Fraction of ``workers * makespan`` that was busy (0 for empty runs)."""
    span = schedule.makespan
    if span <= 0 or workers <= 0:
        return 0.0
    return busy_time(schedule) / (workers * span)


def peak_usage(schedule: Schedule, graph: JobGraph, resource: str | None = None) -> int:
    """Largest simultaneous use of ``resource`` (or of workers when ``None``).

    An attempt ending at time ``t`` frees its share before one starting at
    ``t`` takes it.
    """
    events: list[tuple[float, int]] = []
    for run in schedule:
        job = graph.get(run.name)
        amount = 1 if resource is None else job.resources.get(resource, 0)
        if amount == 0:
            continue
        for attempt in run.attempts:
            if attempt.end == attempt.start:
                continue
            events.append((attempt.start, amount))
            events.append((attempt.end, -amount))
    events.sort(key=lambda e: (e[0], e[1]))
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}"


def format_report(graph: JobGraph, schedule: Schedule) -> str:
    """A plain-text table of the schedule followed by a summary.

    Critical jobs are marked with ``*``.  Rows are sorted by start time;
    jobs that never started come last in graph order.
    """
    timings = analyze(graph)
    started = [name for name, _, _ in schedule.timeline()]
    rest = [n for n in graph.names() if n not in started]
    width = max([len("job")] + [len(n) for n in graph.names()])
    lines = [
        f"{'job':<{width}}  {'status':<7}  {'start':>6}  {'end':>6}  {'tries':>5}  {'slack':>6}"
    ]
    for name in started + rest:
        run = schedule[name]
        timing = timings[name]
        mark = " *" if timing.critical else ""
        lines.append(
            f"{name:<{width}}  {run.status:<7}  {_fmt(run.start):>6}  {_fmt(run.end):>6}  "
            f"{len(run.attempts):>5}  {_fmt(timing.slack):>6}{mark}"
        )
    path = critical_path(graph)
    lines.append(f"makespan: {_fmt(schedule.makespan)}")
    lines.append(f"critical path: {path} (length {_fmt(path.length)})")
    failed = schedule.failed()
    if failed:
        lines.append("failed: " + ", ".join(failed))
    skipped = schedule.skipped()
    if skipped:
        lines.append("skipped: " + ", ".join(skipped))
    return "\n".join(lines)
