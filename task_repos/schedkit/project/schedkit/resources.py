"""Worker slots and named resource capacities."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ResourceError
from .models import Job


class ResourcePool:
    """Tracks free worker slots and named resource capacities.

    ``workers=None`` means an unlimited number of workers.  Every running job
    occupies one worker slot plus the amounts listed in ``job.resources``.
    """

    def __init__(
        self, capacities: Mapping[str, int] | None = None, workers: int | None = None
    ) -> None:
        if workers is not None and workers < 1:
            raise ResourceError("workers must be >= 1")
        self.workers = workers
        self.capacities: dict[str, int] = dict(capacities or {})
        for name, cap in self.capacities.items():
            if not isinstance(cap, int) or cap < 0:
                raise ResourceError(f"capacity of {name!r} must be a non-negative int")
        self._in_use: dict[str, int] = {name: 0 for name in self.capacities}
        self._allocations: dict[str, dict[str, int]] = {}

    # -- queries ------------------------------------------------------
    @property
    def busy_workers(self) -> int:
        """Number of worker slots currently taken."""
        return len(self._allocations)

    def free_workers(self) -> int | None:
        """Free worker slots, or ``None`` when unlimited."""
        if self.workers is None:
            return None
        return self.workers - self.busy_workers

    def available(self, name: str) -> int:
        """Free amount of resource ``name``."""
        if name not in self.capacities:
            raise ResourceError(f"unknown resource {name!r}")
        return self.capacities[name] - self._in_use[name]

    def shortfall(self, requirements: Mapping[str, int]) -> dict[str, int]:
        """Missing amount per resource for ``requirements`` right now.

        An empty dict means the request fits in the currently free amounts.
        """
        missing: dict[str, int] = {}
        for name, amount in requirements.items():
            lacking = amount - self.available(name)
            if lacking > 0:
                missing[name] = lacking
        return missing

    def can_allocate(self, requirements: Mapping[str, int]) -> bool:
        """Whether a job needing ``requirements`` could start now."""
        free = self.free_workers()
        if free is not None and free <= 0:
            return False
        return not self.shortfall(requirements)

    def check_feasible(self, job: Job) -> None:
        """Raise :class:`ResourceError` if ``job`` can never run in this pool."""
        for name, amount in job.resources.items():
            if name not in self.capacities:
                raise ResourceError(f"job {job.name!r} needs unknown resource {name!r}")
            if amount > self.capacities[name]:
                raise ResourceError(
                    f"job {job.name!r} needs {amount} {name!r} "
                    f"but capacity is {self.capacities[name]}"
                )

    # -- mutation -----------------------------------------------------
    def allocate(self, owner: str, requirements: Mapping[str, int]) -> None:
        """Reserve a worker slot and ``requirements`` for ``owner``."""
        if owner in self._allocations:
            raise ResourceError(f"{owner!r} already holds resources")
        if not self.can_allocate(requirements):
            raise ResourceError(f"cannot allocate resources for {owner!r}")
        for name, amount in requirements.items():
            self._in_use[name] += amount
        self._allocations[owner] = dict(requirements)

    def release(self, owner: str) -> None:
        """Give back everything ``owner`` holds."""
        try:
            held = self._allocations.pop(owner)
        except KeyError:
            raise ResourceError(f"{owner!r} holds no resources") from None
        for name, amount in held.items():
            self._in_use[name] -= amount

    def snapshot(self) -> dict[str, int]:
        """Amounts currently in use per resource (plus ``"workers"``)."""
        state = dict(self._in_use)
        state["workers"] = self.busy_workers
        return state
