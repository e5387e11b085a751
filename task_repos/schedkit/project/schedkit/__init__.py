"""schedkit - a small deterministic task scheduler library."""

from .cron import CronExpr, parse_cron
from .errors import (
    CronParseError,
    CycleError,
    DuplicateJobError,
    ResourceError,
    SchedkitError,
    SimulationError,
    UnknownDependencyError,
)
from .graph import JobGraph
from .models import Job, RetryPolicy
from .recurring import RecurringJob, expand_recurring, minutes_between
from .report import (
    CriticalPath,
    JobTiming,
    analyze,
    critical_path,
    format_report,
    peak_usage,
    project_length,
    utilization,
)
from .resources import ResourcePool
from .simulator import Attempt, JobRun, Schedule, Simulator, simulate

__version__ = "0.1.0"

__all__ = [
    "Attempt",
    "CriticalPath",
    "CronExpr",
    "CronParseError",
    "CycleError",
    "DuplicateJobError",
    "Job",
    "JobGraph",
    "JobRun",
    "JobTiming",
    "RecurringJob",
    "ResourceError",
    "ResourcePool",
    "RetryPolicy",
    "Schedule",
    "SchedkitError",
    "SimulationError",
    "Simulator",
    "UnknownDependencyError",
    "analyze",
    "critical_path",
    "expand_recurring",
    "format_report",
    "minutes_between",
    "parse_cron",
    "peak_usage",
    "project_length",
    "simulate",
    "utilization",
]
