import pytest

from schedkit import (
    CycleError,
    Job,
    JobGraph,
    ResourceError,
    RetryPolicy,
    SchedkitError,
    Simulator,
    simulate,
)


def spans(schedule):
    return {run.name: (run.start, run.end) for run in schedule}


def test_chain_runs_sequentially():
    g = JobGraph([Job("a", 2), Job("b", 3, deps=("a",)), Job("c", 1, deps=("b",))])
    s = simulate(g)
    assert spans(s) == {"a": (0, 2), "b": (2, 5), "c": (5, 6)}
    assert s.makespan == 6


def test_independent_jobs_run_in_parallel_without_limit():
    g = JobGraph([Job("a", 2), Job("b", 5), Job("c", 1)])
    s = simulate(g)
    assert all(run.start == 0 for run in s)
    assert s.makespan == 5


def test_single_worker_orders_by_priority():
    g = JobGraph([Job("a", 1, priority=1), Job("b", 1, priority=3), Job("c", 1, priority=2)])
    s = simulate(g, workers=1)
    assert [name for name, _, _ in s.timeline()] == ["b", "c", "a"]


def test_two_workers_limit_concurrency():
    g = JobGraph([Job("a", 4, priority=2), Job("b", 2, priority=1), Job("c", 3)])
    s = simulate(g, workers=2)
    assert spans(s) == {"a": (0, 4), "b": (0, 2), "c": (2, 5)}


def test_named_resource_capacity():
    g = JobGraph(
        [
            Job("a", 3, resources={"gpu": 2}, priority=2),
            Job("b", 3, resources={"gpu": 1}, priority=1),
            Job("c", 3, resources={"gpu": 1}),
        ]
    )
    s = simulate(g, resources={"gpu": 3})
    assert spans(s) == {"a": (0, 3), "b": (0, 3), "c": (3, 6)}


def test_small_job_backfills_when_big_one_blocked():
    g = JobGraph(
        [
            Job("hog", 5, resources={"mem": 3}, priority=9),
            Job("big", 2, resources={"mem": 2}, priority=5),
            Job("small", 2, resources={"mem": 1}),
        ]
    )
    s = simulate(g, resources={"mem": 4})
    assert s.start("small") == 0
    assert s.start("big") == 5


def test_root_release_time_respected():
    g = JobGraph([Job("late", 2, release=7), Job("early", 1)])
    s = simulate(g, workers=1)
    assert spans(s) == {"late": (7, 9), "early": (0, 1)}
    assert s["late"].ready_at == 7


def test_retry_with_exponential_backoff():
    job = Job("flaky", 3, failures=2, retry=RetryPolicy(max_retries=3, base_delay=1, factor=2))
    s = simulate(JobGraph([job]))
    run = s["flaky"]
    assert run.status == "done"
    assert [(a.start, a.end, a.ok) for a in run.attempts] == [
        (0, 3, False),
        (4, 7, False),
        (9, 12, True),
    ]


def test_backoff_is_capped():
    policy = RetryPolicy(max_retries=3, base_delay=5, factor=10, max_delay=7)
    s = simulate(JobGraph([Job("f", 1, failures=3, retry=policy)]))
    assert [a.start for a in s["f"].attempts] == [0, 6, 14, 22]
    assert s["f"].status == "done"


def test_exhausted_retries_fail_and_skip_dependents():
    g = JobGraph(
        [
            Job("bad", 1, failures=5, retry=RetryPolicy(max_retries=1)),
            Job("child", 1, deps=("bad",)),
            Job("other", 2),
        ]
    )
    s = simulate(g)
    assert s["bad"].status == "failed"
    assert len(s["bad"].attempts) == 2
    assert s["child"].status == "skipped"
    assert s["child"].attempts == []
    assert s["other"].status == "done"
    assert s.failed() == ["bad"]
    assert not s.ok


def test_infeasible_resource_request_raises():
    g = JobGraph([Job("a", 1, resources={"gpu": 4})])
    with pytest.raises(ResourceError):
        simulate(g, resources={"gpu": 2})


def test_cycle_raises_before_running():
    g = JobGraph([Job("a", 1, deps=("b",)), Job("b", 1, deps=("a",))])
    with pytest.raises(CycleError):
        Simulator(g).run()


def test_zero_duration_jobs():
    g = JobGraph([Job("a", 0), Job("b", 0, deps=("a",)), Job("c", 2, deps=("b",))])
    s = simulate(g, workers=1)
    assert spans(s) == {"a": (0, 0), "b": (0, 0), "c": (0, 2)}


def test_schedule_accessors():
    g = JobGraph([Job("a", 1), Job("b", 1, deps=("a",))])
    s = simulate(g)
    assert len(s) == 2
    assert s.ok
    assert s.succeeded() == ["a", "b"]
    assert s.end("b") == 2
    with pytest.raises(SchedkitError):
        s["nope"]


def test_wait_time_recorded():
    g = JobGraph([Job("a", 4, priority=1), Job("b", 1)])
    s = simulate(g, workers=1)
    assert s["b"].ready_at == 0
    assert s["b"].wait == 4


def test_simulation_is_deterministic():
    def build():
        jobs = [Job(f"j{i}", (i * 7) % 5 + 1, priority=i % 3) for i in range(12)]
        jobs.append(Job("final", 1, deps=tuple(j.name for j in jobs)))
        return JobGraph(jobs)

    first = simulate(build(), workers=3).timeline()
    second = simulate(build(), workers=3).timeline()
    assert first == second
    assert first[-1][0] == "final"
