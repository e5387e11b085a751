import pytest

from schedkit import (
    CycleError,
    DuplicateJobError,
    Job,
    JobGraph,
    SchedkitError,
    UnknownDependencyError,
)


def diamond():
    g = JobGraph()
    g.add_job("a", 3)
    g.add_job("b", 2, deps=["a"])
    g.add_job("c", 4, deps=["a"])
    g.add_job("d", 1, deps=["b", "c"])
    return g


def test_duplicate_job_rejected():
    g = JobGraph()
    g.add_job("a", 1)
    with pytest.raises(DuplicateJobError):
        g.add_job("a", 2)


def test_unknown_dependency_reported():
    g = JobGraph([Job("a", 1, deps=("missing",))])
    with pytest.raises(UnknownDependencyError) as err:
        g.validate()
    assert err.value.job == "a"
    assert err.value.dependency == "missing"


def test_cycle_detected():
    g = JobGraph([Job("a", 1, deps=("b",)), Job("b", 1, deps=("a",)), Job("c", 1)])
    with pytest.raises(CycleError) as err:
        g.validate()
    assert {"a", "b"} <= set(err.value.cycle)
    assert "cycle" in str(err.value)


def test_find_cycle_none_for_dag():
    assert diamond().find_cycle() is None


def test_topological_order_respects_dependencies():
    order = diamond().topological_order()
    assert order.index("a") < order.index("b") < order.index("d")
    assert order.index("c") < order.index("d")


def test_topological_order_prefers_priority():
    g = JobGraph()
    g.add_job("low", 1)
    g.add_job("high", 1, priority=5)
    g.add_job("mid", 1, priority=2)
    assert g.topological_order() == ["high", "mid", "low"]


def test_topological_order_keeps_insertion_for_ties():
    g = JobGraph()
    for name in ["x", "y", "z"]:
        g.add_job(name, 1)
    assert g.topological_order() == ["x", "y", "z"]


def test_ancestors_and_descendants():
    g = diamond()
    assert g.ancestors("d") == {"a", "b", "c"}
    assert g.descendants("a") == {"b", "c", "d"}
    assert g.descendants("d") == set()


def test_roots_leaves_and_dependents():
    g = diamond()
    assert g.roots() == ["a"]
    assert g.leaves() == ["d"]
    assert g.dependents("a") == ["b", "c"]
    assert g.dependencies("d") == ["b", "c"]


def test_get_unknown_job():
    with pytest.raises(SchedkitError):
        diamond().get("zzz")


def test_self_dependency_rejected():
    with pytest.raises(SchedkitError):
        Job("a", 1, deps=("a",))
