"""Task generation end to end on small projects written here, plus sources, layouts and keep/drop rules."""

import dataclasses
import json

import pytest

from repogym.envs.core.errors import ConfigError, SourceNotUsable
from repogym.envs.rewards.validate import validate_task
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.taskgen.generate import GenerateConfig, explain_failure, generate
from repogym.envs.taskgen.layout import declared_requirements, detect_layout
from repogym.envs.taskgen.sources import materialize

LIB = '''\
def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def total(values):
    result = 0
    for value in values:
        result = result + value
    return result


def mean(values):
    if not values:
        return 0.0
    return total(values) / len(values)


def untested(a, b):
    return a and b
'''

TESTS = '''\
from mini.core import clamp, mean, total


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_total():
    assert total([1, 2, 3]) == 6


def test_mean():
    assert mean([2, 4]) == 3


def test_mean_empty():
    assert mean([]) == 0.0
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("mini")
    (root / "mini").mkdir()
    (root / "mini" / "__init__.py").write_text("")
    (root / "mini" / "core.py").write_text(LIB)
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text(TESTS)
    (root / "pyproject.toml").write_text('[project]\nname = "mini"\nversion = "0"\ndependencies = []\n')
    return root


def test_layout_detection(project, tmp_path):
    layout = detect_layout(project)
    assert layout.test_paths == ["tests"] and "pytest" in layout.test_command
    assert detect_layout(tmp_path) is None
    (tmp_path / "setup.cfg").write_text("[options]\ninstall_requires =\n    attrs>=20\n    six; python_version<'3.0'\n")
    assert declared_requirements(tmp_path) == ["attrs>=20"]


def test_folder_source_becomes_a_deterministic_git_repo(project):
    one, two = materialize(str(project)), materialize(str(project))
    assert one.head == two.head and (one.path / ".git").is_dir()
    with pytest.raises(ConfigError, match="exact version"):
        materialize("pypi:requests")
    with pytest.raises(ConfigError, match="not a folder"):
        materialize("/no/such/place")


@pytest.mark.slow
def test_generate_keeps_only_caught_mutations_and_they_validate(project):
    config = GenerateConfig(max_tasks=4, seed=3, sandbox="local", baseline_runs=2)
    tasks, stats = generate(str(project), config)
    assert 1 <= len(tasks) <= 4 and stats["kept"] == len(tasks)
    assert stats["baseline_passing"] == 6 and stats["tried"] >= len(tasks)
    assert stats["candidates"] > 0
    factory = sandbox_factory("local", tasks[0].setup, SandboxConfig(run_id="pytest-taskgen"))
    for task in tasks:
        assert task.FAIL_TO_PASS and set(task.FAIL_TO_PASS).isdisjoint(task.PASS_TO_PASS)
        assert set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS) == {
            f"tests/test_core.py::{n}" for n in ("test_clamp_low", "test_clamp_high", "test_clamp_inside",
                                                  "test_total", "test_mean", "test_mean_empty")}
        assert "untested" not in json.dumps(task.extra["taskgen"]["functions"])  # no test reaches it
        assert task.patch.startswith("diff --git") and "mini/core.py" in task.patch
        assert "-" not in [line[:1] for line in task.problem_statement.splitlines() if "def " in line]
        assert 1 <= task.difficulty <= 5
        verdict = validate_task(task, factory, runs=2)
        assert verdict.ok, (task.instance_id, verdict.problems)
    assert stats["validated"] == len(tasks) and stats["invalid"] == {}  # generate validated them too
    # Deterministic with a seed (the candidate order; validation, done above, is left out for time).
    again, _ = generate(str(project), dataclasses.replace(config, validate=False))
    assert [t.instance_id for t in again] == [t.instance_id for t in tasks]


def test_a_project_whose_tests_cannot_import_gets_a_clear_reason(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import no_such_dependency_xyz\n\ndef test_x():\n    pass\n")
    with pytest.raises(SourceNotUsable, match="missing dependency: ModuleNotFoundError: No module named "
                                              "'no_such_dependency_xyz'"):
        generate(str(tmp_path), GenerateConfig(sandbox="local", baseline_runs=1))


def test_explain_failure():
    assert explain_failure("ERROR collecting tests/test_a.py\n") == "collection error in: tests/test_a.py"
    assert explain_failure("").startswith("no test passed")


@pytest.mark.slow
@pytest.mark.docker
def test_a_real_pypi_project_gives_validated_tasks():
    """The whole path on a real sdist: pip download, commit, baseline in Docker, mutate, validate."""
    from tests.conftest import require_backend
    require_backend("docker")
    source = "pypi:inflection==0.5.1"
    repo = materialize(source)
    assert materialize(source).head == repo.head and (repo.path / "inflection").exists()
    tasks, stats = generate(source, GenerateConfig(max_tasks=3, seed=1, sandbox="docker"))
    assert len(tasks) == 3 and stats["baseline_passing"] > 100
    factory = sandbox_factory("docker", tasks[0].setup, SandboxConfig(run_id="pytest-taskgen"))
    for task in tasks:
        verdict = validate_task(task, factory)
        assert verdict.ok, (task.instance_id, verdict.problems, verdict.infra_errors)


@pytest.mark.slow
def test_a_mutation_that_hangs_the_tests_is_dropped_not_fatal(tmp_path):
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "__init__.py").write_text("")
    # Dropping `n -= 1` loops forever; dropping `n = n` changes nothing. Neither may become a task.
    (tmp_path / "loop" / "core.py").write_text(
        "def countdown(n):\n    while n > 0:\n        n -= 1\n        n = n\n    return 3\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_loop.py").write_text(
        "from loop.core import countdown\n\ndef test_countdown():\n    assert countdown(3) == 3\n")
    config = GenerateConfig(sandbox="local", baseline_runs=1, mutant_timeout_min=2.0, operators=("drop_statement",))
    tasks, stats = generate(str(tmp_path), config)
    assert tasks == [] and stats["tried"] == 2 and stats["timeouts"] == 1


# A call chain test -> api.describe -> report.summary -> stats.total / stats.mean, and a test of mean itself.
DEEP = {
    "deep/__init__.py": "",
    "deep/api.py": "from deep.report import summary\n\n\ndef describe(values):\n    return 'stats ' + summary(values)\n",
    "deep/report.py": ("from deep.stats import mean, total\n\n\ndef summary(values):\n"
                       "    return f'{total(values)}/{mean(values):g}'\n"),
    "deep/stats.py": ("def total(values):\n    result = 0\n    for value in values:\n        result = result + value\n"
                      "    return result\n\n\ndef mean(values):\n    count = len(values)\n    if count == 0:\n"
                      "        return 0\n    return sum(values) / count\n"),
    "tests/test_api.py": ("from deep.api import describe\n\n\ndef test_describe():\n    assert describe([1, 2, 3]) == 'stats 6/2'"
                          "\n\n\ndef test_describe_empty():\n    assert describe([]) == 'stats 0/0'\n"),
    "tests/test_stats.py": "from deep.stats import mean\n\n\ndef test_mean():\n    assert mean([2, 4]) == 3\n",
    "pyproject.toml": '[project]\nname = "deep"\nversion = "0"\ndependencies = []\n',
}


def _write(root, files):
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_long_horizon_verdicts_on_a_call_chain(tmp_path):
    from repogym.envs.analysis import RepoIndex
    from repogym.envs.taskgen.generate import _is_test_file
    from repogym.envs.taskgen.horizon import judge, min_turns
    from repogym.envs.taskgen.mutations import Mutation
    files = dict(DEEP, **{"tests/test_near.py": "from deep.stats import total\nfrom deep.api import describe\n\n\n"
                                                "def test_via_api():\n    assert describe([2]) == 'stats 2/2'\n",
                          "tests/test_named.py": "from deep.api import describe\n\n\ndef test_named():\n"
                                                 "    total = describe([2])\n    assert total == 'stats 2/2'\n"})
    root = _write(tmp_path, files)
    index = RepoIndex.from_folder(root)

    def at(function, file="deep/stats.py"):
        return [Mutation("change_constant", file, function, 0, 1, "1", 1, "")]

    far = judge(index, root, at("deep.stats.total"), ["tests/test_api.py::test_describe"], 3, _is_test_file)
    assert far.long and far.distance == 3
    assert min_turns(far.distance, 3) == 10 and min_turns(5, 3) == 14
    close = judge(index, root, at("deep.report.summary", "deep/report.py"), ["tests/test_api.py::test_describe"], 3,
                  _is_test_file)
    assert not close.long and close.distance == 2
    assert not judge(index, root, at("deep.stats.mean"), ["tests/test_api.py::test_describe", "tests/test_stats.py::"
                                                          "test_mean"], 3, _is_test_file).long
    # Three calls away, but its module imports the file of the bug: not long.
    imported = judge(index, root, at("deep.stats.total"), ["tests/test_near.py::test_via_api"], 3, _is_test_file)
    assert not imported.long and "deep/stats.py" in imported.reason
    assert not judge(index, root, at("deep.stats.total"), ["tests/test_api.py::test_gone"], 3, _is_test_file).long
    # The test's own code names the mutated function: a call the graph may have missed, so not long.
    named = judge(index, root, at("deep.stats.total"), ["tests/test_named.py::test_named"], 3, _is_test_file)
    assert not named.long and "names" in named.reason


@pytest.mark.slow
def test_generate_long_horizon_keeps_only_far_bugs(tmp_path):
    root = _write(tmp_path, DEEP)
    config = GenerateConfig(max_tasks=20, seed=0, sandbox="local", baseline_runs=1, pair_every=0, horizon="long",
                            operators=("change_constant", "flip_comparison", "drop_statement"), validate=False)
    tasks, stats = generate(str(root), config)
    assert tasks and stats["not_long"] >= 1  # mean's comparison is caught by test_mean, right next to it
    for task in tasks:
        assert task.extra["horizon"] == "long" and task.extra["min_turns"] >= 10 and task.difficulty >= 3
        assert set(task.extra["taskgen"]["functions"]) <= {"deep.stats.total", "deep.stats.mean"}
        assert task.extra["taskgen"]["test_distance"] >= 3
        assert task.FAIL_TO_PASS and all(t.startswith("tests/test_api.py::") for t in task.FAIL_TO_PASS)
        assert "deep/stats.py" in task.patch
    with pytest.raises(ConfigError, match="horizon"):
        GenerateConfig(horizon="short")


@pytest.mark.slow
def test_generate_drops_a_task_whose_fix_the_sandbox_can_read_and_keeps_the_rest(tmp_path):
    """The project vendors a verbatim copy of ``textwrap.indent``: a mutation in it is restored by a line of the
    standard library's ``textwrap.py``, which the agent's sandbox can read (the interpreter's ``sys.path``)."""
    import inspect
    import textwrap
    from tests.conftest import require_backend
    require_backend("local")  # the copy must be of the sandbox's own interpreter's standard library
    copied = inspect.getsource(textwrap.indent)
    root = _write(tmp_path, {
        "vend/__init__.py": "",
        "vend/core.py": ("def total(values):\n    result = 0\n    for value in values:\n        result = result + value\n"
                         "    return result\n\n\ndef double(x):\n    return x * 2\n"),
        "vend/_textwrap.py": copied,
        "tests/test_vend.py": ("from vend._textwrap import indent\nfrom vend.core import double, total\n\n\n"
                               "def test_total():\n    assert total([1, 2, 3]) == 6\n\n\n"
                               "def test_double():\n    assert double(3) == 6\n\n\n"
                               "def test_indent():\n    assert indent('a\\n\\nb\\n', '> ') == '> a\\n\\n> b\\n'\n"),
    })
    # One operator, so each function has one candidate, and a seen function cannot hide the leaking one.
    config = GenerateConfig(max_tasks=10, sandbox="local", baseline_runs=1, pair_every=0, operators=("change_constant",))
    progress = []
    tasks, stats = generate(str(root), config, lambda *args: progress.append(args))
    assert sorted(f for t in tasks for f in t.extra["taskgen"]["functions"]) == ["vend.core.double", "vend.core.total"]
    assert stats["kept"] == 2 and stats["validated"] == stats["tried"] == 3
    assert set(stats["invalid"]) == {"leak"} and stats["invalid"]["leak"] >= 1
    (dropped,) = stats["invalid_tasks"]
    assert [f.split(".")[:3] for f in dropped["functions"]] == [["vend", "_textwrap", "indent"]], dropped
    assert dropped["reasons"] == ["leak"]
    assert any(p.startswith("leak: ") and p.split()[1].endswith("/textwrap.py") for p in dropped["problems"]), dropped
    assert progress[-1] == (str(root), 2, 10, {"leak": 1})
