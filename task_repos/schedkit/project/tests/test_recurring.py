from datetime import datetime

import pytest

from schedkit import JobGraph, RecurringJob, SchedkitError, expand_recurring, simulate


def test_expand_creates_named_released_jobs():
    rec = RecurringJob("backup", "0 */6 * * *", duration=30)
    jobs = rec.expand(datetime(2024, 3, 1), datetime(2024, 3, 1, 13))
    assert [j.name for j in jobs] == [
        "backup@2024-03-01T00:00",
        "backup@2024-03-01T06:00",
        "backup@2024-03-01T12:00",
    ]
    assert [j.release for j in jobs] == [0, 360, 720]


def test_origin_shifts_release():
    rec = RecurringJob("r", "30 10 * * *", duration=5)
    (job,) = rec.expand(datetime(2024, 3, 1, 10), datetime(2024, 3, 1, 11), origin=datetime(2024, 3, 1, 9))
    assert job.release == 90


def test_serial_chains_occurrences():
    rec = RecurringJob("r", "*/10 * * * *", duration=15, serial=True, deps=("setup",))
    jobs = rec.expand(datetime(2024, 1, 1, 0, 0), datetime(2024, 1, 1, 0, 30))
    assert jobs[0].deps == ("setup",)
    assert jobs[1].deps == ("setup", jobs[0].name)
    assert jobs[2].deps == ("setup", jobs[1].name)


def test_expand_recurring_sorts_by_release():
    a = RecurringJob("a", "0 * * * *", duration=1)
    b = RecurringJob("b", "30 * * * *", duration=1)
    jobs = expand_recurring([a, b], datetime(2024, 1, 1, 0), datetime(2024, 1, 1, 2))
    assert [j.name.split("@")[0] for j in jobs] == ["a", "b", "a", "b"]


def test_reversed_window_rejected():
    rec = RecurringJob("r", "@hourly", duration=1)
    with pytest.raises(SchedkitError):
        rec.expand(datetime(2024, 1, 2), datetime(2024, 1, 1))


def test_serial_recurring_simulation_does_not_overlap():
    rec = RecurringJob("r", "*/10 * * * *", duration=15, serial=True)
    g = JobGraph(rec.expand(datetime(2024, 1, 1, 0, 0), datetime(2024, 1, 1, 0, 30)))
    s = simulate(g)
    assert [(start, end) for _, start, end in s.timeline()] == [(0, 15), (15, 30), (30, 45)]
