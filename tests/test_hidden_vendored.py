"""A leak in the image, removed: a task on requests whose fix pip's vendored requests holds (a later release).
find_leaks flags that copy and names its remedy; with ``setup.hide_vendored`` the image keeps only that copy's
bytecode, pip still installs the repository, and find_leaks finds nothing."""

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import pip
from repogym.envs.rewards.leaks import vendored_copies
from tests.conftest import _git, download_sdist, require_backend

BASE = "requests==2.31.0"
"""The task's base: a requests release older than the one the newest pip vendors."""


def test_vendored_copies_are_named_from_the_leak_paths():
    problems = ["/usr/local/lib/python3.9/dist-packages/pip/_vendor/requests/models.py holds 3 line(s) of the gold "
                "patch: ['x']", "/usr/lib/python3/dist-packages/pip/_vendor/six.py holds 2 line(s) of the gold patch",
                "/home/agent/notes.md holds 4 line(s) of the gold patch", "git store holds 2 commits (expected 1)"]
    assert vendored_copies(problems) == ["requests", "six"]
    assert vendored_copies(["/repo/pip/_vendor_docs/requests.md holds 2"]) == []


@pytest.mark.docker
@pytest.mark.slow
def test_a_fix_held_by_pips_vendored_copy_is_flagged_then_hidden(tmp_path):
    require_backend("docker")
    from repogym.envs.rewards.leaks import find_leaks
    from repogym.envs.sandbox import SandboxConfig, sandbox_factory
    from repogym.envs.tasks.schema import Task
    with tarfile.open(download_sdist(BASE, tmp_path)) as tar:
        tar.extractall(tmp_path, filter="data")
    repo = next(p for p in tmp_path.iterdir() if p.is_dir())
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    # The gold patch: a method of the release pip vendors (the image gets this pip: the same copy), added to the base.
    vendored = (Path(pip.__file__).parent / "_vendor" / "requests" / "adapters.py").read_text()
    method = re.search(r"\n    def build_connection_pool_key_attributes\(.*?(?=\n    def )", vendored, re.DOTALL).group(0)
    adapters = repo / "requests" / "adapters.py"
    assert "build_connection_pool_key_attributes" not in adapters.read_text()
    adapters.write_text(adapters.read_text().replace("\n    def init_poolmanager(", method + "\n\n    def init_poolmanager(", 1))
    gold = _git(repo, "diff")
    _git(repo, "checkout", "-q", ".")
    setup = {"pip": [f"pip=={pip.__version__}", "urllib3==2.2.3", "idna==3.10", "charset-normalizer==3.4.0",
                     "certifi==2024.8.30"], "install": "python -m pip install -e .", "source": f"path:{repo}"}
    task = Task(instance_id="psf__requests-9999", repo="psf/requests", base_commit=_git(repo, "rev-parse", "HEAD").strip(),
                problem_statement="adapters", patch=gold, setup=setup)
    config = SandboxConfig(run_id="pytest")
    found = find_leaks(task, sandbox_factory("docker", setup, config))
    assert any("/pip/_vendor/requests/adapters.py holds" in p for p in found), found
    assert vendored_copies(found) == ["requests"]
    hidden = {**setup, "hide_vendored": vendored_copies(found)}
    assert find_leaks(Task(**{**task.__dict__, "setup": hidden}), sandbox_factory("docker", hidden, config)) == []
    sandbox = sandbox_factory("docker", hidden, config)()
    try:
        from repogym.envs.tasks.repos import snapshot
        sandbox.load(snapshot(task))  # pip ran the install step with its copy as bytecode
        where = sandbox.run("python -c 'import pip._vendor.requests.adapters as a; print(a.__file__)' && python -m pip "
                            "--version && ! ls /usr/local/lib/python3*/dist-packages/pip/_vendor/requests/*.py "
                            "/usr/lib/python3/dist-packages/pip/_vendor/requests/*.py")
        assert where.ok and where.stdout.split()[0].endswith("/pip/_vendor/requests/adapters.pyc"), where
        # No text file holds the method now; its name stays in the bytecode (the limit docs/validation.md states).
        assert sandbox.run("grep -rIl build_connection_pool_key_attributes /usr").stdout.strip() == ""
    finally:
        sandbox.close()
