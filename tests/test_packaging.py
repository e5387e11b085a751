"""One installed namespace: what the wheel holds, what installs beside it, and the lint that keeps imports on it.

The folders stay at the top of the repository (``envs/``, ``agents/``, ...) and install as ``repogym.envs``,
``repogym.agents``, ... through setuptools' package-dir mapping (pyproject.toml).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAPPED = {"repogym": "repogym", "envs": "repogym.envs", "agents": "repogym.agents", "trainer": "repogym.trainer",
          "bench": "repogym.bench"}
OLD_TOP_LEVEL = ("envs", "agents", "trainer", "bench")
# Files copied into sandboxes by path (never imported by the host), so only a wheel listing proves they ship.
SANDBOX_FILES = ("repogym/envs/sandbox/local_launch.py", "repogym/envs/sandbox/inside/runner.py",
                 "repogym/envs/sandbox/inside/repogym_report.py", "repogym/envs/sandbox/inside/repogym_launch.py")


def _checkout_packages() -> set[str]:
    """Every folder with an ``__init__.py`` under the mapped folders, by its installed dotted name."""
    found = set()
    for folder, name in MAPPED.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *rel)))
    return found


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    missing = _checkout_packages() - listed
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    assert not any(p.split(".")[0] != "repogym" for p in listed), listed


def test_ruff_forbids_the_old_bare_imports(tmp_path):
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is a dev dependency: pip install -e '.[dev]'"
    clean = subprocess.run([ruff, "check", "--no-cache", str(REPO)], capture_output=True, text=True, cwd=REPO)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # The same config catches each old spelling (so the clean run above is not clean by accident).
    bad = tmp_path / "bad.py"
    bad.write_text("import envs\nfrom agents.null import NullAgent\nimport trainer.train as t\n"
                   "def f():\n    from bench import db\n")
    dirty = subprocess.run([ruff, "check", "--no-cache", "--config", str(REPO / "pyproject.toml"), str(bad)],
                           capture_output=True, text=True)
    assert dirty.returncode == 1
    assert dirty.stdout.count("TID251") == 4, dirty.stdout


def test_the_checkout_does_not_shadow_the_installed_namespace():
    """From anywhere, ``repogym.envs`` is the checkout's ``envs/`` (editable, or installed from a copy where the
    checkout is read-only) and no bare ``envs`` is importable from it."""
    code = ("import importlib.util, repogym.envs as e, repogym.agents as a; print(e.__file__); print(a.__file__);"
            "print([n for n in ('envs', 'agents', 'trainer', 'bench') if importlib.util.find_spec(n)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    envs_file, agents_file, bare = out.splitlines()
    assert Path(envs_file).read_bytes() == (REPO / "envs" / "__init__.py").read_bytes()
    assert Path(agents_file).read_bytes() == (REPO / "agents" / "__init__.py").read_bytes()
    assert bare == "[]"


def test_python_started_in_the_checkout_imports_the_whole_namespace_from_it():
    """Python started in the checkout (``python -m`` or ``-c``, a Ray worker) puts the checkout's repogym/ folder
    first; without the editable install's finder (repogym installed from a copy, a read-only checkout) it still
    finds repogym.envs and its siblings, in the checkout."""
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)];"
            "import repogym, repogym.envs, repogym.agents, repogym.trainer; print(repogym.__file__);"
            "print(repogym.envs.__file__); print(repogym.trainer.__file__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert [Path(p) for p in out.stdout.splitlines()] == [REPO / "repogym" / "__init__.py",
                                                          REPO / "envs" / "__init__.py", REPO / "trainer" / "__init__.py"]


def _site_packages(venv: Path) -> Path:
    return Path(subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())


def _copy_distributions(names: tuple[str, ...], site: Path) -> None:
    """Copy installed distributions into ``site``: the sandbox binds the interpreter's own site-packages only."""
    for name in names:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or ():
            source = Path(dist.locate_file(file))
            if source.is_file() and ".." not in file.parts:
                target = site / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


def _install_envs_from_pypi_or_standin(venv: Path, tmp_path: Path) -> str:
    """Install the PyPI project ``envs``; offline, a stand-in of the same shape (a top-level ``envs`` package)."""
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps"]
    if subprocess.run([*pip, "envs"], capture_output=True, text=True, timeout=300).returncode == 0:
        return "pypi"
    standin = tmp_path / "standin"
    (standin / "envs").mkdir(parents=True)
    (standin / "envs" / "__init__.py").write_text("ENVS_STANDIN = True\n")
    (standin / "pyproject.toml").write_text('[project]\nname = "envs"\nversion = "1.4"\n'
                                            '[tool.setuptools]\npackages = ["envs"]\n')
    subprocess.run([*pip, "--no-build-isolation", str(standin)], check=True, capture_output=True, timeout=300)
    return "standin"


def _shipped() -> list[str]:
    """What git would ship: tracked files and untracked ones not ignored. The checkout may belong to another user
    (a read-only mount): git reads it only when told it is safe."""
    listed = subprocess.run(["git", "-c", f"safe.directory={REPO}", "ls-files", "-co", "--exclude-standard", "-z"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    return [rel for rel in listed if rel and (REPO / rel).is_file()]


def _build_wheel(tmp_path: Path) -> tuple[Path, str]:
    """The wheel built from a copy of what git would ship (no stale build/ folder of the checkout can leak in),
    and what the build wrote on stdout and stderr."""
    source, dist = tmp_path / "source", tmp_path / "dist"
    for rel in _shipped():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, source / rel)
    # Not quiet: pip shows what the build backend says only then (and pip install -q -e shows it too).
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                            str(dist), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("repogym-*.whl")
    return wheel, built.stdout + built.stderr


@pytest.mark.slow
def test_the_wheel_builds_quietly_and_carries_every_task_repository_file(tmp_path):
    """Issue 42: setuptools took each folder of the bundled task repositories for a package it would ignore and
    said so in 14 warning blocks (~550 lines) on every install; the data is declared as package data only."""
    wheel, output = _build_wheel(tmp_path)
    assert "warning" not in output.lower(), output[:3000]
    names = set(zipfile.ZipFile(wheel).namelist())
    task_files = {"repogym/" + rel for rel in _shipped() if rel.startswith("task_repos/")}
    assert len(task_files) > 100 and "repogym/task_repos/builtin.jsonl" in task_files
    assert not task_files - names, sorted(task_files - names)[:20]
    assert not {n for n in names if n.startswith("repogym/task_repos/")} - task_files  # nothing else (no caches)


@pytest.mark.slow
def test_wheel_installs_one_namespace_and_survives_pypi_envs_beside_it(tmp_path):
    wheel, _ = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"repogym"}, tops
    for package in _checkout_packages():
        assert package.replace(".", "/") + "/__init__.py" in names, f"{package} is not in the wheel"
    for path in SANDBOX_FILES:
        assert path in names, f"{path} is not in the wheel"
    assert "repogym/task_repos/builtin.jsonl" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)

    # A fresh virtualenv: the wheel alone, dependencies read from this one's site-packages (no download).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = _site_packages(venv)
    (site / "repogym_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _copy_distributions(("pytest", "pluggy", "iniconfig", "packaging", "pygments"), site)  # what the sandbox runs tests with
    python = venv / "bin" / "python"
    # --ignore-installed: where this environment installed repogym itself (not editable), the .pth above shows it.
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheel)], check=True,
                   timeout=300)
    installed = {p.name for p in site.iterdir()}
    assert "repogym" in installed
    assert not installed & set(OLD_TOP_LEVEL), installed & set(OLD_TOP_LEVEL)

    how = _install_envs_from_pypi_or_standin(venv, tmp_path)
    assert (site / "envs" / "__init__.py").is_file(), how
    # The installed copy runs a real episode: the builtin suite ships, the runner files are found by path.
    episode = tmp_path / "episode.py"
    episode.write_text(
        "import gymnasium, repogym, envs\n"
        "from repogym.agents import make_agent\n"
        "from repogym.agents.rollout import run_episode\n"
        "assert repogym.__file__.startswith(%r), repogym.__file__\n"
        "env = gymnasium.make('repogym/RepoTask-v0', suite='builtin', sandbox='local', max_turns=5)\n"
        "result = run_episode(env, make_agent('oracle'), task_id='repogym__tablekit-center-odd-padding')\n"
        "env.close()\n"
        "print('reward', result.reward, result.status)\nprint(result)\n" % str(site))
    ran = subprocess.run([python, str(episode)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "reward 1.0 resolved" in ran.stdout, ran.stdout[-3000:]
