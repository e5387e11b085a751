"""Exception hierarchy used throughout schedkit."""

from __future__ import annotations


class SchedkitError(Exception):
    """Base class for every error raised by schedkit."""


class DuplicateJobError(SchedkitError):
    """A job with the same name was added to a graph twice."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"duplicate job name: {name!r}")


class UnknownDependencyError(SchedkitError):
    """A job depends on a job that is not part of the graph."""

    def __init__(self, job: str, dependency: str) -> None:
        self.job = job
        self.dependency = dependency
        super().__init__(f"job {job!r} depends on unknown job {dependency!r}")


class CycleError(SchedkitError):
    """The dependency graph contains a cycle.

    ``cycle`` is the list of job names along the cycle, starting and ending
    with the same job, e.g. ``["a", "b", "c", "a"]``.
    """

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = list(cycle)
        super().__init__("dependency cycle detected: " + format_cycle(self.cycle))


def format_cycle(cycle: list[str]) -> str:
    """Render a closed cycle path as ``a -> b -> a``."""
    return " -> ".join(cycle)


class CronParseError(SchedkitError):
    """A cron expression could not be parsed."""

    def __init__(self, expr: str, reason: str, field: str | None = None) -> None:
        self.expr = expr
        self.reason = reason
        self.field = field
        where = f" in {field} field" if field else ""
        super().__init__(f"invalid cron expression {expr!r}{where}: {reason}")


class ResourceError(SchedkitError):
    """A resource request can never be satisfied, or an allocation failed."""


class SimulationError(SchedkitError):
    """The simulation reached an inconsistent state."""
