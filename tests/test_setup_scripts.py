"""The set-up is quiet unless something is wrong (issue 42): scripts/setup.sh says one line per phase, keeps pip's
and a build backend's chatter aside, and shows it all when a step fails.

Run against stand-ins (a fake interpreter in a fake ``.venv``, fake ``docker``, ``git``, ``bwrap`` first on
``PATH``), so nothing is installed; the real set-up runs in CI (``scripts/test.sh`` starts with it).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What `pip install -q -e .` printed before the fix, and what a build backend may still say: indented, on stderr.
BACKEND_CHATTER = "\n".join(["  /x/setuptools/command/build_py.py:215: BuildBackendWarning: Package 'repogym.task_repos."
                             "cfgparse.project' is absent from the `packages` configuration.", "  !!"] * 300)

FAKE_PYTHON = """#!/usr/bin/env bash
# A stand-in interpreter: records pip's arguments, answers `-c "import torch"`, fails pip when told to.
if [ "$1" = -c ]; then exit 0; fi
echo "$*" >> "{calls}"
if [ "$1 $2 $3" = "-m pip install" ] && [ -e "{fail}" ] && [[ "$*" == *-e* ]]; then
  echo "ERROR: Could not find a version that satisfies the requirement gymnasium>=1.0" >&2
  echo "  some backend detail" >&2
  exit 1
fi
if [[ "$*" == *-e* ]]; then
  cat >&2 <<'EOF'
{chatter}
EOF
  echo "Successfully installed repogym-0.1.0"
fi
exit 0
"""


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fake_world(tmp_path):
    """Stand-ins first on PATH and a venv folder holding a fake interpreter; returns (env, calls file, fail flag)."""
    bin_dir, venvs = tmp_path / "bin", tmp_path / "venvs"
    calls, fail = tmp_path / "calls.txt", tmp_path / "fail"
    for tool in ("git", "bwrap", "debootstrap"):
        _executable(bin_dir / tool, "#!/bin/sh\nexit 0\n")
    _executable(bin_dir / "docker", "#!/bin/sh\n[ -e \"$(dirname \"$0\")/../docker-up\" ]\n")
    python = FAKE_PYTHON.format(calls=calls, fail=fail, chatter=BACKEND_CHATTER)
    _executable(venvs / ".venv" / "bin" / "python", python)
    _executable(venvs / ".venv" / "bin" / "repogym", "#!/bin/sh\necho \"repogym $*\"\necho repogym/env:0123abcd\n")
    # A "python3" that makes a venv the way `python3 -m venv DIR` would, with the fake interpreter in it.
    _executable(bin_dir / "python3", f'#!/usr/bin/env bash\nmkdir -p "$3/bin" && cp "{venvs}/.venv/bin/python" '
                                     f'"{venvs}/.venv/bin/repogym" "$3/bin/"\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "REPOGYM_VENV_DIR": str(venvs),
           "TMPDIR": str(tmp_path)}
    env.pop("PYTHON", None)
    return env, calls, fail


def _setup(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], env=env, capture_output=True, text=True,
                          timeout=120)


def test_setup_says_one_line_per_phase_and_nothing_else(fake_world, tmp_path):
    env, calls, _ = fake_world
    ran = _setup(env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ""  # the 600 lines of backend warnings stayed aside
    assert ran.stdout.splitlines() == [
        "setup: installing repogym and its dependencies (a few minutes on first run)...",
        "setup: no Docker daemon answers; the local (bubblewrap) sandbox will be used"]
    assert "-m pip install -q -e .[dev]" in calls.read_text()
    assert list(tmp_path.glob("repogym-setup.*")) == []  # the kept-aside output is removed

    (tmp_path / "docker-up").touch()  # a daemon answers: the image build's own lines show
    ran = _setup(env)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    assert ran.stdout.splitlines()[-3:] == ["setup: building the Docker base image...", "repogym images build",
                                            "repogym/env:0123abcd"]


def test_setup_says_when_it_creates_the_environment(fake_world, tmp_path):
    env, _, _ = fake_world
    env["REPOGYM_VENV_DIR"] = str(tmp_path / "fresh")
    ran = _setup(env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[:2] == [f"setup: creating {tmp_path}/fresh/.venv...",
                                           "setup: installing repogym and its dependencies (a few minutes on first run)..."]


def test_a_failing_install_shows_its_whole_output_and_stops_the_setup(fake_world, tmp_path):
    env, _, fail = fake_world
    fail.touch()
    ran = _setup(env)
    assert ran.returncode == 1
    assert "setup: installing repogym failed (exit status 1); its output:" in ran.stderr
    assert "ERROR: Could not find a version that satisfies the requirement gymnasium>=1.0" in ran.stderr
    assert "  some backend detail" in ran.stderr  # all of it, indented lines included
    assert "Docker" not in ran.stdout  # nothing after the failed step ran


def _quietly(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    script = f"source {REPO}/scripts/venvs.sh; quietly 'installing x' sh -c '{command}'; echo \"status $?\""
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(tmp_path)})


def test_quietly_passes_a_tool_s_own_errors_through_and_sums_its_warnings_up(tmp_path):
    ran = _quietly(tmp_path, 'echo chatter; echo "  indented: warning" >&2; echo "WARNING: real" >&2')
    assert ran.stdout == "status 0\n" and ran.stderr == "WARNING: real\n"
    # A pip.conf naming a missing index folder: pip warns once per package; a conflict is an error line.
    ran = _quietly(tmp_path, 'for p in a b c; do echo "WARNING: Location file:///x/$p/ is ignored" >&2; done; '
                             'echo "ERROR: the dependency resolver found a conflict" >&2')
    assert ran.stdout == "status 0\n"
    assert ran.stderr.splitlines() == ["ERROR: the dependency resolver found a conflict",
                                       "WARNING: Location file:///x/a/ is ignored",
                                       "  (and 2 more warning(s) while installing x)"]
    ran = _quietly(tmp_path, 'echo "  detail"; exit 3')
    assert ran.stdout == "status 3\n"
    assert ran.stderr.splitlines() == ["bash: installing x failed (exit status 3); its output:", "  detail"]
