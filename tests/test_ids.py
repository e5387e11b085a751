"""Test ids as datasets list them: exact node ids, and SWE-bench's ids cut at the first whitespace."""

from dataclasses import replace

import pytest

from repogym.envs.rewards import grade
from repogym.envs.rewards.ids import cut_at_whitespace, named_by, outcome_of, outcomes_of
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.core.status import Status

REPORT = {
    "t.py::test_a": "passed",
    "t.py::test_p[big one]": "passed",
    "t.py::test_p[big two]": "failed",
    "t.py::test_p[small one]": "passed",
    "t.py::test_p[bigger]": "failed",
    "t.py::test_q[x\ty]": "passed",
}


def test_a_node_id_names_itself_only():
    assert named_by("t.py::test_a", REPORT) == ["t.py::test_a"]
    assert outcome_of("t.py::test_p[big one]", REPORT) == "passed"
    assert outcome_of("t.py::test_p[big two]", REPORT) == "failed"


def test_a_cut_id_names_every_test_it_is_the_cut_of_and_nothing_more():
    assert cut_at_whitespace("t.py::test_p[small one]") == "t.py::test_p[small"
    assert cut_at_whitespace("t.py::test_q[x\ty]") == "t.py::test_q[x"
    assert named_by("t.py::test_p[small", REPORT) == ["t.py::test_p[small one]"]
    assert named_by("t.py::test_q[x", REPORT) == ["t.py::test_q[x\ty]"]
    # Not a prefix match: "[big" is not the cut of "[bigger]", and a bare name names no parametrisation.
    assert named_by("t.py::test_p[big", REPORT) == ["t.py::test_p[big one]", "t.py::test_p[big two]"]
    assert named_by("t.py::test_p", REPORT) == []
    assert named_by("t.py::test_p[bi", REPORT) == []
    assert named_by("t.py::test_p[bigger", REPORT) == []


def test_a_cut_id_naming_several_tests_passes_only_when_all_passed():
    assert outcome_of("t.py::test_p[big", REPORT) == "failed"
    assert outcome_of("t.py::test_p[small", REPORT) == "passed"
    assert outcome_of("t.py::test_p[none", REPORT) == "missing"
    assert outcomes_of(["t.py::test_a", "t.py::test_p[big", "t.py::test_a"], REPORT) == {
        "t.py::test_a": "passed", "t.py::test_p[big": "failed"}


def test_an_absolute_path_parameter_is_named_by_its_last_component_as_swebench_lists_it():
    report = {"tests/test_self.py::TestRunTC::test_stdin[/repo/tests/mymodule.py-mymodule-/repo/tests/mymodule.py]":
              "passed", "tests/test_self.py::TestRunTC::test_stdin[mymodule.py-mymodule-mymodule.py]": "failed",
              "t.py::test_glob[/a/*.py]": "passed", "t.py::test_net[//host/x.py]": "passed"}
    listed = "tests/test_self.py::TestRunTC::test_stdin[/mymodule.py]"  # pylint-dev__pylint-6528's PASS_TO_PASS
    assert named_by(listed, report) == [next(iter(report))] and outcome_of(listed, report) == "passed"
    assert named_by("tests/test_self.py::TestRunTC::test_stdin[mymodule.py]", report) == []
    assert named_by("t.py::test_glob[/*.py]", report) == [] and named_by("t.py::test_net[/x.py]", report) == []
    assert named_by("tests/test_self.py::TestRunTC::test_stdin[/other.py]", report) == []


SPACED_TESTS = '''\
import pytest

from calc.ops import clamp


@pytest.mark.parametrize("x, want", [(15, 10), (5, 5)], ids=["big one", "big two"])
def test_clamp_cases(x, want):
    assert clamp(x, 0, 10) == want


@pytest.mark.parametrize("x", [12], ids=["above the limit"])
def test_clamp_spaced(x):
    assert clamp(x, 0, 10) == 10
'''


def _new_file_patch(path: str, text: str) -> str:
    lines = text.splitlines()
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines))


@pytest.fixture
def factory(backend):
    return sandbox_factory(backend, {}, SandboxConfig(run_id="pytest"))


@pytest.mark.slow
def test_swebench_cut_ids_grade_the_tests_they_name(factory, tiny_task):
    # As SWE-bench lists them: "[big" names both cases (one passes at the base: the cut id must still fail).
    task = replace(tiny_task, test_patch=tiny_task.test_patch + _new_file_patch("tests/test_spaced.py", SPACED_TESTS),
                   FAIL_TO_PASS=["tests/test_spaced.py::test_clamp_cases[big", "tests/test_spaced.py::test_clamp_spaced[above"],
                   PASS_TO_PASS=["tests/test_ops.py::test_add_zero"])
    gold = grade(task, task.patch, factory)
    assert gold.status == Status.RESOLVED, gold.error
    assert gold.tests == {tid: "passed" for tid in task.FAIL_TO_PASS + task.PASS_TO_PASS}
    empty = grade(task, "", factory)
    assert empty.status == Status.UNRESOLVED
    assert empty.tests["tests/test_spaced.py::test_clamp_cases[big"] == "failed"
    assert empty.tests["tests/test_spaced.py::test_clamp_spaced[above"] == "failed"
    # An id that is a mere prefix names nothing: missing, never passed.
    loose = replace(task, FAIL_TO_PASS=["tests/test_spaced.py::test_clamp_cases[bi"])
    record = grade(loose, task.patch, factory)
    assert record.status == Status.UNRESOLVED
    assert record.tests["tests/test_spaced.py::test_clamp_cases[bi"] == "missing"
