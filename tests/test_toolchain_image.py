"""The build toolchain variant (``setup.toolchain: "build"``): its base image and Dockerfile, and on docker a C
extension project from PyPI (an sdist) that builds in place in it, offline; images without it have no compiler."""

import subprocess
import sys
import tarfile

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.sandbox.images import (BUILD_PACKAGES, base_image_name, base_image_of, env_dockerfile,
                                         hidden_vendored, toolchain_of)
from repogym.envs.tasks.schema import Task
from tests.conftest import _git, download_sdist, require_backend


def test_the_toolchain_picks_its_own_base_image_and_is_checked():
    assert base_image_of({"python": "3.9", "toolchain": "build"}) == "repogym/base:bullseye-build"
    assert base_image_of({"python": "3.9"}) == base_image_name("3.9") == "repogym/base:bullseye"
    assert env_dockerfile({"toolchain": "build"}).startswith("FROM repogym/base:bookworm-build\n")
    assert {"gfortran", "python3-dev", "libopenblas-dev", "libfreetype-dev", "pkg-config"} <= set(BUILD_PACKAGES)
    assert toolchain_of({}) is None
    with pytest.raises(ConfigError, match=r"setup.toolchain: expected one of \['build'\] or none, got 'gcc'"):
        toolchain_of({"toolchain": "gcc"})


def test_images_build_checks_its_python_and_toolchain_before_building(capsys):
    from repogym.cli import main
    assert main(["images", "build", "--python", "2.7", "--toolchain", "build"]) == 2
    assert "no image for Python '2.7'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["images", "build", "--toolchain", "gcc"])
    assert "invalid choice: 'gcc'" in capsys.readouterr().err


def test_the_toolchain_is_an_apt_layer_over_the_plain_base_and_is_debootstrapped_whole_when_apt_fails(monkeypatch):
    from repogym.envs.core.errors import SandboxError
    from repogym.envs.sandbox import images
    present, built, debootstrapped, logs = {"repogym/base:bullseye"}, [], [], []
    monkeypatch.setattr(images, "docker_client", lambda: None)
    monkeypatch.setattr(images, "base_image_exists",
                        lambda client, python, toolchain=None: base_image_name(python, toolchain) in present)
    monkeypatch.setattr(images, "_try_pull", lambda *args: False)
    monkeypatch.setattr(images, "_debootstrap_import",
                        lambda client, log, python, toolchain=None: debootstrapped.append((python, toolchain)) or "whole")

    def build(client, dockerfile, files, tag, *, network, log=None):
        built.append((dockerfile, tag, network))
        if "apt-get" in dockerfile and failing:
            raise SandboxError("sandbox.images", f"building {tag} failed: E: Unable to locate package gfortran")
    monkeypatch.setattr(images, "_build", build)

    failing = False
    assert images.build_base_image(python="3.9", toolchain="build", log=logs.append) == "repogym/base:bullseye-build"
    [(dockerfile, tag, network)] = built
    assert dockerfile.startswith("FROM repogym/base:bullseye\nRUN apt-get update")
    assert all(package in dockerfile for package in BUILD_PACKAGES) and network and not debootstrapped
    failing = True
    assert images.build_base_image(python="3.9", toolchain="build", log=logs.append) == "whole"
    assert debootstrapped == [("3.9", "build")]
    assert "Unable to locate package gfortran); debootstrapping it whole" in logs[-1]
    present.clear()  # no plain base: it is made first (debootstrapped), then the layer goes over it
    failing, built[:], debootstrapped[:] = False, [], []
    images.build_base_image(python="3.9", toolchain="build", log=logs.append)
    assert debootstrapped == [("3.9", None)] and built[0][0].startswith("FROM whole\n")


def test_the_local_sandbox_takes_a_toolchain_task_only_where_the_host_has_a_compiler_and_headers(monkeypatch):
    import shutil

    from repogym.envs.sandbox import _check_toolchain, sandbox_factory
    import sysconfig
    from pathlib import Path
    if (shutil.which("cc") or shutil.which("gcc")) and Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        _check_toolchain("local", {"toolchain": "build"})  # a host with both takes the task
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match=r"lack a C compiler \(cc\): use the docker backend"):
        sandbox_factory("local", {"toolchain": "build"})
    _check_toolchain("local", {})  # no toolchain asked: nothing to check


def test_hide_vendored_is_checked_and_compiles_after_the_installs():
    assert hidden_vendored({"hide_vendored": ["six", "requests", "six"]}) == ["requests", "six"]
    for bad in ("requests", ["../etc"], [3]):
        with pytest.raises(ConfigError, match="setup.hide_vendored: expected a list of package names"):
            hidden_vendored({"hide_vendored": bad})
    lines = env_dockerfile({"pip": ["attrs"], "hide_vendored": ["requests"]}).splitlines()
    install = next(i for i, line in enumerate(lines) if "pip install --no-index" in line)
    hide = next(i for i, line in enumerate(lines) if line.endswith(" requests") and "base64" in line)
    assert hide > install  # pip installs with its vendored copy whole, then loses it
    assert all("base64" not in line for line in env_dockerfile({"pip": ["attrs"]}).splitlines())


SDIST = "bitarray==2.9.2"
"""A small project whose only code beyond Python is two C extensions (setuptools ``Extension``), as an sdist."""


@pytest.mark.docker
@pytest.mark.slow
def test_a_c_extension_sdist_builds_in_place_offline_in_the_toolchain_image(tmp_path):
    """Base variant: 2 min 7 s to debootstrap and import here (once; cached after); the environment image and this
    build: about a minute."""
    require_backend("docker")
    from repogym.envs.sandbox import SandboxConfig, sandbox_factory
    from repogym.envs.tasks.repos import snapshot
    archive = download_sdist(SDIST, tmp_path)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    repo = next(p for p in tmp_path.iterdir() if p.is_dir())
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "sdist")
    setup = {"python": "3.9", "toolchain": "build", "pip": ["setuptools==68.0.0", "wheel==0.41.2"],
             "install": "python -m pip install -e .", "source": f"path:{repo}"}
    task = Task(instance_id="bitarray__build-1", repo="local/bitarray", base_commit=_git(repo, "rev-parse", "HEAD").strip(),
                problem_statement="builds", setup=setup)
    sandbox = sandbox_factory("docker", setup, SandboxConfig(run_id="pytest"))()
    try:
        sandbox.load(snapshot(task))  # the install step: pip builds the extensions in place, offline
        built = sandbox.run("ls bitarray/_bitarray*.so bitarray/_util*.so && python -c 'import sys, bitarray; "
                            "sys.exit(not bitarray.test(verbosity=0).wasSuccessful())'", timeout=600)
        assert built.ok, built.stdout[-1500:] + built.stderr[-1500:]
        # The agent rebuilds after an edit to the C source, as a developer would.
        rebuilt = sandbox.run("rm bitarray/_util*.so && echo '/* edited */' >> bitarray/_util.c && python setup.py -q "
                              "build_ext --inplace && python -c 'import bitarray.util as u; print(u.count_n)' "
                              "&& gfortran --version && gcc --version && pkg-config --exists freetype2 libpng",
                              timeout=600)
        assert rebuilt.ok, rebuilt.stdout[-1500:] + rebuilt.stderr[-1500:]
        assert sandbox.run("python -m pip download bitarray==2.9.2 -d /tmp/x", timeout=120).exit_code != 0  # offline
    finally:
        sandbox.close()
    plain = sandbox_factory("docker", {"python": "3.9"}, SandboxConfig(run_id="pytest"))()
    try:
        assert plain.run("command -v gcc cc || echo none").stdout.strip() == "none"  # only the variant has one
    finally:
        plain.close()
