"""Expansion of cron-driven recurring jobs into concrete :class:`Job` objects.

Simulated time is measured in minutes.  A recurring job fired at wall-clock
time ``t`` becomes a job released at ``minutes_between(origin, t)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from .cron import CronExpr
from .errors import SchedkitError
from .models import NO_RETRY, Job, RetryPolicy


def minutes_between(origin: datetime, moment: datetime) -> float:
    """Signed number of minutes from ``origin`` to ``moment``."""
    return (moment - origin).total_seconds() / 60


@dataclass
class RecurringJob:
    """A job template that runs whenever its cron ``schedule`` fires.

    ``deps`` are ordinary job names every occurrence depends on.  With
    ``serial=True`` each occurrence also depends on the previous one so that
    runs never overlap.
    """

    name: str
    schedule: str | CronExpr
    duration: float
    priority: int = 0
    resources: dict[str, int] = field(default_factory=dict)
    retry: RetryPolicy = NO_RETRY
    deps: tuple[str, ...] = ()
    serial: bool = False

    def cron(self) -> CronExpr:
        """The parsed schedule."""
        if isinstance(self.schedule, CronExpr):
            return self.schedule
        return CronExpr.parse(self.schedule)

    def occurrence_name(self, moment: datetime) -> str:
        """Name of the occurrence fired at ``moment``."""
        return f"{self.name}@{moment:%Y-%m-%dT%H:%M}"

    def expand(
        self, start: datetime, end: datetime, origin: datetime | None = None
    ) -> list[Job]:
        """Concrete jobs for every firing in ``[start, end)``.

        Release times are minutes after ``origin`` (default: ``start``).
        """
        if end < start:
            raise SchedkitError("window end is before its start")
        origin = start if origin is None else origin
        jobs: list[Job] = []
        previous: str | None = None
        for moment in self.cron().expand(start, end):
            deps = tuple(self.deps)
            if self.serial and previous is not None:
                deps += (previous,)
            release = minutes_between(origin, moment)
            if release < 0:
                raise SchedkitError(f"occurrence {moment} is before origin {origin}")
            job = Job(
                name=self.occurrence_name(moment),
                duration=self.duration,
                deps=deps,
                priority=self.priority,
                resources=dict(self.resources),
                release=release,
                retry=self.retry,
            )
            jobs.append(job)
            previous = job.name
        return jobs


def expand_recurring(
    templates: Iterable[RecurringJob],
    start: datetime,
    end: datetime,
    origin: datetime | None = None,
) -> list[Job]:
    """Expand several templates over one window, ordered by release time.

    Jobs released at the same time keep the order of their templates.
    """
    jobs: list[Job] = []
    for template in templates:
        jobs.extend(template.expand(start, end, origin))
    jobs.sort(key=lambda j: j.release)
    return jobs
