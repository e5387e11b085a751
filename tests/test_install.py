"""A task's environment as data: its install step (a src-layout setuptools-scm project installs itself, on both
backends) and its CPUs."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from repogym.envs.core.errors import ConfigError, InstallFailed
from repogym.envs.core.status import Status
from repogym.envs.rewards import grade
from repogym.envs.rewards.leaks import find_leaks
from repogym.envs.rewards.tamper import filter_patch, is_tamper_path
from repogym.envs.rewards.validate import validate_task
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.sandbox.install import environment_requirements, install_steps
from repogym.envs.tasks.repos import snapshot
from repogym.envs.tasks.schema import Task
from tests.conftest import require_backend

PACKAGE = '''\
from importlib.metadata import version as _dist_version

from ._version import version as __version__


def installed_version():
    """The version pip recorded: only there when the project is installed."""
    return _dist_version("scmcalc")


def double(x):
    return x * 3
'''
HIDDEN = '''\
import scmcalc


def test_double():
    assert scmcalc.double(4) == 8


def test_installed():
    assert scmcalc.installed_version() == scmcalc.__version__
'''
SETUP = {"pip": ["setuptools-scm==8.1.0"], "install": "python -m pip install -e ."}


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture(scope="module")
def scm_task(tmp_path_factory) -> Task:
    """A src-layout project whose version comes from setuptools-scm (a generated, git-ignored ``_version.py``)."""
    repo = tmp_path_factory.mktemp("scm") / "repo"
    (repo / "src" / "scmcalc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm>=8"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "scmcalc"\ndynamic = ["version"]\n[tool.setuptools_scm]\n'
        'version_file = "src/scmcalc/_version.py"\n')
    (repo / ".gitignore").write_text("src/scmcalc/_version.py\n*.egg-info/\n")
    (repo / "src" / "scmcalc" / "__init__.py").write_text(PACKAGE)
    (repo / "tests" / "test_base.py").write_text("import scmcalc\n\n\ndef test_imports():\n    assert scmcalc.__version__\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "scmcalc")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "scmcalc" / "__init__.py").write_text(PACKAGE.replace("x * 3", "x * 2"))
    gold = _git(repo, "diff")
    _git(repo, "checkout", "-q", ".")
    (repo / "tests" / "test_hidden.py").write_text(HIDDEN)
    _git(repo, "add", "-N", "tests/test_hidden.py")
    test_patch = _git(repo, "diff")
    _git(repo, "rm", "-q", "--cached", "tests/test_hidden.py")
    (repo / "tests" / "test_hidden.py").unlink()
    return Task(instance_id="scm__calc-1", repo="tests/scmcalc", base_commit=base, problem_statement="double triples",
                patch=gold, test_patch=test_patch, FAIL_TO_PASS=["tests/test_hidden.py::test_double"],
                PASS_TO_PASS=["tests/test_hidden.py::test_installed", "tests/test_base.py::test_imports"],
                setup={"source": f"path:{repo}", **SETUP})


def test_install_steps_are_checked_and_bring_their_build_requirements():
    assert install_steps({}) == () and environment_requirements({"pip": ["six"]}) == ["six"]
    assert install_steps({"pre_install": ["sed -i s/a/b/ setup.py"], "install": "pip install -e ."}) == (
        "sed -i s/a/b/ setup.py", "pip install -e .")
    assert environment_requirements({"pip": ["setuptools==65.0"], "install": "x"}) == ["pip>=23.1", "wheel",
                                                                                       "setuptools==65.0"]
    with pytest.raises(ConfigError, match="pre_install: expected a list"):
        install_steps({"pre_install": "sed"})
    with pytest.raises(ConfigError, match="install: expected one shell command"):
        install_steps({"install": ["pip", "install"]})


def test_a_patch_cannot_reach_the_install_folder():
    assert is_tamper_path(".repogym-install/__editable___scmcalc_finder.py")
    assert not is_tamper_path("src/scmcalc/__init__.py")
    patch = ("diff --git a/.repogym-install/x.py b/.repogym-install/x.py\nnew file mode 100644\n--- /dev/null\n"
             "+++ b/.repogym-install/x.py\n@@ -0,0 +1 @@\n+import os\n")
    kept, dropped = filter_patch(patch)
    assert kept.strip() == "" and dropped == [".repogym-install/x.py"]


@pytest.mark.slow
def test_the_project_installs_itself_and_grades(scm_task, backend):
    factory = sandbox_factory(backend, scm_task.setup, SandboxConfig(run_id="pytest"))
    sandbox = factory()
    try:
        sandbox.load(snapshot(scm_task))
        probe = "python -c 'import scmcalc; print(scmcalc.__version__, scmcalc.installed_version())'"
        first = sandbox.run(probe)
        assert first.ok, first.stderr
        version, recorded = first.stdout.split()
        assert version == recorded and version.startswith("0.1.dev")
        assert sandbox.run("git status --porcelain").stdout == ""  # the install's products are part of the base
        assert sandbox.run("git rev-list --all --reflog | wc -l").stdout.strip() == "1"  # one commit, as ever
        isolated = sandbox.run("python -I -c 'import scmcalc'")
        assert not isolated.ok  # an isolated interpreter (the harness's) does not load the install folder
        sandbox.run("rm -rf src/scmcalc/_version.py .repogym-install")
        sandbox.reset()
        again = sandbox.run(probe)
        assert again.ok and again.stdout.split() == [version, version]
    finally:
        sandbox.close()
    assert find_leaks(scm_task, factory) == []
    gold = grade(scm_task, scm_task.patch, factory)
    assert gold.status == Status.RESOLVED, (gold.error, gold.tests, gold.log_tail)
    # The attack: a .pth planted in the install folder would run in the test process and could force passes.
    planted = ("diff --git a/.repogym-install/zz.pth b/.repogym-install/zz.pth\nnew file mode 100644\n--- /dev/null\n"
               "+++ b/.repogym-install/zz.pth\n@@ -0,0 +1 @@\n+import os; os._exit(0)\n")
    forged = grade(scm_task, planted, factory)
    assert forged.status == Status.UNRESOLVED and ".repogym-install/zz.pth" in forged.dropped
    empty = grade(scm_task, "", factory)
    assert empty.status == Status.UNRESOLVED and empty.tests["tests/test_hidden.py::test_double"] == "failed"
    assert empty.tests["tests/test_hidden.py::test_installed"] == "passed"


@pytest.mark.slow
def test_a_setuptools_scm_project_installs_with_the_version_its_tags_give(scm_task, backend, tmp_path):
    # The sandbox's tree is one commit with no tags: without the tag's version setuptools-scm would say 0.1.dev1.
    clone = tmp_path / "tagged"
    subprocess.run(["git", "clone", "-q", scm_task.setup["source"].removeprefix("path:"), str(clone)], check=True)
    _git(clone, "tag", "v3.1.0", scm_task.base_commit)
    task = replace(scm_task, setup={**scm_task.setup, "source": f"path:{clone}"})
    sandbox = sandbox_factory(backend, task.setup, SandboxConfig(run_id="pytest"))()
    try:
        sandbox.load(snapshot(task))
        probe = sandbox.run("python -c 'import scmcalc; print(scmcalc.__version__, scmcalc.installed_version())'")
        assert probe.ok and probe.stdout.split() == ["3.1.0", "3.1.0"], probe.stderr
        # What asks git at run time (astropy's version module does) gets it too, as it would in a tagged clone.
        asked = sandbox.run("python -c 'import setuptools_scm; print(setuptools_scm.get_version())'")
        assert asked.ok and asked.stdout.strip() == "3.1.0", asked.stderr
    finally:
        sandbox.close()


@pytest.mark.slow
def test_the_install_runs_once_per_tree_and_environment_and_only_an_untouched_sandbox_keeps_it(
        scm_task, backend, tmp_path, monkeypatch):
    from repogym.envs.sandbox import install_cache
    monkeypatch.setattr(install_cache, "cache_dir", lambda: tmp_path)
    # A step whose product differs at every run: the same stamp in a later sandbox means the steps did not run there.
    task = replace(scm_task, setup={**scm_task.setup, "pre_install": ["od -An -N8 -tx8 /dev/urandom > .stamp"]})
    factory = sandbox_factory(backend, task.setup, SandboxConfig(run_id="pytest"))
    probe = "cat .stamp; python -c 'import scmcalc; print(scmcalc.installed_version())'"
    first, second = factory(), factory()
    try:
        first.load(snapshot(task))
        made = first.run(probe)
        assert made.ok, made.stderr
        kept = list((tmp_path / "installs").glob("*.json"))
        assert len(kept) == 1
        second.load(snapshot(task))
        again = second.run(probe)
        assert again.ok and again.stdout == made.stdout, again.stderr  # unpacked, not run again, and it works
        assert second.run("git status --porcelain; git rev-list --all --reflog | wc -l").stdout == "1\n"
        # Only a sandbox's first load fills the cache: a later one (the agent's commands ran there) could carry what
        # an agent left behind to every later load.
        kept[0].unlink()
        second.load(snapshot(task))
        fresh = second.run(probe)
        assert fresh.ok and fresh.stdout != made.stdout
        assert not list((tmp_path / "installs").glob("*.json"))
        # The same tree in another environment is another entry.
        assert install_cache.cache_path("tree", "docker:sha256:a") != install_cache.cache_path("tree", "docker:sha256:b")
    finally:
        first.close()
        second.close()
    # Fresh sandboxes loading the tree at once (a validation's): one runs the steps, the others wait for its products.
    together = [factory() for _ in range(2)]
    try:
        for sandbox in together:  # grading's health check runs before the first load: that sandbox still fills it
            assert sandbox.run("true").ok
        threads = [threading.Thread(target=sandbox.load, args=(snapshot(task),)) for sandbox in together]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stamps = {sandbox.run("cat .stamp").stdout for sandbox in together}
        assert len(stamps) == 1 and stamps != {fresh.stdout.splitlines()[0] + "\n"}
    finally:
        for sandbox in together:
            sandbox.close()


@pytest.mark.slow
def test_a_failing_install_step_names_itself(scm_task, backend):
    task = replace(scm_task, setup={**scm_task.setup, "pre_install": ["echo no such file >&2; exit 3"]})
    sandbox = sandbox_factory(backend, task.setup, SandboxConfig(run_id="pytest"))()
    try:
        with pytest.raises(InstallFailed, match=r"install step `echo no such file >&2; exit 3` failed \(exit 3\)"):
            sandbox.load(snapshot(task))
    finally:
        sandbox.close()


@pytest.mark.slow
def test_validate_calls_a_failing_install_an_environment_build_failure(scm_task):
    task = replace(scm_task, setup={**scm_task.setup, "install": "python -m pip install -e ./nowhere"})
    verdict = validate_task(task, sandbox_factory("local", task.setup, SandboxConfig(run_id="pytest")), runs=1)
    assert verdict.reasons == ["env_build"] and "nowhere" in verdict.problems[0]


def test_setup_cpus_is_checked():
    with pytest.raises(ConfigError, match=r"setup.cpus: expected a number of CPUs"):
        sandbox_factory("local", {"cpus": "two"})


@pytest.mark.docker
def test_setup_cpus_raises_the_containers_limit(tiny_task):
    require_backend("docker")
    sandbox = sandbox_factory("docker", {**tiny_task.setup, "cpus": 2}, SandboxConfig(run_id="pytest"))()
    try:
        sandbox.container.reload()
        assert sandbox.container.attrs["HostConfig"]["NanoCpus"] == 2_000_000_000
    finally:
        sandbox.close()
