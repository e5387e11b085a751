import pytest

from schedkit import Job, ResourceError, ResourcePool


def test_allocate_and_release():
    pool = ResourcePool({"gpu": 2}, workers=2)
    pool.allocate("a", {"gpu": 1})
    assert pool.available("gpu") == 1
    assert pool.free_workers() == 1
    pool.release("a")
    assert pool.available("gpu") == 2
    assert pool.free_workers() == 2


def test_worker_limit_blocks():
    pool = ResourcePool(workers=1)
    pool.allocate("a", {})
    assert not pool.can_allocate({})
    with pytest.raises(ResourceError):
        pool.allocate("b", {})


def test_unlimited_workers():
    pool = ResourcePool()
    for i in range(50):
        pool.allocate(f"j{i}", {})
    assert pool.free_workers() is None
    assert pool.busy_workers == 50


def test_shortfall_reports_missing_amounts():
    pool = ResourcePool({"gpu": 4, "mem": 8})
    pool.allocate("a", {"gpu": 3, "mem": 2})
    assert pool.shortfall({"gpu": 3, "mem": 1}) == {"gpu": 2}


def test_check_feasible_errors():
    pool = ResourcePool({"gpu": 1})
    with pytest.raises(ResourceError, match="unknown resource"):
        pool.check_feasible(Job("a", 1, resources={"tpu": 1}))
    with pytest.raises(ResourceError, match="capacity"):
        pool.check_feasible(Job("a", 1, resources={"gpu": 2}))


def test_release_unknown_owner():
    with pytest.raises(ResourceError):
        ResourcePool().release("nobody")


def test_snapshot():
    pool = ResourcePool({"gpu": 2})
    pool.allocate("a", {"gpu": 2})
    assert pool.snapshot() == {"gpu": 2, "workers": 1}


def test_invalid_workers():
    with pytest.raises(ResourceError):
        ResourcePool(workers=0)
