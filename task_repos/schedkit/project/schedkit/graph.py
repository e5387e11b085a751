"""Dependency graph of jobs with validation and deterministic ordering."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from .errors import CycleError, DuplicateJobError, SchedkitError, UnknownDependencyError
from .models import Job


class JobGraph:
    """A directed acyclic graph of :class:`Job` objects keyed by name.

    Edges point from a dependency to its dependents.  Insertion order is
    remembered and used to break ties so every ordering is deterministic.
    """

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self._jobs: dict[str, Job] = {}
        for job in jobs:
            self.add(job)

    # -- construction -------------------------------------------------
    def add(self, job: Job) -> Job:
        """Add ``job``; raise :class:`DuplicateJobError` on a name clash."""
        if job.name in self._jobs:
            raise DuplicateJobError(job.name)
        self._jobs[job.name] = job
        return job

    def add_job(self, name: str, duration: float, **kwargs) -> Job:
        """Create a :class:`Job` from arguments and add it."""
        return self.add(Job(name, duration, **kwargs))

    # -- access -------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(self._jobs.values())

    def names(self) -> list[str]:
        """Job names in insertion order."""
        return list(self._jobs)

    def get(self, name: str) -> Job:
        """Return the job called ``name``."""
        try:
            return self._jobs[name]
        except KeyError:
            raise SchedkitError(f"no job named {name!r}") from None

    def dependencies(self, name: str) -> list[str]:
        """Direct dependencies of ``name`` in declaration order."""
        return list(self.get(name).deps)

    def dependents(self, name: str) -> list[str]:
        """Jobs that directly depend on ``name``, in insertion order."""
        self.get(name)
        return [j.name for j in self._jobs.values() if name in j.deps]

    # -- validation ---------------------------------------------------
    def validate(self) -> None:
        """Raise if a dependency is unknown or the graph has a cycle."""
        for job in self._jobs.values():
            for dep in job.deps:
                if dep not in self._jobs:
                    raise UnknownDependencyError(job.name, dep)
        cycle = self.find_cycle()
        if cycle is not None:
            raise CycleError(cycle)

    def find_cycle(self) -> list[str] | None:
        """Return one dependency cycle as a closed path, or ``None``.

        The path follows "depends on" edges: in ``["a", "b", "a"]`` job ``a``
        depends on ``b`` which depends on ``a``.  Unknown dependencies are
        ignored here (see :meth:`validate`).
        """
        WHITE, GREY, BLACK = 0, 1, 2
        color = {name: WHITE for name in self._jobs}
        for root in self._jobs:
            if color[root] != WHITE:
                continue
            stack: list[tuple[str, Iterator[str]]] = [(root, iter(self._jobs[root].deps))]
            path = [root]
            color[root] = GREY
            while stack:
                node, it = stack[-1]
                advanced = False
                for dep in it:
                    if dep not in self._jobs:
                        continue
                    if color[dep] == GREY:
                        start = path.index(dep)
                        return path[start:] + [dep]
                    if color[dep] == WHITE:
                        color[dep] = GREY
                        path.append(dep)
                        stack.append((dep, iter(self._jobs[dep].deps)))
                        advanced = True
                        break
                if not advanced:
                    color[node] = BLACK
                    stack.pop()
                    path.pop()
        return None

    # -- ordering -----------------------------------------------------
    def topological_order(self) -> list[str]:
        """Dependencies-first order; ties broken by priority then insertion.

        Among jobs whose dependencies are all placed, the one with the
        highest priority comes first; equal priorities keep insertion order.
        """
        self.validate()
        index = {name: i for i, name in enumerate(self._jobs)}
        remaining = {name: len(job.deps) for name, job in self._jobs.items()}
        children: dict[str, list[str]] = {name: [] for name in self._jobs}
        for job in self._jobs.values():
            for dep in job.deps:
                children[dep].append(job.name)
        heap = [
            (-self._jobs[n].priority, index[n], n) for n, count in remaining.items() if count == 0
        ]
        heapq.heapify(heap)
        order: list[str] = []
        while heap:
            _, _, name = heapq.heappop(heap)
            order.append(name)
            for child in children[name]:
                remaining[child] -= 1
                if remaining[child] == 0:
                    heapq.heappush(heap, (-self._jobs[child].priority, index[child], child))
        return order

    def ancestors(self, name: str) -> set[str]:
        """All jobs ``name`` transitively depends on (excluding itself)."""
        seen: set[str] = set()
        stack = list(self.get(name).deps)
        while stack:
            dep = stack.pop()
            if dep in seen or dep not in self._jobs:
                continue
            seen.add(dep)
            stack.extend(self._jobs[dep].deps)
        return seen

    def descendants(self, name: str) -> set[str]:
        """All jobs that transitively depend on ``name`` (excluding itself)."""
        self.get(name)
        seen: set[str] = set()
        stack = [name]
        while stack:
            current = stack.pop()
            for child in self.dependents(current):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
        return seen

    def roots(self) -> list[str]:
        """Jobs without dependencies, in insertion order."""
        return [n for n, j in self._jobs.items() if not j.deps]

    def leaves(self) -> list[str]:
        """Jobs nothing depends on, in insertion order."""
        depended = {d for j in self._jobs.values() for d in j.deps}
        return [n for n in self._jobs if n not in depended]
