"""The ``local`` backend: a bubblewrap namespace sandbox, no daemon needed.

Isolates: network (a new, empty network namespace), processes (own PID namespace; everything dies with
the sandbox), the filesystem (the host is mounted read-only; the only writable places are the sandbox's
own copy of the repository at ``/repo`` and a private ``/tmp``), and what could lead to a fix: the
bundled task sources, repogym's cache and the project checkout are hidden behind empty mounts.
Does not isolate: CPU and memory (no cgroup limits; use the docker backend for those), the kernel, and
read access to the rest of the host's filesystem.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envs.errors import SandboxError, SandboxUnavailable
from envs.sandbox.base import INSIDE_DIR, REPO_DIR, RunnerClient, SandboxConfig
from envs.tasks.repos import cache_dir
from envs.tasks.suites import task_repos_dir

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INSIDE_MOUNT = "/.repogym"


def available() -> str | None:
    """``None`` when the backend can run here, else why not."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    return None


def _hidden_paths(extra: tuple[str, ...] = ()) -> list[Path]:
    # The agent must not read gold patches, hidden tests or full histories.
    paths = {task_repos_dir().resolve(), cache_dir().resolve(), PROJECT_ROOT, *(Path(p).resolve() for p in extra)}
    return sorted(p for p in paths if p.exists() and p.is_dir())


class LocalSandbox(RunnerClient):
    """A sandbox made of a bubblewrap namespace and a host folder holding the repository."""

    backend = "local"
    inside_dir = INSIDE_MOUNT

    def __init__(self, config: SandboxConfig | None = None):
        super().__init__(config)
        why = available()
        if why:
            raise SandboxUnavailable("sandbox.local", why)
        self.workdir = Path(tempfile.mkdtemp(prefix="repogym-local-"))
        (self.workdir / "repo").mkdir()
        (self.workdir / "tmp").mkdir()
        python_prefix = Path(sys.prefix).resolve()
        cmd = ["bwrap", "--die-with-parent", "--unshare-all", "--new-session"]
        # The root stays bwrap's own tmpfs (so /repo can be made); the host's top-level entries are
        # mounted read-only on it.
        for entry in sorted(Path("/").iterdir()):
            if entry.name in ("dev", "proc", "tmp", "repo") or entry.name.startswith("."):
                continue
            if entry.is_symlink():
                cmd += ["--symlink", os.readlink(entry), str(entry)]
            elif entry.is_dir():
                cmd += ["--ro-bind", str(entry), str(entry)]
        cmd += ["--dev", "/dev", "--proc", "/proc"]
        hidden = _hidden_paths(self.config.hidden_paths)
        for path in hidden:
            cmd += ["--tmpfs", str(path)]
        cmd += ["--bind", str(self.workdir / "tmp"), "/tmp", "--bind", str(self.workdir / "repo"), REPO_DIR]
        # The interpreter that runs tests (a venv, maybe inside the hidden checkout or under the host's /tmp,
        # which the private /tmp covers) is put back, read-only, on top.
        covered = [*hidden, Path("/tmp")]
        for prefix in sorted({python_prefix, Path(sys.base_prefix).resolve()}):
            if any(prefix.is_relative_to(c) for c in covered):
                cmd += ["--ro-bind", str(prefix), str(prefix)]
        cmd += ["--ro-bind", str(INSIDE_DIR), INSIDE_MOUNT, "--chdir", REPO_DIR,
                "--setenv", "HOME", "/tmp", "--setenv", "PATH", f"{python_prefix}/bin:/usr/local/bin:/usr/bin:/bin",
                "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--unsetenv", "VIRTUAL_ENV",
                sys.executable, f"{INSIDE_MOUNT}/runner.py", REPO_DIR]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._buf = b""
        try:
            self.request("ping", wait=20)
        except SandboxError:
            err = self._proc.stderr.read1(4096).decode(errors="replace") if self._proc.poll() is not None else ""
            self.close()
            raise SandboxUnavailable("sandbox.local", f"bwrap failed to start: {err.strip() or 'no answer'}")

    def _send(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def _recv_line(self, deadline: float) -> bytes:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError("sandbox.local", "runner did not answer in time")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise SandboxError("sandbox.local", f"runner exited (code {self._proc.poll()})")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _shutdown(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            try:
                stream.close()
            except OSError:  # the runner died with bytes still buffered for it
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)
