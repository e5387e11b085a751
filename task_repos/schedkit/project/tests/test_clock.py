import pytest

from schedkit import SimulationError
from schedkit.clock import SimClock


def test_events_pop_in_time_order_grouped():
    clock = SimClock()
    clock.schedule(5, "x", 1)
    clock.schedule(2, "x", 2)
    clock.schedule(5, "x", 3)
    assert [e.payload for e in clock.pop_due()] == [2]
    assert clock.now == 2
    assert [e.payload for e in clock.pop_due()] == [1, 3]
    assert clock.now == 5
    assert clock.pop_due() == []


def test_cannot_schedule_in_past():
    clock = SimClock(start=10)
    with pytest.raises(SimulationError):
        clock.schedule(3, "x")


def test_peek_time():
    clock = SimClock()
    assert clock.peek_time() is None
    clock.schedule(4, "x")
    assert clock.peek_time() == 4
    assert len(clock) == 1
