"""Deterministic discrete-event simulation producing a :class:`Schedule`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .clock import SimClock
from .errors import SchedkitError, SimulationError
from .graph import JobGraph
from .resources import ResourcePool


@dataclass(frozen=True)
class Attempt:
    """One execution attempt of a job."""

    number: int
    start: float
    end: float
    ok: bool


@dataclass
class JobRun:
    """Outcome of one job: ``status`` is ``done``, ``failed`` or ``skipped``."""

    name: str
    status: str = "pending"
    attempts: list[Attempt] = field(default_factory=list)
    ready_at: float | None = None

    @property
    def start(self) -> float | None:
        """Start of the first attempt."""
        return self.attempts[0].start if self.attempts else None

    @property
    def end(self) -> float | None:
        """End of the last attempt."""
        return self.attempts[-1].end if self.attempts else None

    @property
    def wait(self) -> float | None:
        """Time between becoming ready and first starting."""
        if self.start is None or self.ready_at is None:
            return None
        return self.start - self.ready_at


class Schedule:
    """The result of a simulation: one :class:`JobRun` per job."""

    def __init__(self, runs: Mapping[str, JobRun]) -> None:
        self.runs: dict[str, JobRun] = dict(runs)

    def __getitem__(self, name: str) -> JobRun:
        try:
            return self.runs[name]
        except KeyError:
            raise SchedkitError(f"no job named {name!r} in schedule") from None

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[JobRun]:
        return iter(self.runs.values())

    def start(self, name: str) -> float | None:
        return self[name].start

    def end(self, name: str) -> float | None:
        return self[name].end

    @property
    def makespan(self) -> float:
        """Time at which the last attempt of any job ended."""
        ends = [run.end for run in self.runs.values() if run.end is not None]
        return max(ends, default=0)

    def _with_status(self, status: str) -> list[str]:
        return [name for name, run in self.runs.items() if run.status == status]

    def succeeded(self) -> list[str]:
        return self._with_status("done")

    def failed(self) -> list[str]:
        return self._with_status("failed")

    def skipped(self) -> list[str]:
        return self._with_status("skipped")

    @property
    def ok(self) -> bool:
        """True when every job finished successfully."""
        return all(run.status == "done" for run in self.runs.values())

    def timeline(self) -> list[tuple[str, float, float]]:
        """``(name, start, end)`` of every started job, by start time then name."""
        rows = [(r.name, r.start, r.end) for r in self.runs.values() if r.attempts]
        rows.sort(key=lambda row: (row[1], row[0]))
        return rows


class Simulator:
    """Runs a :class:`JobGraph` on a simulated clock.

    Whenever workers and resources are free, ready jobs are started in order
    of descending priority, then earliest time they became ready, then
    topological position.  A job that does not fit does not block smaller
    ones behind it.  Failed attempts are retried after the backoff delay of
    the job's :class:`~schedkit.models.RetryPolicy`; a job that runs out of
    attempts fails and all its descendants are skipped.
    """

    def __init__(
        self,
        graph: JobGraph,
        workers: int | None = None,
        resources: Mapping[str, int] | None = None,
    ) -> None:
        self.graph = graph
        self.workers = workers
        self.resources = dict(resources or {})

    def run(self) -> Schedule:
        """Simulate until every job is done, failed or skipped."""
        graph = self.graph
        order = graph.topological_order()
        self._rank = {name: i for i, name in enumerate(order)}
        self._pool = ResourcePool(self.resources, self.workers)
        for job in graph:
            self._pool.check_feasible(job)
        self._clock = SimClock()
        self._runs = {name: JobRun(name) for name in order}
        self._waiting = {name: len(graph.get(name).deps) for name in order}
        self._ready: list[str] = []
        self._queued_at: dict[str, float] = {}

        for name in order:
            if self._waiting[name] == 0:
                self._make_ready(name, 0)
        self._drain_now()
        self._dispatch()
        while len(self._clock):
            for event in self._clock.pop_due():
                self._handle(event)
            self._drain_now()
            self._dispatch()

        leftover = [n for n, r in self._runs.items() if r.status in ("pending", "running")]
        if leftover:
            raise SimulationError(f"jobs never ran: {leftover}")
        return Schedule(self._runs)

    # -- internals ----------------------------------------------------
    def _drain_now(self) -> None:
        """Handle every further event due at the current time."""
        clock = self._clock
        while clock.peek_time() is not None and clock.peek_time() <= clock.now:
            for event in clock.pop_due():
                self._handle(event)

    def _handle(self, event) -> None:
        if event.kind == "ready":
            self._enqueue(event.payload, event.time)
        elif event.kind == "finish":
            self._on_finish(*event.payload)
        else:  # pragma: no cover - defensive
            raise SimulationError(f"unknown event {event.kind!r}")

    def _make_ready(self, name: str, now: float) -> None:
        """Dependencies of ``name`` are satisfied at ``now``."""
        job = self.graph.get(name)
        at = max(now, job.release)
        self._runs[name].ready_at = at
        self._enqueue_at(name, at)

    def _enqueue_at(self, name: str, at: float) -> None:
        if at <= self._clock.now:
            self._enqueue(name, self._clock.now)
        else:
            self._clock.schedule(at, "ready", name)

    def _enqueue(self, name: str, at: float) -> None:
        self._queued_at[name] = at
        self._ready.append(name)

    def _sort_key(self, name: str) -> tuple:
        return (-self.graph.get(name).priority, self._queued_at[name], self._rank[name])

    def _dispatch(self) -> None:
        now = self._clock.now
        self._ready.sort(key=self._sort_key)
        waiting: list[str] = []
        for name in self._ready:
            job = self.graph.get(name)
            if not self._pool.can_allocate(job.resources):
                waiting.append(name)
                continue
            self._pool.allocate(name, job.resources)
            run = self._runs[name]
            run.status = "running"
            number = len(run.attempts) + 1
            ok = job.attempt_succeeds(number)
            self._clock.schedule(now + job.duration, "finish", (name, number, now, ok))
        self._ready = waiting

    def _on_finish(self, name: str, number: int, started: float, ok: bool) -> None:
        now = self._clock.now
        job = self.graph.get(name)
        run = self._runs[name]
        self._pool.release(name)
        run.attempts.append(Attempt(number, started, now, ok))
        if ok:
            run.status = "done"
            for child in self.graph.dependents(name):
                self._waiting[child] -= 1
                if self._waiting[child] == 0 and self._runs[child].status == "pending":
                    self._make_ready(child, now)
        elif number < job.max_attempts:
            run.status = "pending"
            self._enqueue_at(name, now + job.retry.delay(number))
        else:
            run.status = "failed"
            for other in self.graph.descendants(name):
                if self._runs[other].status == "pending":
                    self._runs[other].status = "skipped"


def simulate(
    graph: JobGraph,
    workers: int | None = None,
    resources: Mapping[str, int] | None = None,
) -> Schedule:
    """Convenience wrapper around :class:`Simulator`."""
    return Simulator(graph, workers=workers, resources=resources).run()
