"""Issue 26: the agent's view does not depend on where repogym or its interpreter is installed.

A child process runs a local sandbox with a base interpreter copied under ``/tmp`` into a folder with a space in its
name, and a cache folder with a space: the agent's ``/tmp`` starts empty, no host path of the interpreter shows
anywhere in the sandbox, and the gold patch still resolves.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from repogym.envs.sandbox.local_env import BASE_MOUNT, PYTHON
from repogym.envs.core.paths import cache_dir
from tests.conftest import require_backend

REPO = Path(__file__).resolve().parents[1]

CHILD = '''
import json, sys
from repogym.envs.repo_env import RepoTaskEnv
env = RepoTaskEnv(suite="builtin", sandbox="local", task="repogym__tablekit-header-wrapping-maxwidths")
env.reset()
obs = env.step(json.dumps({"name": "bash", "arguments": {"command":
    "echo TMP $(ls -A /tmp | wc -l); ls -A /; python -c 'import sys; print(\\"BASE\\", sys.base_prefix)'"}}))[0]
env.step(json.dumps({"name": "apply_patch", "arguments": {"patch": env.task.patch}}))
_, reward, _, _, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
print(json.dumps(info.get("eval"))[:3000], file=sys.stderr)
env.close()
print(json.dumps({"base_prefix": sys.base_prefix, "obs": obs, "reward": reward}))
'''


def copy_base_interpreter(dest: Path) -> Path:
    """A copy of this Python's base installation (the interpreter, libpython, the standard library) at ``dest``."""
    base = Path(sys.base_prefix).resolve()
    (dest / "bin").mkdir(parents=True)
    shutil.copy2(base / "bin" / f"python{PYTHON}", dest / "bin" / f"python{PYTHON}")
    (dest / "lib").mkdir()
    for lib in (base / "lib").glob("libpython*"):
        shutil.copy2(lib, dest / "lib" / lib.name, follow_symlinks=False)
    stdlib = Path(sysconfig.get_paths(vars={"base": str(base), "installed_base": str(base)})["stdlib"])
    shutil.copytree(stdlib, dest / "lib" / f"python{PYTHON}", symlinks=True,
                    ignore=shutil.ignore_patterns("site-packages", "test", "__pycache__", "idlelib", "tkinter",
                                                  "turtledemo", "ensurepip"))
    return dest / "bin" / f"python{PYTHON}"


@pytest.mark.slow
def test_an_interpreter_under_tmp_in_a_folder_with_a_space_shows_nowhere_in_the_sandbox(tmp_path):
    require_backend("local")
    if not (Path(sys.base_prefix) / "bin" / f"python{PYTHON}").exists():
        pytest.skip(f"no python{PYTHON} in {sys.base_prefix}/bin to copy")
    python = copy_base_interpreter(tmp_path / "py base x")
    assert str(python).startswith(("/tmp/", tempfile_root()))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REPOGYM_CACHE": str(tmp_path / "cache dir"),
           "REPOGYM_WHEELHOUSE": str(cache_dir() / "wheelhouse" / PYTHON), "HOME": str(tmp_path)}
    # The copy sees the project's environment (torch, the editable repogym) as its own site-packages do.
    # Asked of the copy: Debian's own Python reads dist-packages folders, others site-packages.
    own_site = Path(subprocess.run([str(python), "-S", "-c", "import site; print(site.getsitepackages()[0])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    assert own_site.is_relative_to(tmp_path), own_site
    own_site.mkdir(parents=True, exist_ok=True)
    (own_site / "project-env.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    done = subprocess.run([str(python), "-c", CHILD], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["base_prefix"] == str(tmp_path / "py base x")  # the child really runs from under /tmp
    lines = result["obs"].splitlines()
    assert "TMP 0" in lines, result["obs"]
    assert f"BASE {BASE_MOUNT}" in lines
    assert "py base x" not in result["obs"] and str(tmp_path) not in result["obs"]
    assert result["reward"] == 1.0, done.stderr[-3000:]


def tempfile_root() -> str:
    import tempfile
    return tempfile.gettempdir() + "/"
