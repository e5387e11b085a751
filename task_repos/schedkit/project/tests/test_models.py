import pytest

from schedkit import Job, RetryPolicy, SchedkitError


def test_job_defaults():
    job = Job("a", 2)
    assert job.deps == ()
    assert job.priority == 0
    assert job.max_attempts == 1


def test_job_string_dep_becomes_tuple_and_dedupes():
    assert Job("a", 1, deps="b").deps == ("b",)
    assert Job("a", 1, deps=("b", "c", "b")).deps == ("b", "c")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"duration": -1},
        {"duration": 1, "release": -2},
        {"duration": 1, "failures": -1},
        {"duration": 1, "resources": {"gpu": 0}},
    ],
)
def test_job_validation(kwargs):
    with pytest.raises(SchedkitError):
        Job("a", **kwargs)


def test_retry_policy_validation():
    with pytest.raises(SchedkitError):
        RetryPolicy(max_retries=-1)
    with pytest.raises(SchedkitError):
        RetryPolicy(factor=0.5)


def test_attempt_success_model():
    job = Job("a", 1, failures=2, retry=RetryPolicy(max_retries=3))
    assert job.max_attempts == 4
    assert [job.attempt_succeeds(n) for n in (1, 2, 3)] == [False, False, True]
