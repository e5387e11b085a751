"""The bundled suite: reproducible repositories, and every task validated in real sandboxes."""

import subprocess

import pytest

from repogym.envs.rewards.validate import validate_tasks
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.tasks.repos import repo_path, snapshot
from repogym.envs.tasks.suites import load_suite
from tests.conftest import require_backend


def test_bundled_repositories_rebuild_with_the_recorded_commits():
    for task in load_suite("builtin"):
        repo = repo_path(task)
        assert subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{task.base_commit}^{{commit}}"]).returncode == 0
        assert len(snapshot(task).tar) > 10_000
    history = subprocess.run(["git", "-C", str(repo), "log", "--oneline", "main"], capture_output=True, text=True)
    assert history.stdout.strip()


def test_base_commits_hide_the_hidden_tests():
    import io
    import tarfile
    for task in load_suite("builtin"):
        names = tarfile.open(fileobj=io.BytesIO(snapshot(task).tar)).getnames()
        hidden = {t.split("::")[0] for t in task.FAIL_TO_PASS if t.split("::")[0] not in names}
        assert hidden, f"{task.instance_id}: every FAIL_TO_PASS file is visible; expected hidden tests"
        assert ".git" not in {n.split("/")[0] for n in names}


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_the_whole_builtin_suite_validates(backend_name):
    """Every builtin task validates on each backend. On docker the gold patch and the empty one are graded twice each,
    each time in a fresh sandbox, and the grades of a patch must agree on every test (reward determinism; locally,
    tests/test_determinism.py); locally each is graded once (the local sweep proves the backend, not the tasks'
    stability, which the docker sweep and test_determinism check)."""
    require_backend(backend_name)
    tasks = load_suite("builtin")
    factory = sandbox_factory(backend_name, {}, SandboxConfig(run_id="pytest-suite"))
    # (The coverage run a valid task gets is tests/test_rewards.py's: here it would only double the sweep.)
    runs = 2 if backend_name == "docker" else 1
    verdicts = validate_tasks(tasks, lambda task: factory, workers=2, coverage=False, gold_runs=runs, runs=runs)
    bad = {v.instance_id: v.problems + v.flaky + v.infra_errors for v in verdicts if not v.ok}
    assert not bad
    assert len(verdicts) >= 30
