"""Who owns a sandbox, and a heartbeat that says the owner still lives; ``repogym gc`` reads both.

An owner id is ``<hostname>:<pid>:<start time>``; the start time (from ``/proc/<pid>/stat``) makes pid
reuse harmless. Containers carry it in the ``repogym.owner`` label, local sandbox folders in a
``.repogym-owner`` marker file.

Guaranteed: an owner on this host is alive exactly while its pid runs with the same start time (its
heartbeat is not asked: a dead owner is reaped at once); an owner on another host counts as alive while its
heartbeat file (touched every ``HEARTBEAT_INTERVAL_S`` by a daemon thread) is fresh. A process that ends
normally (or by an exception, SIGINT, or SIGTERM where :mod:`~repogym.envs.sandbox.cleanup` handles it) removes
its heartbeat file at exit, after its sandboxes are closed, so a healthy machine keeps none of owners that are
gone. Not guaranteed: an owner on another host is only seen alive if its heartbeat folder is shared with this
one (same ``REPOGYM_CACHE`` or ``REPOGYM_HEARTBEAT_DIR``); otherwise it looks dead. A process killed outright
(SIGKILL, ``os._exit``) leaves its heartbeat to ``repogym gc``.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import socket
import threading
import time
from pathlib import Path

from repogym.envs.core.paths import cache_dir

OWNER_LABEL = "repogym.owner"
MARKER_NAME = ".repogym-owner"
HEARTBEAT_INTERVAL_S = 10.0
HEARTBEAT_DIR_ENV = "REPOGYM_HEARTBEAT_DIR"

log = logging.getLogger(__name__)

_lock = threading.Lock()
# (pid, heartbeat file, stop event, thread) of the running heartbeat; after a fork the pid differs.
_heartbeat: tuple[int, Path, threading.Event, threading.Thread] | None = None
# Whether stop_heartbeat is registered with atexit. A forked child inherits the hook, which then stops the child's
# own heartbeat (it reads ``_heartbeat``, which the fork reset), so one registration serves every process.
_atexit_registered = False


def _reset_after_fork() -> None:
    # A fork copies no threads, and the lock may have been held by one that is gone.
    global _lock, _heartbeat
    _lock = threading.Lock()
    _heartbeat = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _start_time(pid: int | str) -> str | None:
    """The start time (clock ticks since boot) of ``pid``, or ``None`` if it is gone or unknowable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (the command) may hold spaces and parentheses; the fields after the last ")" do not.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def owner_id() -> str:
    """This process as an owner: ``<hostname>:<pid>:<process start time>``."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time('self') or '0'}"


def heartbeat_dir() -> Path:
    """Where heartbeat files live: ``$REPOGYM_HEARTBEAT_DIR``, else ``<repogym cache>/heartbeats``."""
    override = os.environ.get(HEARTBEAT_DIR_ENV)
    if override:
        return Path(override)
    return cache_dir() / "heartbeats"


def heartbeat_path(owner: str) -> Path:
    """The heartbeat file of ``owner`` (its id made safe as a file name)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", owner)
    return heartbeat_dir() / (name if name.strip(".") else "_" + name)  # a label "..", "" must stay a file


def _beat(path: Path, owner: str) -> None:
    try:
        if path.exists():
            os.utime(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(owner + "\n")  # gc reads the owner back from here when pruning
    except OSError:
        pass  # best effort: on this host the pid check still proves the owner alive


def _heartbeat_loop(path: Path, owner: str, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_INTERVAL_S):
        _beat(path, owner)


def ensure_heartbeat() -> None:
    """Start this process's heartbeat thread unless it runs already (again after a fork, or when the
    heartbeat folder changed, as tests do); :func:`stop_heartbeat` runs at exit."""
    global _heartbeat, _atexit_registered
    with _lock:
        owner = owner_id()
        path = heartbeat_path(owner)
        if _heartbeat is not None and _heartbeat[:2] == (os.getpid(), path):
            return
        if _heartbeat is not None:
            _stop(*_heartbeat[1:])  # the old thread (this process's) beats into a folder no longer used
        if not _atexit_registered:
            # For a process that beats without cleanup's hook; where that hook runs, close_all stops the heartbeat
            # itself once its sandboxes are closed (a heartbeat removed earlier only makes another host's gc
            # remove, a moment early, the containers close_all is removing anyway).
            atexit.register(stop_heartbeat)
            _atexit_registered = True
        _beat(path, owner)  # at once, so a gc right after sees a fresh heartbeat
        stop = threading.Event()
        thread = threading.Thread(target=_heartbeat_loop, args=(path, owner, stop), name="repogym-heartbeat",
                                  daemon=True)
        thread.start()
        _heartbeat = (os.getpid(), path, stop, thread)


def stop_heartbeat() -> None:
    """Stop this process's heartbeat and remove its file (nothing when none runs in this process). Run at exit,
    after :func:`repogym.envs.sandbox.cleanup.close_all`: an owner that ended normally leaves no heartbeat for
    ``repogym gc`` to count. A later sandbox start beats again."""
    global _heartbeat
    with _lock:
        if _heartbeat is None or _heartbeat[0] != os.getpid():
            return
        _, path, stop, thread = _heartbeat
        _heartbeat = None
        _stop(path, stop, thread)


def _stop(path: Path, stop: threading.Event, thread: threading.Thread) -> None:
    stop.set()
    if thread is not threading.current_thread():
        thread.join(timeout=HEARTBEAT_INTERVAL_S)  # a beat in progress could write the file again after the unlink
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:  # the heartbeat folder (gone read-only, another user's): gc reaps the file later
        log.info("could not remove the heartbeat %s: %s", path, exc)


def owner_labels() -> dict[str, str]:
    """Labels naming this process as the owner of a container; starts the heartbeat."""
    ensure_heartbeat()
    return {OWNER_LABEL: owner_id()}


def write_owner_marker(folder: Path, run_id: str | None = None) -> None:
    """Mark ``folder`` (a local sandbox's temp dir) as owned by this process; starts the heartbeat.

    The marker holds the owner id on its first line and, when given, ``run=<run_id>`` on the second,
    so ``repogym gc --run`` can pick the folder out.
    """
    ensure_heartbeat()
    text = owner_id() + "\n" + (f"run={run_id}\n" if run_id else "")
    (Path(folder) / MARKER_NAME).write_text(text)


def read_owner_marker(folder: Path) -> tuple[str, str | None] | None:
    """``(owner, run_id)`` from a folder's marker, or ``None`` if it has no readable marker."""
    marker = Path(folder) / MARKER_NAME
    try:
        if marker.is_symlink() or not marker.is_file():
            return None
        lines = marker.read_text(errors="replace").splitlines()
    except OSError:
        return None
    owner = lines[0].strip() if lines else ""
    run = next((line[4:].strip() for line in lines[1:] if line.startswith("run=")), None)
    return owner, run or None


def parse_owner(owner: str) -> tuple[str, int, str] | None:
    """``(host, pid, start time)`` of an owner id, or ``None`` if it is not one."""
    parts = owner.strip().rsplit(":", 2)
    if len(parts) != 3:
        return None
    host, pid, start = parts
    if not host or not pid.isdigit() or not start.isdigit():
        return None
    return host, int(pid), start


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours to signal
    return True


def owner_status(owner: str, stale_after_s: float) -> tuple[bool, str]:
    """``(alive, why)`` for an owner id; ``why`` says what decided it, for gc to print."""
    owner = owner.strip()
    parsed = parse_owner(owner)
    if parsed is not None and parsed[0] == socket.gethostname():
        # On this host the pid and its start time prove life or death at once; a heartbeat file a dead owner
        # touched seconds ago proves nothing.
        return _local_status(*parsed[1:])
    heartbeat_age = None
    if owner:
        try:
            heartbeat_age = time.time() - heartbeat_path(owner).stat().st_mtime
        except OSError:  # this owner keeps no heartbeat (none there, or unreadable): only the pid can tell
            heartbeat_age = None
    if heartbeat_age is not None and heartbeat_age < stale_after_s:
        return True, f"heartbeat {heartbeat_age:.0f} s old"
    if parsed is None:
        return False, f"unparseable owner {owner!r}"
    host = parsed[0]
    if heartbeat_age is None:
        return False, f"owner on another host ({host}), no heartbeat"
    return False, f"heartbeat stale ({heartbeat_age:.0f} s old, owner on {host})"


def _local_status(pid: int, start: str) -> tuple[bool, str]:
    """``(alive, why)`` of an owner on this host: its pid runs with the recorded start time."""
    now_start = _start_time(pid)
    if now_start is None:
        # No /proc (not Linux) or the pid is gone; without /proc fall back to a signal probe.
        if Path("/proc/self/stat").exists() or not _pid_alive(pid):
            return False, f"owner dead (pid {pid} gone)"
        return True, f"owner pid {pid} runs"
    if start in ("0", now_start):
        return True, f"owner pid {pid} runs"
    return False, f"owner dead (pid {pid} reused by another process)"


def owner_alive(owner: str, stale_after_s: float) -> bool:
    """True if the heartbeat of ``owner`` is fresher than ``stale_after_s``, or it runs on this host."""
    return owner_status(owner, stale_after_s)[0]
