"""The warm bytecode prefix's filler (inside/repogym_bytecode.py): what it compiles, and where it puts it."""

import importlib.util
import subprocess
import sys

from repogym.envs.sandbox.bytecode import SCRIPT


def cached(out, view: str) -> str:
    saved = sys.pycache_prefix
    sys.pycache_prefix = str(out)
    try:
        return importlib.util.cache_from_source(view)
    finally:
        sys.pycache_prefix = saved


def test_files_are_compiled_under_the_path_the_sandbox_sees_and_excluded_folders_are_not(tmp_path):
    source, out = tmp_path / "site", tmp_path / "out"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("X = 1\n")
    (source / "py2.py").write_text("print 'python 2'\n")  # skipped, not fatal
    (source / "repo").mkdir()
    (source / "repo" / "agent.py").write_text("Y = 2\n")
    (source / "test").mkdir()
    (source / "test" / "test_big.py").write_text("Z = 3\n")
    done = subprocess.run([sys.executable, "-I", str(SCRIPT), str(out), f"{source}=/view/lib", "--exclude", "/view/lib/repo"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "compiled 1 files"
    assert importlib.util.MAGIC_NUMBER == open(cached(out, "/view/lib/pkg/mod.py"), "rb").read(4)
    compiled = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.pyc"))
    assert compiled == [cached(out, "/view/lib/pkg/mod.py")[len(str(out)) + 1:]]


def test_a_call_without_an_output_folder_is_refused_with_its_usage():
    done = subprocess.run([sys.executable, "-I", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 2 and "SOURCE=VIEW" in done.stderr
