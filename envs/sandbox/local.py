"""The ``local`` backend: a bubblewrap namespace sandbox, no daemon needed.

Isolates: the user (a user namespace of its own: the agent is uid :data:`SANDBOX_UID` inside and an
unprivileged host user outside, ``nobody`` when repogym runs as root (:mod:`repogym.envs.sandbox.local_launch`),
with no capabilities), the environment (cleared: only ``PATH``, ``HOME``, ``LANG``, ``TERM`` and what
``SandboxConfig.env`` sets), network (a new, empty network namespace), processes (own PID namespace;
everything dies with the sandbox), IPC, and the filesystem: only what commands need is mounted, read-only:
the system folders (:data:`SYSTEM_DIRS`: ``/usr``, ``/etc``, ``/lib*``, ``/bin``, ``/sbin``), the base
interpreter's prefix and the task setup's own virtualenv (:mod:`repogym.envs.sandbox.local_env`: pytest and
``setup.pip``; not the environment repogym runs in). Nothing else of the host is there: not the home folder,
not ``/work`` or ``/opt``, not the project's checkout, repogym's cache or the task files (their gold patches
and hidden tests), except the interpreter's folders inside them. The only writable places are the sandbox's
own copy of the repository at ``/repo``, a private ``/tmp`` and ``/dev/shm`` (``/dev`` itself is
read-only), each a size-limited tmpfs (so a disk filler fills them, not the host) that reset and load
empty. Paths in ``SandboxConfig.hidden_paths`` (and the project, the cache and the bundled tasks) are also
covered with empty mounts wherever they fall inside what is mounted. Every command runs in a PID namespace
of its own, nested in the sandbox's, so ``kill -9 -1`` cannot reach the runner.
Limits: process count, memory and CPU through a cgroup of the sandbox's own (:mod:`repogym.envs.sandbox.cgroups`)
when this process may make one (root, or a delegated cgroup tree); otherwise rlimits set by the launcher
(:mod:`repogym.envs.sandbox.local_launch`): processes (``RLIMIT_NPROC``: the uid's count at start plus ``pids``,
shared with everything else of that uid), address space per process (``memory``), file size and open files per
process; no CPU limit and no limit on the memory of all processes together. ``limits`` says which holds.
Files of /etc the world may not read (``/etc/shadow``, keys) are covered with empty ones. Does not isolate:
the kernel, and read access to the system folders (so a package installed there system-wide, say the
original of the project under test, is visible: ``repogym validate`` checks for that).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import select
import shutil
import stat
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from repogym.envs.core.errors import RunnerExited, RunnerTimeout, SandboxError, SandboxUnavailable
from repogym.envs.core.paths import cache_dir
from repogym.envs.core.paths import task_repos_dir
from repogym.envs.sandbox.bytecode import BYTECODE_MOUNT, local_folder
from repogym.envs.sandbox.base import INSIDE_DIR, REPO_DIR, WRITABLE, RunnerClient, SandboxConfig
from repogym.envs.sandbox.cgroups import Cgroup, parse_bytes
from repogym.envs.sandbox.cleanup import register_sandbox, unregister_sandbox
from repogym.envs.sandbox.local_env import BASE_MOUNT, base_mounted, ensure_local_env
from repogym.envs.sandbox.local_launch import HOST_UID

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INSIDE_MOUNT = "/.repogym"
ENV_MOUNT = "/.repogym-python"  # the task setup's virtualenv (local_env.py)
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
SANDBOX_UID = 1000  # the agent's uid inside; outside it is HOST_UID (run as root) or the caller's own uid
LAUNCHER = Path(__file__).resolve().parent / "local_launch.py"
STAGE_DIR = Path("/run/repogym-stage")  # mounted over, privately, by the launcher; never written on the host
# The writable places of a local sandbox, each its own size-limited tmpfs (home is /tmp).
LOCAL_WRITABLE = {"/repo": WRITABLE["/repo"], "/tmp": WRITABLE["/tmp"], "/dev/shm": "64m"}
OPEN_FILES = 4096  # RLIMIT_NOFILE of each process in a sandbox without a cgroup


def _rlimits_of(pid: int) -> dict[str, int | None]:
    """The rlimits bubblewrap (``pid``) runs under, as ``limits`` reports them (``None``: unlimited or unread)."""
    names = {"Max processes": "nproc", "Max address space": "address_space", "Max file size": "file_size",
             "Max open files": "open_files"}
    found: dict[str, int | None] = dict.fromkeys(names.values())
    try:
        with open(f"/proc/{pid}/limits") as fh:
            for line in fh:
                for label, key in names.items():
                    if line.startswith(label) and line.split()[len(label.split())].isdigit():
                        found[key] = int(line.split()[len(label.split())])
    except OSError as exc:  # bubblewrap exited meanwhile: nothing to report
        log.debug("no rlimits of %d: %s", pid, exc)
    return found


def available() -> str | None:
    """``None`` when the backend can run here, else why not."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    return _user_namespaces()


@functools.lru_cache(maxsize=1)
def _user_namespaces() -> str | None:
    """``None`` when bubblewrap can make the unprivileged user namespace every sandbox runs in, else why not."""
    spec = json.dumps({"uid": HOST_UID if os.geteuid() == 0 else None})
    probe = subprocess.run([sys.executable, "-I", str(LAUNCHER), spec, "--", "bwrap", "--unshare-user", "--uid",
                            str(SANDBOX_UID), "--cap-drop", "ALL", "--ro-bind", "/", "/", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return ("bubblewrap cannot make an unprivileged user namespace here (sysctl "
                f"kernel.unprivileged_userns_clone or user.max_user_namespaces): {probe.stderr.strip()[-300:]}")
    return None


@functools.lru_cache(maxsize=1)
def _private_system_files() -> tuple[str, ...]:
    """Files in /etc the world may not read (shadow, keys): run as root, the sandbox's own uid would own them."""
    found = []
    for folder, dirs, files in os.walk("/etc"):
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and not st.st_mode & stat.S_IROTH:
                found.append(path)
        dirs[:] = [d for d in dirs if os.access(os.path.join(folder, d), os.R_OK)]
    return tuple(sorted(found))


def _hidden_paths(extra: tuple[str, ...] = ()) -> list[Path]:
    # The agent must not read gold patches, hidden tests or full histories.
    paths = {task_repos_dir().resolve(), cache_dir().resolve(), PROJECT_ROOT, *(Path(p).resolve() for p in extra)}
    return sorted(p for p in paths if p.exists() and p.is_dir())


# bubblewrap's --die-with-parent fires when the *thread* that started it exits, not the process: a sandbox started
# by a pool's filler or a worker thread would die with that thread. Every start goes through this one thread,
# which lives as long as the process, so a sandbox dies with the process and with nothing else.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="repogym-local-spawner")


def _bytecode_folder(env: Path) -> Path | None:
    """The warm bytecode of the virtualenv ``env`` as sandboxes see it (:mod:`repogym.envs.sandbox.bytecode`):
    its site-packages at :data:`ENV_MOUNT`, the base interpreter's standard library where it is mounted."""
    lib = f"lib/python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix).resolve()
    stdlib_view = f"{BASE_MOUNT}/{lib}" if base_mounted() else str(base / lib)
    views = [(env / lib / "site-packages", f"{ENV_MOUNT}/{lib}/site-packages"), (base / lib, stdlib_view)]
    # The base's own site-packages is not the sandbox's (repogym itself may be installed there).
    return local_folder(env, views, excluded=[f"{stdlib_view}/site-packages", f"{stdlib_view}/dist-packages"])


class LocalSandbox(RunnerClient):
    """A sandbox made of a bubblewrap namespace and a host folder holding the repository."""

    backend = "local"
    inside_dir = INSIDE_MOUNT
    scratch_dirs = ("/tmp", "/dev/shm")
    repo_dir = REPO_DIR  # always: a task with its own image (setup.image) needs the docker backend

    def __init__(self, config: SandboxConfig | None = None, python_env: str | Path | None = None):
        """``python_env``: the virtualenv commands run with (default: the one for an empty task setup)."""
        super().__init__(config)
        why = available()
        if why:
            raise SandboxUnavailable("sandbox.local", why)
        self.name = f"{self.config.run_id}-{uuid.uuid4().hex[:8]}"
        self.cgroup: Cgroup | None = None
        rlimits = None
        try:
            self.cgroup = Cgroup(self.name, pids=self.config.pids, memory=parse_bytes(self.config.memory),
                                 cpus=self.config.cpus, cpu_shares=self.config.cpu_shares)
            self.limits = {"via": "cgroup", "pids": self.config.pids, "memory": self.config.memory,
                           "cpus": self.config.cpus}
        except OSError as exc:
            # No cgroup: per-process rlimits instead (the launcher sets them; what they came to is read back below).
            rlimits = {"pids": self.config.pids, "memory": parse_bytes(self.config.memory),
                       "file_size": parse_bytes(LOCAL_WRITABLE["/repo"]), "open_files": OPEN_FILES}
            self.limits = {"via": "rlimit", "why": f"no cgroup could be made here ({exc})",
                           "note": "per process, but for nproc (every task of the uid); no CPU limit"}
        python_prefix = Path(python_env or ensure_local_env({})).resolve()
        self._environment = f"local:{python_prefix}"  # a setup's virtualenv: its folder is named by its key
        binds: dict[str, str] = {}  # placeholder -> host folder, staged by the launcher when run as root

        def ro_bind(source: Path | str, dest: Path | str) -> list[str]:
            placeholder = f"@STAGE{len(binds)}@"
            binds[placeholder] = str(source)
            return ["--ro-bind", placeholder, str(dest)]

        # A user namespace of its own: the sandbox's user (SANDBOX_UID inside) is an unprivileged host user
        # (the launcher drops to it when run as root), with no capabilities, so no route the agent finds can
        # remount a read-only folder or act as root on the host.
        cmd = ["bwrap", "--die-with-parent", "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID),
               "--gid", str(SANDBOX_UID), "--cap-drop", "ALL", "--new-session"]
        # The root is bwrap's own tmpfs; only the system folders are mounted on it (read-only), so the home
        # folder, /work, /opt and the rest of the host simply are not there.
        mounted = []
        for name in SYSTEM_DIRS:
            entry = Path("/") / name
            if entry.is_symlink():
                cmd += ["--symlink", os.readlink(entry), str(entry)]
            elif entry.is_dir():
                cmd += ["--ro-bind", str(entry), str(entry)]
                mounted.append(entry)
        for path in _private_system_files():
            cmd += ["--ro-bind", "/dev/null", path]
        # /dev read-only but for its own size-limited /dev/shm, emptied by reset and load like /tmp.
        cmd += ["--dev", "/dev", "--proc", "/proc"]
        for path in ("/tmp", REPO_DIR, "/dev/shm"):
            cmd += ["--size", str(parse_bytes(LOCAL_WRITABLE[path])), "--tmpfs", path]
        cmd += ["--remount-ro", "/dev"]
        # The base interpreter the virtualenv points to is mounted, read-only, too: at a fixed place when it is
        # outside the system folders (under /opt, a home folder, /tmp: where it is on the host must not show,
        # see local_env); hidden paths inside what is mounted are emptied, and a prefix inside a hidden path is
        # put back on top.
        base = Path(sys.base_prefix).resolve()
        prefixes = [] if base_mounted() else [base]
        if base_mounted():
            cmd += ro_bind(base, BASE_MOUNT)
            for path in _hidden_paths(self.config.hidden_paths):  # repogym installed into the base itself, say
                if path.is_relative_to(base):
                    cmd += ["--tmpfs", str(Path(BASE_MOUNT) / path.relative_to(base))]
        for prefix in prefixes:
            if not any(prefix.is_relative_to(m) for m in mounted):
                cmd += ro_bind(prefix, prefix)
        hidden = [p for p in _hidden_paths(self.config.hidden_paths)
                  if any(p.is_relative_to(m) for m in mounted + prefixes)]
        for path in hidden:
            cmd += ["--tmpfs", str(path)]
        for prefix in prefixes:
            if any(prefix.is_relative_to(h) for h in hidden):
                cmd += ro_bind(prefix, prefix)
        # The root is bwrap's tmpfs holding the /bin, /lib symlinks: read-only, or `rm -rf /` breaks every exec.
        # The environment is cleared: nothing of the host's (tokens, keys) reaches the sandbox.
        # The task's virtualenv at a fixed place of its own (the cache may be anywhere, /tmp included).
        cmd += [*ro_bind(python_prefix, ENV_MOUNT), *ro_bind(INSIDE_DIR, INSIDE_MOUNT)]
        warm = _bytecode_folder(python_prefix)
        if warm is not None:
            cmd += ro_bind(warm, BYTECODE_MOUNT)
            self.bytecode_prefix = BYTECODE_MOUNT
        cmd += ["--remount-ro", "/",
                "--chdir", REPO_DIR, "--clearenv"]
        library_path = {"LD_LIBRARY_PATH": f"{BASE_MOUNT}/lib"} if base_mounted() else {}
        for key, value in {"HOME": "/tmp", "PATH": f"{ENV_MOUNT}/bin:/usr/local/bin:/usr/bin:/bin",
                           "LANG": "C.UTF-8", "TERM": "dumb", "PYTHONDONTWRITEBYTECODE": "1", "REPOGYM_NEST": "1",
                           **library_path, **self.config.env}.items():
            cmd += ["--setenv", key, value]
        cmd += [f"{ENV_MOUNT}/bin/python", "-I", f"{INSIDE_MOUNT}/runner.py", REPO_DIR]
        spec = {"procs": self.cgroup.procs_files if self.cgroup is not None else [], "binds": binds,
                "stage": str(STAGE_DIR), "uid": HOST_UID if os.geteuid() == 0 else None, "rlimits": rlimits}
        if os.geteuid() == 0:
            STAGE_DIR.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-I", str(LAUNCHER), json.dumps(spec), "--", *cmd]
        register_sandbox(self)
        try:
            self._proc = _SPAWNER.submit(
                subprocess.Popen, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}).result()
        except OSError as exc:
            if self.cgroup is not None:
                self.cgroup.close()
            unregister_sandbox(self)
            raise SandboxError("sandbox.local.start", f"could not start bubblewrap: {exc}") from exc
        self._buf = b""
        try:
            self.nested_commands = bool(self.request("ping", wait=20).get("nested"))
        except SandboxError as exc:  # nothing of the agent's has run here: infrastructure, never the agent's
            err = self._proc.stderr.read1(4096).decode(errors="replace") if self._proc.poll() is not None else ""
            self.close()
            raise SandboxError("sandbox.local.start", f"the sandbox did not start ({exc.message}): "
                                                      f"{err.strip() or 'no message'}") from exc
        if rlimits is not None:
            self.limits.update(_rlimits_of(self._proc.pid))

    def _send(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def _recv_line(self, deadline: float) -> bytes:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunnerTimeout("sandbox.local", "runner did not answer in time")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise RunnerExited("sandbox.local", f"runner exited (code {self._wait_code()})")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _wait_code(self) -> int | None:
        try:
            return self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def environment_id(self) -> str | None:
        return self._environment

    def _outside_cause(self) -> str | None:
        # bubblewrap exits with its child's status when the runner dies inside; a signal means from outside
        # (the host, its OOM killer). Frozen (SIGSTOP from the host), it is in state T and did not exit.
        if self._proc.poll() is None:
            try:
                with open(f"/proc/{self._proc.pid}/stat") as fh:
                    state = fh.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "?"
            return "bubblewrap was stopped from outside" if state in ("T", "t") else None
        code = self._wait_code()
        if code is None or code < 0:
            return f"bubblewrap was killed from outside (signal {-code if code else '?'})"
        return None

    def _shutdown(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            try:
                stream.close()
            except OSError as exc:  # the runner died with bytes still buffered for it
                log.debug("closing a pipe of sandbox %s: %s", self.name, exc)
        if self.cgroup is not None:
            self.cgroup.close()
        unregister_sandbox(self)
