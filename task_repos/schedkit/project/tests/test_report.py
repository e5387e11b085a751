import pytest

from schedkit import (
    Job,
    JobGraph,
    analyze,
    critical_path,
    format_report,
    peak_usage,
    project_length,
    simulate,
    utilization,
)


def diamond():
    return JobGraph(
        [Job("a", 3), Job("b", 2, deps=("a",)), Job("c", 4, deps=("a",)), Job("d", 1, deps=("b", "c"))]
    )


def test_analyze_timings():
    t = analyze(diamond())
    assert (t["b"].earliest_start, t["b"].earliest_finish) == (3, 5)
    assert (t["b"].latest_start, t["b"].latest_finish) == (5, 7)
    assert t["b"].slack == 2
    assert t["c"].critical and t["a"].critical and t["d"].critical


def test_critical_path_diamond():
    path = critical_path(diamond())
    assert path.jobs == ["a", "c", "d"]
    assert path.length == 8
    assert str(path) == "a -> c -> d"


def test_critical_path_starts_at_release():
    g = JobGraph([Job("x", 2), Job("late", 1, release=10), Job("y", 3, deps=("x",))])
    path = critical_path(g)
    assert path.jobs == ["late"]
    assert path.length == 11


def test_empty_graph():
    assert critical_path(JobGraph()).jobs == []
    assert project_length(JobGraph()) == 0


def test_project_length_ignores_resources():
    g = diamond()
    assert project_length(g) == 8
    assert simulate(g, workers=1).makespan == 10


def test_utilization():
    g = JobGraph([Job("a", 4), Job("b", 2)])
    s = simulate(g, workers=2)
    assert utilization(s, 2) == pytest.approx(6 / 8)


def test_peak_usage_overlapping():
    g = JobGraph(
        [Job("a", 5, resources={"gpu": 1}), Job("b", 3, resources={"gpu": 2}), Job("c", 4)]
    )
    s = simulate(g, resources={"gpu": 4})
    assert peak_usage(s, g, "gpu") == 3
    assert peak_usage(s, g) == 3


def test_format_report_lists_jobs_and_summary():
    g = diamond()
    text = format_report(g, simulate(g, workers=1))
    lines = text.splitlines()
    assert lines[0].split() == ["job", "status", "start", "end", "tries", "slack"]
    assert lines[1].split() == ["a", "done", "0", "3", "1", "0", "*"]
    assert "makespan: 10" in text
    assert "critical path: a -> c -> d (length 8)" in text


def test_format_report_mentions_failures():
    g = JobGraph([Job("bad", 1, failures=1), Job("kid", 1, deps=("bad",))])
    text = format_report(g, simulate(g))
    assert "failed: bad" in text
    assert "skipped: kid" in text
    assert any(line.split()[:2] == ["kid", "skipped"] for line in text.splitlines())
