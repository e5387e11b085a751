"""A deterministic discrete-event clock."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from .errors import SimulationError


@dataclass(order=True)
class Event:
    """Something that happens at ``time``.  ``seq`` keeps FIFO order."""

    time: float
    seq: int
    kind: str = field(compare=False)
    payload: Any = field(compare=False, default=None)


class SimClock:
    """Simulated time with an ordered queue of future events.

    Events at equal times come out in the order they were scheduled.
    """

    def __init__(self, start: float = 0) -> None:
        self.now: float = start
        self._queue: list[Event] = []
        self._seq = 0

    def schedule(self, time: float, kind: str, payload: Any = None) -> Event:
        """Queue an event at absolute ``time`` (not in the past)."""
        if time < self.now:
            raise SimulationError(f"cannot schedule {kind!r} at {time} before now={self.now}")
        event = Event(time, self._seq, kind, payload)
        self._seq += 1
        heapq.heappush(self._queue, event)
        return event

    def __len__(self) -> int:
        return len(self._queue)

    def peek_time(self) -> float | None:
        """Time of the next event, or ``None`` when idle."""
        return self._queue[0].time if self._queue else None

    def pop_due(self) -> list[Event]:
        """Advance to the next event time and return all events due then."""
        if not self._queue:
            return []
        self.now = self._queue[0].time
        due: list[Event] = []
        while self._queue and self._queue[0].time == self.now:
            due.append(heapq.heappop(self._queue))
        return due
