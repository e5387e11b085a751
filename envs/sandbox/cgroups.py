"""Process, memory and CPU limits for the local backend through a cgroup of its own (where one can be made).

Docker sets these limits itself; bubblewrap does not, so a local sandbox makes a cgroup named
``repogym-<id>`` (cgroup v1 controller folders ``pids``, ``memory``, ``cpu``, or cgroup v2 where the root
delegates those controllers) and starts its processes inside it. Making one needs write access to the
cgroup tree (root, or a delegated subtree); without it the sandbox runs unlimited and says so
(``LocalSandbox.limits``). ``repogym gc`` removes ``repogym-*`` cgroups left empty by a crashed run.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from pathlib import Path

from repogym.envs.core.errors import ConfigError

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
CLOSE_WAIT_S = 10.0  # how long close() waits for the processes inside to be gone and the folders removed
PREFIX = "repogym-"
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_bytes(size: str | int) -> int:
    """``"2g"`` / ``"512m"`` / ``1024`` (docker's ``mem_limit`` syntax) in bytes."""
    if isinstance(size, int):
        return size
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmg]?)b?\s*", str(size).lower())
    if not match:
        raise ConfigError(f"expected a size like '2g' or '512m', got {size!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


class Cgroup:
    """One sandbox's cgroup: limits written at creation; ``procs_files`` to join it; ``close`` kills and removes."""

    def __init__(self, name: str, *, pids: int, memory: int, cpus: float, cpu_shares: int = 1024):
        self.name = PREFIX + name
        self.dirs: list[Path] = []
        limits = {"pids": {"pids.max": str(pids)},
                  "memory": {"memory.limit_in_bytes": str(memory), "memory.memsw.limit_in_bytes": str(memory)},
                  "cpu": {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": str(int(cpus * 100000)),
                          "cpu.shares": str(cpu_shares)}}
        if (ROOT / "cgroup.controllers").exists():  # v2: one tree (cpu.weight's default is 100 where shares' is 1024)
            self._make(ROOT / self.name, {"pids.max": str(pids), "memory.max": str(memory),
                                          "memory.swap.max": "0", "cpu.max": f"{int(cpus * 100000)} 100000",
                                          "cpu.weight": str(min(10000, max(1, round(cpu_shares * 100 / 1024))))},
                       required=("pids.max", "memory.max"))
        else:  # v1: a folder per controller; pids and memory are required, cpu is best effort
            for controller, files in limits.items():
                if (ROOT / controller).is_dir():
                    self._make(ROOT / controller / self.name, files,
                               required=() if controller == "cpu" else (next(iter(files)),))
            if not {d.parent.name for d in self.dirs} >= {"pids", "memory"}:
                self.close()
                raise OSError("cgroup v1 pids and memory controllers are not writable")

    def _make(self, folder: Path, files: dict[str, str], required: tuple[str, ...]) -> None:
        try:
            folder.mkdir()
        except OSError:
            if required:
                self.close()
                raise
            return
        self.dirs.append(folder)
        for name, value in files.items():
            try:
                (folder / name).write_text(value)
            except OSError:
                if name in required:
                    self.close()
                    raise

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join every controller."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        """Every process now in the cgroup."""
        found: set[int] = set()
        for folder in self.dirs:
            try:
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            except OSError as exc:  # the kernel's cgroup folder is gone (removed, or never made): nothing in it
                log.debug("cgroup %s: no process list (%s)", folder, exc)
        return found

    def close(self) -> None:
        """Kill whatever is left inside, then remove the folders (idempotent)."""
        # Seconds, not tries: on a loaded machine killed processes take a while to leave, and a cgroup with one
        # still inside cannot be removed (then only `repogym gc` would).
        deadline = time.monotonic() + CLOSE_WAIT_S
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError as exc:  # it exited meanwhile
                    log.debug("killing %d in cgroup %s: %s", pid, self.name, exc)
            time.sleep(0.02)
        for folder in self.dirs:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
        self.dirs = []
