"""Core data model: jobs and retry policies."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import SchedkitError


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff policy for failed attempts.

    ``max_retries`` is the number of *additional* attempts allowed after the
    first one fails.  The delay before retry number ``n`` (1-based) is
    ``base_delay * factor ** (n - 1)``, capped at ``max_delay`` when given.
    """

    max_retries: int = 0
    base_delay: float = 1.0
    factor: float = 2.0
    max_delay: float | None = None

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise SchedkitError("max_retries must be >= 0")
        if self.base_delay < 0:
            raise SchedkitError("base_delay must be >= 0")
        if self.factor < 1:
            raise SchedkitError("factor must be >= 1")
        if self.max_delay is not None and self.max_delay < 0:
            raise SchedkitError("max_delay must be >= 0")

    def delay(self, retry_number: int) -> float:
        """Return the wait before retry ``retry_number`` (1 for the first retry)."""
        if retry_number < 1:
            raise SchedkitError("retry_number starts at 1")
        value = self.base_delay * self.factor ** (retry_number - 1)
        if self.max_delay is not None:
            value = min(value, self.max_delay)
        return value

    def delays(self) -> list[float]:
        """All delays this policy can produce, in order."""
        return [self.delay(n) for n in range(1, self.max_retries + 1)]


NO_RETRY = RetryPolicy()


@dataclass
class Job:
    """A unit of work.

    * ``duration`` - simulated time one attempt takes.
    * ``deps`` - names of jobs that must finish successfully first.
    * ``priority`` - higher runs first when several jobs are ready.
    * ``resources`` - named resource amounts held while running.
    * ``release`` - earliest time the job may start.
    * ``failures`` - number of leading attempts that fail (simulated faults).
    """

    name: str
    duration: float
    deps: tuple[str, ...] = ()
    priority: int = 0
    resources: dict[str, int] = field(default_factory=dict)
    release: float = 0
    retry: RetryPolicy = NO_RETRY
    failures: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SchedkitError("job name must be a non-empty string")
        if self.duration < 0:
            raise SchedkitError(f"job {self.name!r}: duration must be >= 0")
        if self.release < 0:
            raise SchedkitError(f"job {self.name!r}: release must be >= 0")
        if self.failures < 0:
            raise SchedkitError(f"job {self.name!r}: failures must be >= 0")
        if isinstance(self.deps, str):
            self.deps = (self.deps,)
        self.deps = tuple(dict.fromkeys(self.deps))
        if self.name in self.deps:
            raise SchedkitError(f"job {self.name!r} depends on itself")
        for res, amount in self.resources.items():
            if not isinstance(amount, int) or amount <= 0:
                raise SchedkitError(
                    f"job {self.name!r}: resource {res!r} amount must be a positive int"
                )
        self.resources = dict(self.resources)

    def attempt_succeeds(self, attempt: int) -> bool:
        """Whether 1-based attempt number ``attempt`` succeeds in simulation."""
        return attempt > self.failures

    @property
    def max_attempts(self) -> int:
        """Total number of attempts allowed by the retry policy."""
        return 1 + self.retry.max_retries
